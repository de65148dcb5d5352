"""Stopping runs: a graceful cancel that a worker finishes at the next boundary, a terminate
the store writes with no worker, and pausing a run until it is unpaused."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from lockgate import (
    DurableInvocationCancelled,
    EventKind,
    InlineWorkflowRunner,
    LockLost,
    ManualClock,
    RunEvent,
    RunFinishedError,
    RunNotFoundError,
    RunStatus,
    StepContext,
    TerminateOutcome,
    WorkflowClient,
    WorkflowContext,
    step,
    workflow,
)

Drive = Callable[..., Awaitable[RunStatus]]


def kinds(events: list[RunEvent]) -> list[str]:
    return [e.kind for e in events]


def done_steps(events: list[RunEvent]) -> list[str]:
    return [e.payload["step_id"] for e in events if e.kind == EventKind.STEP_DONE]


async def wait_until(condition: Callable[[], bool], *, spins: int = 200) -> None:
    for _ in range(spins):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition never held")


# -- cancel ----------------------------------------------------------------------------------


async def test_cancelling_a_parked_run_ends_it_cancelled_and_runs_finally(
    client: WorkflowClient, drive: Drive
) -> None:
    cleanups: list[str] = []
    calls = {"after": 0}

    @step(name="cxl_after_signal")
    async def after() -> None:
        calls["after"] += 1

    @workflow(name="cxl_parked")
    async def body(ctx: WorkflowContext) -> str:
        try:
            await ctx.wait_for_signal("approve")
            await after()
        finally:
            cleanups.append("released")
        return "approved"

    handle = await client.submit("cxl_parked")
    assert await drive(handle) == RunStatus.SIGNAL_WAITING
    parked_cleanups = len(cleanups)

    await handle.cancel(reason="customer withdrew", requested_by="ana")
    assert await handle.status() == RunStatus.PENDING  # queued so a worker writes the terminal
    cancel_events = [e for e in await handle.events() if e.kind == EventKind.RUN_CANCEL]
    assert len(cancel_events) == 1
    assert cancel_events[0].payload["detail"] == {
        "reason": "customer withdrew",
        "requested_by": "ana",
    }

    assert await drive(handle) == RunStatus.CANCELLED
    assert len(cleanups) == parked_cleanups + 1  # the cancelling attempt ran the finally
    assert calls["after"] == 0
    terminal = (await handle.events())[-1]
    assert terminal.kind == EventKind.RUN_ERROR
    assert terminal.payload["code"] == "cancelled"
    assert terminal.payload["detail"] == {"reason": "customer withdrew", "requested_by": "ana"}
    with pytest.raises(DurableInvocationCancelled):
        await handle.result()


async def test_a_repeated_cancel_keeps_the_first_request(
    client: WorkflowClient, drive: Drive
) -> None:
    @workflow(name="cxl_repeat")
    async def body(ctx: WorkflowContext) -> None:
        await ctx.wait_for_signal("never")

    handle = await client.submit("cxl_repeat")
    assert await drive(handle) == RunStatus.SIGNAL_WAITING
    await handle.cancel(reason="first", requested_by="ana")
    await handle.cancel(reason="second", requested_by="bo")
    assert await drive(handle) == RunStatus.CANCELLED
    events = await handle.events()
    assert len([e for e in events if e.kind == EventKind.RUN_CANCEL]) == 1
    assert events[-1].payload["detail"] == {"reason": "first", "requested_by": "ana"}


async def test_a_signal_after_cancel_is_refused(client: WorkflowClient, drive: Drive) -> None:
    @workflow(name="cxl_signal_after")
    async def body(ctx: WorkflowContext) -> Any:
        return await ctx.wait_for_signal("approve")

    handle = await client.submit("cxl_signal_after")
    assert await drive(handle) == RunStatus.SIGNAL_WAITING
    await handle.cancel()
    with pytest.raises(RunFinishedError):
        await handle.signal("approve", {"ok": True})
    assert await drive(handle) == RunStatus.CANCELLED


async def test_cancelling_a_finished_run_changes_nothing(
    client: WorkflowClient, drive: Drive
) -> None:
    @workflow(name="cxl_finished")
    async def body(ctx: WorkflowContext) -> int:
        return 5

    handle = await client.submit("cxl_finished")
    assert await drive(handle) == RunStatus.COMPLETE
    journal = await handle.events()
    await handle.cancel(reason="too late")
    assert await handle.events() == journal
    assert await handle.status() == RunStatus.COMPLETE
    assert await handle.result() == 5


async def test_cancelling_a_run_that_never_started_never_runs_the_body(
    client: WorkflowClient, drive: Drive
) -> None:
    entered = {"n": 0}

    @workflow(name="cxl_never_started")
    async def body(ctx: WorkflowContext) -> str:
        entered["n"] += 1
        return "ran"

    handle = await client.submit("cxl_never_started")
    assert await handle.status() == RunStatus.PENDING
    await handle.cancel(reason="not needed")
    assert await drive(handle) == RunStatus.CANCELLED
    assert entered["n"] == 0
    events = await handle.events()
    assert kinds(events) == [EventKind.RUN_INIT, EventKind.RUN_CANCEL, EventKind.RUN_ERROR]
    assert events[-1].payload["code"] == "cancelled"


async def test_cancelling_a_delayed_run_before_its_start_never_runs_the_body(
    client: WorkflowClient, clock: ManualClock, drive: Drive
) -> None:
    entered = {"n": 0}

    @workflow(name="cxl_delayed")
    async def body(ctx: WorkflowContext) -> str:
        entered["n"] += 1
        return "ran"

    handle = await client.submit("cxl_delayed", delay=3600)
    assert await handle.status() == RunStatus.SLEEPING
    await handle.cancel(reason="changed plans")
    assert await drive(handle) == RunStatus.CANCELLED
    assert entered["n"] == 0
    clock.advance(7200)
    assert await handle.status() == RunStatus.CANCELLED
    assert entered["n"] == 0


async def test_cancel_takes_effect_at_the_next_step_boundary(
    runner: InlineWorkflowRunner, client: WorkflowClient
) -> None:
    started = asyncio.Event()
    release = asyncio.Event()
    calls = {"first": 0, "second": 0}

    @step(name="cxl_first")
    async def first() -> str:
        calls["first"] += 1
        started.set()
        await release.wait()
        return "first done"

    @step(name="cxl_second")
    async def second() -> str:
        calls["second"] += 1
        return "second done"

    @workflow(name="cxl_boundary")
    async def body(ctx: WorkflowContext) -> list[str]:
        return [await first(), await second()]

    handle = await client.submit("cxl_boundary")
    attempt = asyncio.create_task(runner.run(handle.name, handle.run_id))
    await asyncio.wait_for(started.wait(), 1)
    await handle.cancel(reason="stop", requested_by="ops")
    release.set()
    await asyncio.wait_for(attempt, 1)

    assert await handle.status() == RunStatus.CANCELLED
    assert calls == {"first": 1, "second": 0}
    events = await handle.events()
    assert done_steps(events) == ["cxl_first"]  # the running step finished and was kept
    assert events[-1].payload["code"] == "cancelled"
    assert events[-1].payload["detail"] == {"reason": "stop", "requested_by": "ops"}


async def test_cancelling_a_sleeping_run_ends_it_without_waiting_out_the_sleep(
    client: WorkflowClient, clock: ManualClock, runner: InlineWorkflowRunner
) -> None:
    calls = {"after": 0}

    @step(name="cxl_after_sleep")
    async def after() -> None:
        calls["after"] += 1

    @workflow(name="cxl_sleeping")
    async def body(ctx: WorkflowContext) -> None:
        await ctx.sleep(3600)
        await after()

    handle = await client.submit("cxl_sleeping")
    await runner.run(handle.name, handle.run_id)
    assert await handle.status() == RunStatus.SLEEPING
    started = clock()
    await handle.cancel(reason="no longer needed")
    await runner.run(handle.name, handle.run_id)
    assert await handle.status() == RunStatus.CANCELLED
    assert clock() == started
    assert calls["after"] == 0


async def test_a_long_step_sees_a_cancel_through_its_step_context(
    runner: InlineWorkflowRunner, client: WorkflowClient, clock: ManualClock
) -> None:
    started = asyncio.Event()
    ticks: asyncio.Queue[None] = asyncio.Queue()

    @step(name="cxl_long_job")
    async def long_job(sc: StepContext) -> str:
        started.set()
        for i in range(1, 6):
            await ticks.get()
            if sc.cancelled:
                return f"stopped after {i} ticks"
        return "ran all 5 ticks"

    @step(name="cxl_after_long_job")
    async def after() -> None:
        return None

    @workflow(name="cxl_step_sees_cancel")
    async def body(ctx: WorkflowContext) -> None:
        await long_job()
        await after()

    handle = await client.submit("cxl_step_sees_cancel")
    attempt = asyncio.create_task(runner.run(handle.name, handle.run_id))
    await asyncio.wait_for(started.wait(), 1)
    ticks.put_nowait(None)
    await handle.cancel(reason="stop early")
    # Let the attempt's heartbeat come round: the store answers it with the cancel latch.
    clock.advance(runner.store.heartbeat_interval + 0.5)
    for _ in range(10):
        await asyncio.sleep(0)
    clock.advance(runner.store.lock_ttl - runner.store.heartbeat_interval)
    # Still held past the first lease's expiry: the heartbeat did run.
    assert runner.store.lock_holder(handle.name, handle.run_id) is not None
    for _ in range(4):
        ticks.put_nowait(None)
    await asyncio.wait_for(attempt, 1)

    assert await handle.status() == RunStatus.CANCELLED
    done = [e for e in await handle.events() if e.kind == EventKind.STEP_DONE]
    assert [e.payload["result"] for e in done] == ["stopped after 2 ticks"]


# -- terminate -------------------------------------------------------------------------------


async def test_terminating_a_parked_run_needs_no_worker(
    client: WorkflowClient, drive: Drive
) -> None:
    cleanups: list[str] = []

    @workflow(name="term_parked")
    async def body(ctx: WorkflowContext) -> None:
        try:
            await ctx.wait_for_signal("never")
        finally:
            cleanups.append("finally")

    handle = await client.submit("term_parked")
    assert await drive(handle) == RunStatus.SIGNAL_WAITING
    parked_cleanups = len(cleanups)

    result = await handle.terminate(reason="stuck", requested_by="oncall")
    assert result.outcome == TerminateOutcome.TERMINATED
    assert result.run_id == handle.run_id
    assert await handle.status() == RunStatus.TERMINATED
    assert len(cleanups) == parked_cleanups  # no worker ran anything
    terminal = (await handle.events())[-1]
    assert terminal.kind == EventKind.RUN_ERROR
    assert terminal.payload["code"] == "terminated"
    assert terminal.payload["detail"]["reason"] == "stuck"
    assert terminal.payload["detail"]["requested_by"] == "oncall"
    with pytest.raises(DurableInvocationCancelled):
        await handle.result()
    with pytest.raises(RunFinishedError):
        await handle.signal("never")


async def test_terminating_an_in_flight_holder_fences_out_its_writes(
    runner: InlineWorkflowRunner, client: WorkflowClient
) -> None:
    started = asyncio.Event()
    release = asyncio.Event()
    calls = {"slow": 0, "next": 0}

    @step(name="term_slow")
    async def slow() -> str:
        calls["slow"] += 1
        started.set()
        await release.wait()
        return "finished late"

    @step(name="term_next")
    async def next_step() -> str:
        calls["next"] += 1
        return "never"

    @workflow(name="term_in_flight")
    async def body(ctx: WorkflowContext) -> list[str]:
        return [await slow(), await next_step()]

    handle = await client.submit("term_in_flight")
    attempt = asyncio.create_task(runner.run(handle.name, handle.run_id))
    await asyncio.wait_for(started.wait(), 1)
    lease = runner.store.lock_holder(handle.name, handle.run_id)
    assert lease is not None

    result = await handle.terminate(reason="hung step")
    assert result.outcome == TerminateOutcome.TERMINATED
    assert runner.store.lock_holder(handle.name, handle.run_id) is None
    terminated_journal = await handle.events()

    release.set()
    await asyncio.wait_for(attempt, 1)

    events = await handle.events()
    assert events == terminated_journal  # the holder's step:done was refused
    assert [e for e in events if e.kind == EventKind.STEP_DONE] == []
    assert events[-1].payload["code"] == "terminated"
    assert await handle.status() == RunStatus.TERMINATED
    assert calls == {"slow": 1, "next": 0}
    # Any later fenced append under the old lease is refused whole.
    stray = RunEvent(EventKind.STEP_DONE, {"call_index": 0, "step_id": "term_slow"}, handle.run_id)
    with pytest.raises(LockLost):
        runner.store.append_events(handle.name, handle.run_id, [stray], fence=lease)
    assert await handle.events() == terminated_journal


async def test_a_terminated_holder_stands_down_at_its_next_heartbeat(
    runner: InlineWorkflowRunner, client: WorkflowClient, clock: ManualClock
) -> None:
    started = asyncio.Event()
    never = asyncio.Event()
    stopped: list[str] = []

    @step(name="term_hung")
    async def hung() -> None:
        started.set()
        try:
            await never.wait()
        except asyncio.CancelledError:
            stopped.append("cancelled")
            raise

    @workflow(name="term_hung_holder")
    async def body(ctx: WorkflowContext) -> None:
        await hung()

    handle = await client.submit("term_hung_holder")
    attempt = asyncio.create_task(runner.run(handle.name, handle.run_id))
    await asyncio.wait_for(started.wait(), 1)
    assert (await handle.terminate(reason="hung")).outcome == TerminateOutcome.TERMINATED
    journal = await handle.events()
    clock.advance(runner.store.heartbeat_interval)
    events = await asyncio.wait_for(attempt, 1)  # abandoned quietly, not raised
    assert stopped == ["cancelled"]
    assert events == journal
    assert await handle.status() == RunStatus.TERMINATED


async def test_terminate_twice_and_terminate_unknown(client: WorkflowClient, drive: Drive) -> None:
    @workflow(name="term_twice")
    async def body(ctx: WorkflowContext) -> None:
        await ctx.wait_for_signal("never")

    handle = await client.submit("term_twice")
    assert await drive(handle) == RunStatus.SIGNAL_WAITING
    assert (await handle.terminate()).outcome == TerminateOutcome.TERMINATED
    journal = await handle.events()
    again = await client.terminate("term_twice", handle.run_id, reason="again")
    assert again.outcome == TerminateOutcome.ALREADY_ENDED
    assert await handle.events() == journal
    with pytest.raises(RunNotFoundError):
        await client.terminate("term_twice", "no-such-run")


async def test_terminating_a_completed_run_writes_nothing(
    client: WorkflowClient, drive: Drive
) -> None:
    @workflow(name="term_completed")
    async def body(ctx: WorkflowContext) -> int:
        return 7

    handle = await client.submit("term_completed")
    assert await drive(handle) == RunStatus.COMPLETE
    assert (await handle.terminate()).outcome == TerminateOutcome.ALREADY_ENDED
    assert await handle.status() == RunStatus.COMPLETE
    assert await handle.result() == 7


async def test_terminating_a_queued_run_never_runs_the_body(
    runner: InlineWorkflowRunner, client: WorkflowClient
) -> None:
    entered = {"n": 0}

    @workflow(name="term_queued")
    async def body(ctx: WorkflowContext) -> None:
        entered["n"] += 1

    handle = await client.submit("term_queued")
    assert (await handle.terminate()).outcome == TerminateOutcome.TERMINATED
    assert runner.store.get_pending_count("term_queued") == 0
    assert await runner.run_next("term_queued") is None
    await runner.run("term_queued", handle.run_id)
    assert entered["n"] == 0
    assert await handle.status() == RunStatus.TERMINATED


# -- pause -----------------------------------------------------------------------------------


async def test_pause_parks_the_run_at_its_next_boundary_until_unpaused(
    client: WorkflowClient, drive: Drive
) -> None:
    calls = {"one": 0, "two": 0}

    @step(name="pause_one")
    async def one() -> int:
        calls["one"] += 1
        return 1

    @step(name="pause_two")
    async def two() -> int:
        calls["two"] += 1
        return 2

    @workflow(name="pause_unpause")
    async def body(ctx: WorkflowContext) -> int:
        return await one() + await two()

    handle = await client.submit("pause_unpause")
    await handle.pause()
    assert await drive(handle) == RunStatus.PAUSED
    assert calls == {"one": 0, "two": 0}
    assert EventKind.RUN_PAUSED in kinds(await handle.events())

    await client.unpause("pause_unpause", handle.run_id)
    assert await handle.status() == RunStatus.PENDING
    assert await drive(handle) == RunStatus.COMPLETE
    assert await handle.result() == 3
    assert calls == {"one": 1, "two": 1}
    events = kinds(await handle.events())
    assert events.index(EventKind.RUN_PAUSED) < events.index(EventKind.RUN_UNPAUSED)


async def test_unpause_before_the_pause_took_hold_lifts_it(
    client: WorkflowClient, drive: Drive
) -> None:
    @step(name="pause_lifted_step")
    async def work() -> str:
        return "ran"

    @workflow(name="pause_lifted")
    async def body(ctx: WorkflowContext) -> str:
        result: str = await work()
        return result

    handle = await client.submit("pause_lifted")
    await client.pause("pause_lifted", handle.run_id)
    await handle.unpause()
    assert await drive(handle) == RunStatus.COMPLETE
    assert await handle.result() == "ran"
    assert EventKind.RUN_PAUSED not in kinds(await handle.events())


async def test_cancelling_a_paused_run_ends_it_cancelled(
    client: WorkflowClient, drive: Drive
) -> None:
    calls = {"n": 0}

    @step(name="pause_cancel_step")
    async def work() -> None:
        calls["n"] += 1

    @workflow(name="pause_then_cancel")
    async def body(ctx: WorkflowContext) -> None:
        await work()

    handle = await client.submit("pause_then_cancel")
    await handle.pause()
    assert await drive(handle) == RunStatus.PAUSED
    await handle.cancel(reason="abandon")
    assert await drive(handle) == RunStatus.CANCELLED
    assert calls["n"] == 0


async def test_pause_and_unpause_of_an_unknown_run(client: WorkflowClient) -> None:
    with pytest.raises(RunNotFoundError):
        await client.pause("pause_unpause", "missing")
    with pytest.raises(RunNotFoundError):
        await client.unpause("pause_unpause", "missing")
