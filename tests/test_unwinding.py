"""How a body unwinds: parks, cancels and cleanup in ``finally``, retries of in-doubt steps,
and the journal limits a store imposes."""

from __future__ import annotations

import warnings
from collections.abc import Awaitable, Callable

import pytest

from lockgate import (
    DurableInvocationCancelled,
    InlineWorkflowRunner,
    ManualClock,
    MemoryStore,
    NestedDurableOperationError,
    RunStatus,
    StepContext,
    WorkflowClient,
    WorkflowContext,
    step,
    workflow,
)

Drive = Callable[..., Awaitable[RunStatus]]

CLEANUPS: list[str] = []


class Crash(BaseException):
    """The process died here."""


@step(name="unwind_cleanup")
async def cleanup(tag: str) -> str:
    CLEANUPS.append(tag)
    return tag


@workflow(name="unwind_finally_with_sleep")
async def finally_with_sleep(ctx: WorkflowContext) -> str:
    try:
        await ctx.sleep(10)
        return "slept"
    finally:
        await cleanup("after sleep")


async def test_a_park_does_not_run_durable_cleanup_in_finally(
    client: WorkflowClient, runner: InlineWorkflowRunner, drive: Drive
) -> None:
    CLEANUPS.clear()
    handle = await client.submit("unwind_finally_with_sleep")
    await runner.run(handle.name, handle.run_id)
    assert await handle.status() == RunStatus.SLEEPING
    assert CLEANUPS == []
    assert await drive(handle) == RunStatus.COMPLETE
    assert await handle.result() == "slept"
    assert CLEANUPS == ["after sleep"]


@workflow(name="unwind_compensate_on_cancel")
async def compensate_on_cancel(ctx: WorkflowContext) -> str:
    try:
        await ctx.wait_for_signal("never")
        return "signalled"
    finally:
        await cleanup("compensated")


async def test_a_cancelled_body_may_run_steps_to_clean_up(
    client: WorkflowClient, runner: InlineWorkflowRunner, drive: Drive
) -> None:
    CLEANUPS.clear()
    handle = await client.submit("unwind_compensate_on_cancel")
    assert await drive(handle) == RunStatus.SIGNAL_WAITING
    await handle.cancel(reason="customer left")
    assert await drive(handle) == RunStatus.CANCELLED
    assert CLEANUPS == ["compensated"]
    done = [e for e in await handle.events() if e.kind == "step:done"]
    assert [e.payload["result"] for e in done] == ["compensated"]
    with pytest.raises(DurableInvocationCancelled):
        await handle.result()


@workflow(name="unwind_sleep_while_cancelled")
async def sleep_while_cancelled(ctx: WorkflowContext) -> str:
    try:
        await ctx.wait_for_signal("never")
        return "signalled"
    finally:
        await ctx.sleep(5)


async def test_a_cleanup_that_waits_under_a_cancel_ends_the_run_cancelled(
    client: WorkflowClient, drive: Drive
) -> None:
    handle = await client.submit("unwind_sleep_while_cancelled")
    assert await drive(handle) == RunStatus.SIGNAL_WAITING
    await handle.cancel()
    assert await drive(handle) == RunStatus.CANCELLED


SEEN_ATTEMPTS: list[int] = []


@step(name="unwind_in_doubt")
async def in_doubt(ctx: StepContext) -> int:
    SEEN_ATTEMPTS.append(ctx.attempt)
    if len(SEEN_ATTEMPTS) == 1:
        raise Crash("died mid-step")
    return ctx.attempt


@workflow(name="unwind_in_doubt_attempts")
async def in_doubt_attempts(ctx: WorkflowContext) -> int:
    return await in_doubt()


async def test_an_in_doubt_step_runs_again_as_its_next_attempt(
    client: WorkflowClient, runner: InlineWorkflowRunner, store: MemoryStore, clock: ManualClock
) -> None:
    SEEN_ATTEMPTS.clear()
    handle = await client.submit("unwind_in_doubt_attempts")
    with pytest.raises(Crash):
        await runner.run(handle.name, handle.run_id)
    clock.advance(store.lock_ttl + 1)
    assert store.recover_pending_runs(handle.name) == [handle.run_id]
    await runner.run(handle.name, handle.run_id)
    assert SEEN_ATTEMPTS == [1, 2]
    assert await handle.result() == 2


@step(name="unwind_nested_inner")
async def inner() -> int:
    return 1


CALLS: list[str] = []


@step(name="unwind_nested_outer")
async def outer() -> int:
    CALLS.append("outer")
    return await inner()


@workflow(name="unwind_nested")
async def nested(ctx: WorkflowContext) -> int:
    try:
        return await outer()
    except NestedDurableOperationError:
        return -1


async def test_a_nested_durable_call_is_a_mistake_and_is_not_retried(
    client: WorkflowClient, drive: Drive
) -> None:
    CALLS.clear()
    handle = await client.submit("unwind_nested")
    assert await drive(handle) == RunStatus.COMPLETE
    assert await handle.result() == -1
    assert CALLS == ["outer"]


@step(name="unwind_count")
async def count(i: int) -> int:
    return i


@workflow(name="unwind_many_steps", max_event_count_per_run=None)
async def many_steps(ctx: WorkflowContext, n: int) -> int:
    for i in range(n):
        await count(i)
    return n


async def test_a_store_that_keeps_fewer_events_lowers_the_cap(clock: ManualClock) -> None:
    store = MemoryStore(clock=clock, max_replay_entries=12)
    runner = InlineWorkflowRunner(store=store, clock=clock)
    handle = await runner.client.submit("unwind_many_steps", {"n": 20})
    await runner.run(handle.name, handle.run_id)
    last = store.get_last_event(handle.name, handle.run_id)
    assert last is not None
    assert last.kind == "run:error"
    assert last.payload["code"] == "stream_overflow"
    assert last.run_seq == 12  # the whole journal stays within what the store keeps
    assert len(store.load_run(handle.name, handle.run_id)) == 12


async def test_a_body_that_now_stops_early_is_refused_on_a_live_attempt(
    client: WorkflowClient, runner: InlineWorkflowRunner, store: MemoryStore, clock: ManualClock
) -> None:
    @workflow(name="unwind_shrinking")
    async def two_steps(ctx: WorkflowContext) -> str:
        await count(1)
        await count(2)
        await ctx.wait_for_signal("go")
        return "two"

    handle = await client.submit("unwind_shrinking")
    await runner.run(handle.name, handle.run_id)
    assert await handle.status() == RunStatus.SIGNAL_WAITING

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")

        @workflow(name="unwind_shrinking")
        async def one_step(ctx: WorkflowContext) -> str:
            await count(1)
            return "one"

    await handle.signal("go")
    await runner.run(handle.name, handle.run_id)
    last = (await handle.events())[-1]
    assert last.kind == "run:error"
    assert last.payload["code"] == "nondeterminism"
    assert "no longer makes" in last.payload["message"]


TYPES_SEEN: list[str] = []


@step(name="unwind_tuple")
async def pair():  # type: ignore[no-untyped-def]
    return (1, 2)


@step(name="unwind_then_die")
async def then_die(n: int) -> int:
    if len(TYPES_SEEN) == 1:
        raise Crash("died after the first step")
    return n


@workflow(name="unwind_unannotated")
async def unannotated(ctx: WorkflowContext) -> int:
    value = await pair()
    TYPES_SEEN.append(type(value).__name__)
    return await then_die(len(value))


async def test_an_unannotated_result_is_the_same_json_data_live_and_on_replay(
    client: WorkflowClient, runner: InlineWorkflowRunner, store: MemoryStore, clock: ManualClock
) -> None:
    TYPES_SEEN.clear()
    handle = await client.submit("unwind_unannotated")
    with pytest.raises(Crash):
        await runner.run(handle.name, handle.run_id)
    clock.advance(store.lock_ttl + 1)
    await runner.run(handle.name, handle.run_id)
    assert TYPES_SEEN == ["list", "list"]
    assert await handle.result() == 2


@workflow(name="unwind_hand_back")
async def hand_back(ctx: WorkflowContext) -> int:
    first = await count(1)
    second = await count(2)
    return first + second


async def test_a_stopping_worker_hands_the_run_back_at_a_boundary(
    store: MemoryStore, clock: ManualClock
) -> None:
    from lockgate.attempt._attempt import Attempt
    from lockgate.attempt._unwind import AttemptOutcome
    from lockgate.workflow._spec import spec_of

    runner = InlineWorkflowRunner(store=store, clock=clock)
    handle = await runner.client.submit("unwind_hand_back")
    lease = "worker-a/1"
    assert store.claim_next_run(handle.name, lease) == handle.run_id
    # The start and the first step pass; the worker starts stopping before the second step.
    boundaries = iter([False, False, True])
    attempt = Attempt(
        store=store,
        spec=spec_of(hand_back),
        run_id=handle.run_id,
        lease=lease,
        clock=clock,
        events=store.load_run(handle.name, handle.run_id),
        should_stop=lambda: next(boundaries, True),
    )
    assert await attempt.execute() == AttemptOutcome.HANDED_BACK
    kinds = [e.kind for e in store.load_run(handle.name, handle.run_id)]
    assert kinds.count("step:done") == 1
    assert "run:requeued" not in kinds
    assert store.lock_holder(handle.name, handle.run_id) is None
    assert store.get_pending_count(handle.name) == 1
    await runner.run_next(handle.name)
    assert await handle.result() == 3
