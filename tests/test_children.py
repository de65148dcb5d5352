"""Child runs, fan-out and signals sent from a body, on memory, SQLite and Valkey: a child's
result or failure comes back to its parent, a timeout terminates it, ``parent_close`` decides
what becomes of it when the parent ends, its gates are its own, a fan-out keeps its bound
and its order, a body's signal is sent once, and ``terminate`` cascades to grandchildren."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from lockgate import (
    ChildWorkflowError,
    CloseResult,
    DurableInvocationError,
    EventKind,
    InlineWorkflowRunner,
    InvalidParamsError,
    Limit,
    ManualClock,
    MemoryStore,
    RetryPolicy,
    RunEvent,
    RunStatus,
    SQLiteStore,
    Store,
    TerminateOutcome,
    ValkeyStore,
    WorkflowClient,
    WorkflowContext,
    step,
    workflow,
)
from lockgate.runs._chains import live_run
from valkey_server import shared_url

NO_RETRY = RetryPolicy(max_attempts=1)


def _make(kind: str, clock: ManualClock, tmp_path: Path) -> Store:
    if kind == "memory":
        return MemoryStore(clock=clock, lock_ttl=30.0, heartbeat_interval=10.0)
    if kind == "sqlite":
        return SQLiteStore(
            tmp_path / "children.db",
            clock=clock,
            lock_ttl=30.0,
            heartbeat_interval=10.0,
            synchronous="normal",
        )
    return ValkeyStore(
        shared_url(),
        namespace=f"ch{uuid.uuid4().hex[:12]}",
        clock=clock,
        lock_ttl=30.0,
        heartbeat_interval=10.0,
    )


@pytest.fixture(params=["memory", "sqlite", "valkey"])
def store(request: pytest.FixtureRequest, clock: ManualClock, tmp_path: Path) -> Iterator[Store]:
    backend = _make(request.param, clock, tmp_path)
    yield backend
    backend.close()


@pytest.fixture
async def runner(store: Store, clock: ManualClock) -> AsyncIterator[InlineWorkflowRunner]:
    inline = InlineWorkflowRunner(store=store, clock=clock)
    await inline.start()
    yield inline
    await inline.aclose()


@pytest.fixture
def client(runner: InlineWorkflowRunner) -> WorkflowClient:
    return runner.client


#: Every workflow these tests define: ``settle`` runs whatever of them is queued.
NAMES: list[str] = []


def named(name: str) -> str:
    NAMES.append(name)
    return name


async def settle(runner: InlineWorkflowRunner, *, rounds: int = 500) -> int:
    """Run queued runs of every workflow here until none is queued (no clock moved)."""
    ran = 0
    for _ in range(rounds):
        moved = False
        for name in NAMES:
            if await runner.run_next(name) is not None:
                moved, ran = True, ran + 1
        if not moved:
            return ran
    raise AssertionError("runs kept coming")


def of_kind(events: list[RunEvent], kind: str) -> list[RunEvent]:
    return [e for e in events if e.kind == kind]


# -- workflows --------------------------------------------------------------------------------

RAN: dict[str, int] = {}


@workflow(name=named("ch_double"))
async def double(ctx: WorkflowContext, n: int) -> int:
    RAN[ctx.run_id] = RAN.get(ctx.run_id, 0) + 1
    return n * 2


@workflow(name=named("ch_fails"))
async def fails(ctx: WorkflowContext) -> None:
    raise ValueError("child broke")


@workflow(name=named("ch_waits"))
async def waits(ctx: WorkflowContext) -> Any:
    return await ctx.wait_for_signal("go")


@workflow(name=named("ch_parent"))
async def parent(ctx: WorkflowContext, n: int) -> int:
    return int(await ctx.run_child(double, {"n": n})) + 1


@workflow(name=named("ch_catches"))
async def catches(ctx: WorkflowContext) -> dict[str, str]:
    try:
        await ctx.run_child("ch_fails")
    except ChildWorkflowError as exc:
        return {"status": exc.status, "run_id": exc.run_id, "name": exc.name}
    return {}


@workflow(name=named("ch_times_out"))
async def times_out(ctx: WorkflowContext) -> str:
    try:
        await ctx.run_child(waits, timeout=10)
    except ChildWorkflowError as exc:
        return exc.status
    return "ended"


@workflow(name=named("ch_keeps"))
async def keeps(ctx: WorkflowContext, policy: str) -> Any:
    return await ctx.run_child(waits, parent_close=policy)


@workflow(name=named("ch_gated"), concurrency=Limit(key="tenant", max=1))
async def gated(ctx: WorkflowContext, tenant: str) -> str:
    return tenant


@workflow(name=named("ch_starts_gated"))
async def starts_gated(ctx: WorkflowContext) -> str:
    return str(await ctx.run_child(gated, {"tenant": "acme"}))


@workflow(name=named("ch_fans"))
async def fans(ctx: WorkflowContext, count: int, most: int) -> list[int]:
    return await ctx.fan_out(double, [{"n": i} for i in range(count)], max_in_flight=most)


@workflow(name=named("ch_fans_fail"))
async def fans_fail(ctx: WorkflowContext) -> dict[str, Any]:
    with contextlib.suppress(InvalidParamsError):
        await ctx.fan_out("ch_double", [{"n": 1}, {"n": "x"}])
    try:
        await ctx.fan_out(fails, [{}, {}])
    except ChildWorkflowError as exc:
        return {"status": exc.status, "run_id": exc.run_id}
    return {}


STEP_CALLS: list[int] = []


@step(retry=NO_RETRY)
async def square(n: int) -> int:
    STEP_CALLS.append(n)
    return n * n


@workflow(name=named("ch_fans_steps"))
async def fans_steps(ctx: WorkflowContext) -> list[int]:
    squares = await ctx.fan_out(square, range(6), max_in_flight=2)
    await ctx.wait_for_signal("again")
    return squares


@workflow(name=named("ch_sends"))
async def sends(ctx: WorkflowContext, target: str) -> str:
    answer = await ctx.signal(waits, target, "go", {"from": ctx.run_id})
    await ctx.wait_for_signal("done")
    return answer


@workflow(name=named("ch_grand"))
async def grand(ctx: WorkflowContext) -> Any:
    return await ctx.run_child(waits)


@workflow(name=named("ch_top"))
async def top(ctx: WorkflowContext) -> Any:
    return await ctx.run_child(grand)


# -- run_child --------------------------------------------------------------------------------


async def test_a_childs_result_comes_back_to_its_parent(
    client: WorkflowClient, runner: InlineWorkflowRunner
) -> None:
    handle = await client.submit("ch_parent", {"n": 20})
    await settle(runner)
    assert await handle.status() == RunStatus.COMPLETE
    assert await handle.result() == 41
    child_id = f"{handle.run_id}.child0"
    assert RAN[child_id] == 1
    init = (await client.events("ch_double", child_id))[0].payload
    assert init["provenance"]["source"]["parent"]["run_id"] == handle.run_id
    assert init["provenance"]["source"]["parent_close"] == "cancel"
    journal = await handle.events()
    pending = of_kind(journal, EventKind.STEP_PENDING)
    assert [e.payload["members"][0]["run_id"] for e in pending] == [child_id]
    assert of_kind(journal, EventKind.STEP_DONE)[-1].payload["result"] == 40


#: Real seconds a handle's result() may take before the test says it never came.
RESULT_DEADLINE_S = 30.0


async def test_an_inline_parents_result_drives_its_child_and_its_fan_out_members(
    client: WorkflowClient, runner: InlineWorkflowRunner
) -> None:
    # No settle, no run_until_idle on the children's workflow: result() alone must do it.
    parent = await client.submit("ch_parent", {"n": 20})
    assert await asyncio.wait_for(parent.result(), RESULT_DEADLINE_S) == 41
    assert RAN[f"{parent.run_id}.child0"] == 1
    fanned = await client.submit("ch_fans", {"count": 5, "most": 2})
    assert await asyncio.wait_for(fanned.result(), RESULT_DEADLINE_S) == [0, 2, 4, 6, 8]
    assert [RAN[f"{fanned.run_id}.fan0.{i}"] for i in range(5)] == [1] * 5


async def test_a_failed_child_raises_child_workflow_error_in_its_parent(
    client: WorkflowClient, runner: InlineWorkflowRunner
) -> None:
    handle = await client.submit("ch_catches")
    await settle(runner)
    assert await handle.result() == {
        "status": "error",
        "run_id": f"{handle.run_id}.child0",
        "name": "ch_fails",
    }


async def test_a_child_past_its_timeout_is_terminated(
    client: WorkflowClient, runner: InlineWorkflowRunner, clock: ManualClock
) -> None:
    handle = await client.submit("ch_times_out")
    await settle(runner)
    assert await handle.status() == RunStatus.SIGNAL_WAITING
    clock.advance(5)
    await runner.fire_due_timers()  # the backstop: the child still runs, the parent parks again
    await settle(runner)
    assert await handle.status() == RunStatus.SIGNAL_WAITING
    clock.advance(5)
    await runner.fire_due_timers()
    await settle(runner)
    assert await handle.result() == "timed_out"
    assert await client.status("ch_waits", f"{handle.run_id}.child0") == RunStatus.TERMINATED


@pytest.mark.parametrize("policy", ["cancel", "abandon"])
async def test_parent_close_decides_what_becomes_of_an_open_child(
    client: WorkflowClient, runner: InlineWorkflowRunner, policy: str
) -> None:
    handle = await client.submit("ch_keeps", {"policy": policy})
    await settle(runner)
    child = client.handle("ch_waits", f"{handle.run_id}.child0")
    assert await child.status() == RunStatus.SIGNAL_WAITING
    await handle.cancel(reason="test")
    await settle(runner)
    assert await handle.status() == RunStatus.CANCELLED
    expected = RunStatus.CANCELLED if policy == "cancel" else RunStatus.SIGNAL_WAITING
    assert await child.status() == expected


async def test_a_child_is_stamped_with_its_own_gates(
    client: WorkflowClient, runner: InlineWorkflowRunner
) -> None:
    handle = await client.submit("ch_starts_gated")
    await settle(runner)
    assert await handle.result() == "acme"
    init = (await client.events("ch_gated", f"{handle.run_id}.child0"))[0].payload
    assert init["gates"]["concurrency"] == {"key": "acme", "max": 1}


async def test_bad_child_calls_raise_at_the_call(
    client: WorkflowClient, runner: InlineWorkflowRunner
) -> None:
    @workflow(name=named("ch_bad_calls"))
    async def bad(ctx: WorkflowContext) -> list[str]:
        raised = []
        for call in (
            lambda: ctx.run_child(double, {"m": 1}),
            lambda: ctx.run_child(double, {"n": 1}, parent_close="orphan"),
            lambda: ctx.run_child(double, {"n": 1}, timeout=-1),
            lambda: ctx.run_child(len, {}),
            lambda: ctx.fan_out(double, [], max_in_flight=0),
        ):
            try:
                await call()
            except (TypeError, ValueError, InvalidParamsError) as exc:
                raised.append(type(exc).__name__)
        return raised

    handle = await client.submit("ch_bad_calls")
    await settle(runner)
    assert await handle.result() == [
        "InvalidParamsError",
        "ValueError",
        "ValueError",
        "TypeError",
        "ValueError",
    ]
    assert of_kind(await handle.events(), EventKind.STEP_PENDING) == []


# -- fan-out ----------------------------------------------------------------------------------


async def test_a_fan_out_keeps_its_bound_and_its_order(
    client: WorkflowClient, runner: InlineWorkflowRunner, store: Store
) -> None:
    handle = await client.submit("ch_fans", {"count": 7, "most": 3})
    await runner.run("ch_fans", handle.run_id)
    ids = [f"{handle.run_id}.fan0.{i}" for i in range(7)]
    assert [store.get_run("ch_double", i) is not None for i in ids] == [True] * 3 + [False] * 4
    await runner.run_next("ch_double")  # one ends: its notice lets the parent start one more
    await runner.run("ch_fans", handle.run_id)
    assert sum(store.get_run("ch_double", i) is not None for i in ids) == 4
    await settle(runner)
    assert await handle.result() == [2 * i for i in range(7)]
    assert [RAN[i] for i in ids] == [1] * 7


async def test_a_failing_member_fails_the_fan_out(
    client: WorkflowClient, runner: InlineWorkflowRunner
) -> None:
    handle = await client.submit("ch_fans_fail")
    await settle(runner)
    result = await handle.result()
    assert result["status"] == "error"
    # The bad params raised at the call and took no call position: the fan-out is call 0.
    assert result["run_id"] in {f"{handle.run_id}.fan0.0", f"{handle.run_id}.fan0.1"}


async def test_a_fan_out_of_steps_runs_each_item_once_across_replays(
    client: WorkflowClient, runner: InlineWorkflowRunner
) -> None:
    STEP_CALLS.clear()
    handle = await client.submit("ch_fans_steps")
    await settle(runner)
    assert sorted(STEP_CALLS) == list(range(6))
    await handle.signal("again", {})
    await settle(runner)  # the replay serves every member from the journal
    assert await handle.result() == [i * i for i in range(6)]
    assert sorted(STEP_CALLS) == list(range(6))


# -- signals sent from a body -----------------------------------------------------------------


async def test_a_signal_from_a_body_is_sent_once_across_replays(
    client: WorkflowClient, runner: InlineWorkflowRunner
) -> None:
    target = await client.submit("ch_waits")
    await runner.run("ch_waits", target.run_id)
    sender = await client.submit("ch_sends", {"target": target.run_id})
    await runner.run("ch_sends", sender.run_id)
    await target.signal("go", {"from": "elsewhere"})  # a second one, to tell them apart
    await sender.signal("done", {})
    await runner.run("ch_sends", sender.run_id)  # the replay reaches ctx.signal again
    assert await sender.result() == "delivered"
    await settle(runner)
    assert await target.result() == {"from": sender.run_id}
    sent = [e for e in await sender.events() if e.payload.get("kind") == "signal_send"]
    assert [e.kind for e in sent] == [EventKind.STEP_DONE]


async def test_a_signal_to_an_ended_run_raises_and_is_journaled(
    client: WorkflowClient, runner: InlineWorkflowRunner
) -> None:
    done = await client.submit("ch_double", {"n": 1})
    await settle(runner)

    @workflow(name=named("ch_sends_late"))
    async def sends_late(ctx: WorkflowContext, target: str) -> str:
        try:
            await ctx.signal("ch_double", target, "go")
        except Exception as exc:
            return type(exc).__name__
        return "sent"

    handle = await client.submit("ch_sends_late", {"target": done.run_id})
    await settle(runner)
    assert await handle.result() == "RunFinishedError"


# -- terminate cascades -----------------------------------------------------------------------


async def test_terminate_cascades_to_children_and_grandchildren(
    client: WorkflowClient, runner: InlineWorkflowRunner
) -> None:
    handle = await client.submit("ch_top")
    await settle(runner)
    child, grandchild = f"{handle.run_id}.child0", f"{handle.run_id}.child0.child0"
    assert await client.status("ch_waits", grandchild) == RunStatus.SIGNAL_WAITING
    result = await handle.terminate(reason="enough")
    assert result.outcome == TerminateOutcome.TERMINATED
    assert result.children == CloseResult(terminated=2)
    assert result.ended == (("ch_grand", child), ("ch_waits", grandchild))
    assert await client.status("ch_grand", child) == RunStatus.TERMINATED
    assert await client.status("ch_waits", grandchild) == RunStatus.TERMINATED
    again = await handle.terminate()
    assert (again.outcome, again.children, again.ended) == (
        TerminateOutcome.ALREADY_ENDED,
        CloseResult(),
        (),
    )


async def test_terminate_leaves_abandoned_children_running(
    client: WorkflowClient, runner: InlineWorkflowRunner
) -> None:
    handle = await client.submit("ch_keeps", {"policy": "abandon"})
    await settle(runner)
    result = await handle.terminate()
    assert result.children == CloseResult(abandoned=1)
    assert await client.status("ch_waits", f"{handle.run_id}.child0") == RunStatus.SIGNAL_WAITING


async def test_a_repeat_terminate_finishes_the_cascade_of_an_earlier_one(
    client: WorkflowClient, runner: InlineWorkflowRunner, store: Store
) -> None:
    handle = await client.submit("ch_keeps", {"policy": "cancel"})
    await settle(runner)
    store.terminate_run("ch_keeps", handle.run_id)  # the store's half; the cascade never ran
    result = await handle.terminate()
    assert result.outcome == TerminateOutcome.ALREADY_ENDED
    assert result.children == CloseResult(terminated=1)


async def test_a_child_whose_submit_has_not_landed_starts_cancelled(
    client: WorkflowClient, runner: InlineWorkflowRunner, store: Store
) -> None:
    handle = await client.submit("ch_keeps", {"policy": "cancel"})
    store.claim_run("ch_keeps", handle.run_id, "lease-x")
    child_id = f"{handle.run_id}.child0"
    member = {"i": 0, "name": "ch_waits", "run_id": child_id, "parent_close": "cancel"}
    pending = RunEvent(
        EventKind.STEP_PENDING,
        {"call_index": 0, "step_id": "ch_waits", "kind": "child", "members": [member]},
        handle.run_id,
    )
    store.append_events("ch_keeps", handle.run_id, [pending], fence="lease-x")
    result = await handle.terminate()
    assert result.children == CloseResult(cancelled=1)
    store.submit_run("ch_waits", child_id, {})  # the parent's submit lands late
    await settle(runner)
    assert await client.status("ch_waits", child_id) == RunStatus.CANCELLED


async def test_a_child_the_store_quarantines_tells_its_parent_at_once(
    client: WorkflowClient, runner: InlineWorkflowRunner, store: Store, clock: ManualClock
) -> None:
    """A child whose worker keeps dying is ended by the store (quarantined) when a worker
    finds its lease lapsed; its own attempt never reached an end to send the notice, so the
    orphan scan sends it: the parent is queued at once, not at its backstop timer."""
    from lockgate.runs._family import after_store_ended
    from lockgate.stores._calls import call_store
    from lockgate.stores._poison import PoisonPolicy

    handle = await client.submit("ch_parent", {"n": 1})
    await runner.run(handle.name, handle.run_id)  # starts the child, then parks
    child = f"{handle.run_id}.child0"
    assert await handle.status() == RunStatus.SIGNAL_WAITING
    store.claim_run("ch_double", child, "dying-worker")
    clock.advance(31.0)  # its lease lapses: the worker died
    recovered = store.recover_pending_runs("ch_double", poison=PoisonPolicy(max_retries=0))
    assert recovered == [child]
    assert await client.status("ch_double", child) == RunStatus.QUARANTINED

    async def io(method: Any, *args: Any, **kwargs: Any) -> Any:
        return await call_store(store, method, *args, **kwargs)

    await after_store_ended(io, store, "now", "ch_double", child)
    assert await handle.status() == RunStatus.PENDING  # woken by the notice, not the timer
    await settle(runner)
    with pytest.raises(DurableInvocationError, match=f"child run '{child}' .* ended quarantined"):
        await handle.result()


@workflow(name=named("ch_chain_child"))
async def chain_child(ctx: WorkflowContext, hop: int = 0) -> Any:
    if hop == 0:
        await ctx.continue_as_new({"hop": 1})
    return await ctx.wait_for_signal("go")


@workflow(name=named("ch_parent_of_chain"))
async def parent_of_chain(ctx: WorkflowContext) -> Any:
    return await ctx.run_child(chain_child, {})


async def test_a_parent_cancelled_cancels_its_child_where_the_child_continued_to(
    client: WorkflowClient, runner: InlineWorkflowRunner, store: Store
) -> None:
    """A child that continued as new lives on in its successor: the parent's cancel reaches
    that run, not the ended one it started."""
    handle = await client.submit("ch_parent_of_chain", run_id="pc")
    await settle(runner)
    tail, info = await live_run(client.store, "ch_chain_child", "pc.child0")
    assert (tail, info.status) == ("pc.child0.c1", RunStatus.SIGNAL_WAITING)
    await handle.cancel(reason="stop")
    await settle(runner)
    assert await handle.status() == RunStatus.CANCELLED
    assert await client.status("ch_chain_child", "pc.child0") == RunStatus.CANCELLED


async def test_a_parent_the_store_quarantines_closes_its_cancel_children(
    client: WorkflowClient, runner: InlineWorkflowRunner, store: Store, clock: ManualClock
) -> None:
    """A parent whose worker keeps dying is ended by the store, not by its attempt, so its
    own ``parent_close`` never ran: the worker that found the lapse cancels its children."""
    from lockgate.runs._family import after_store_ended
    from lockgate.stores._calls import call_store
    from lockgate.stores._poison import PoisonPolicy

    handle = await client.submit("ch_keeps", {"policy": "cancel"})
    await runner.run(handle.name, handle.run_id)
    child = f"{handle.run_id}.child0"
    await settle(runner)
    assert await client.status("ch_waits", child) == RunStatus.SIGNAL_WAITING
    store.send_signal(handle.name, handle.run_id, f"lockgate.child:{child}", {}, "t")
    store.claim_run(handle.name, handle.run_id, "dying-worker")
    clock.advance(31.0)
    store.recover_pending_runs(handle.name, poison=PoisonPolicy(max_retries=0))
    assert await handle.status() == RunStatus.QUARANTINED

    async def io(method: Any, *args: Any, **kwargs: Any) -> Any:
        return await call_store(store, method, *args, **kwargs)

    await after_store_ended(io, store, "now", handle.name, handle.run_id)
    await settle(runner)
    assert await client.status("ch_waits", child) == RunStatus.CANCELLED
