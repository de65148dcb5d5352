"""Retrying a run that ended without completing (``client.retry``, ``lockgate runs retry``): a
new run that serves what the failed run finished from its journal and runs the failed step and
what follows live, named after the first run, one per retry however often it is asked for."""

from __future__ import annotations

import collections
import uuid
from typing import Any

import pytest

from lockgate import (
    DuplicateRunError,
    ErrorCode,
    InlineWorkflowRunner,
    ManualClock,
    RetryPolicy,
    RetryRefused,
    RunNotFoundError,
    RunStatus,
    WorkflowClient,
    WorkflowContext,
    step,
    workflow,
)
from lockgate.journal import EventKind, RunEvent
from lockgate.stores import MemoryStore, SQLiteStore, ValkeyStore
from valkey_server import shared_url

FAILURES: dict[str, int] = {}
CALLS: collections.Counter[str] = collections.Counter()


@step(name="retried_fetch")
async def fetch(item: str) -> str:
    CALLS[f"fetch {item}"] += 1
    return f"fetched {item}"


@step(name="retried_ship", retry=RetryPolicy(max_attempts=1))  # no backoff on the test clock
async def ship(item: str) -> str:
    CALLS[f"ship {item}"] += 1
    if FAILURES.get(item, 0) > 0:
        FAILURES[item] -= 1
        raise ValueError(f"{item} is not ready")
    return f"shipped {item}"


@workflow(name="retried_flow")
async def flow(ctx: WorkflowContext, item: str) -> str:
    fetched = await fetch(item)
    shipped = await ship(item)
    return f"{fetched}, {shipped} ({ctx.metadata.get('tag')})"


async def ended(runner: InlineWorkflowRunner, item: str, failures: int) -> str:
    """A run of ``retried_flow`` for ``item`` whose ship fails ``failures`` times (one try
    each run)."""
    FAILURES[item] = failures
    handle = await runner.client.submit("retried_flow", {"item": item}, metadata={"tag": "t1"})
    await runner.run(handle.name, handle.run_id)
    return handle.run_id


async def test_a_retry_serves_the_finished_steps_and_runs_the_failed_one_again(
    runner: InlineWorkflowRunner, store: MemoryStore
) -> None:
    first = await ended(runner, "a", failures=1)  # its ship fails: the run ends in error
    assert await runner.client.status("retried_flow", first) == RunStatus.ERROR
    assert CALLS["fetch a"] == 1
    plan = await runner.client.plan_retry("retried_flow", first)
    assert plan.retry_run_id == f"{first}.retry1"
    # fetch's try and outcome, and nothing of ship, the step that failed:
    assert [(e.kind, e.payload["step_id"]) for e in plan.seed] == [
        (EventKind.STEP_PENDING, "retried_fetch"),
        (EventKind.STEP_DONE, "retried_fetch"),
    ]
    retry = await runner.client.retry("retried_flow", first)
    assert retry.run_id == plan.retry_run_id
    await runner.run(retry.name, retry.run_id)
    assert await retry.result(timeout=5) == "fetched a, shipped a (t1)"
    assert CALLS["fetch a"] == 1  # served from the seed, not run again
    assert CALLS["ship a"] == 2  # the failed step, run again
    journal = store.load_run("retried_flow", retry.run_id)
    init = journal[0]
    assert init.kind == EventKind.RUN_INIT
    assert init.payload["params"] == {"item": "a"}
    assert init.payload["provenance"]["source"] == {
        "retry_of": first,
        "retry_root": first,
        "retry_number": 1,
    }
    assert [e.kind for e in journal[1:3]] == [EventKind.STEP_PENDING, EventKind.STEP_DONE]
    assert journal[2].payload["step_id"] == "retried_fetch"
    # The failed run stays as it ended.
    assert await runner.client.status("retried_flow", first) == RunStatus.ERROR


async def test_a_retry_of_a_retry_counts_from_the_first_run(runner: InlineWorkflowRunner) -> None:
    first = await ended(runner, "b", failures=2)
    retry = await runner.client.retry("retried_flow", first)
    await runner.run(retry.name, retry.run_id)
    assert await retry.status() == RunStatus.ERROR  # its ship failed again
    again = await retry.retry()
    assert again.run_id == f"{first}.retry2"
    await runner.run(again.name, again.run_id)
    assert await again.result(timeout=5) == "fetched b, shipped b (t1)"


async def test_one_retry_however_often_it_is_asked_for(runner: InlineWorkflowRunner) -> None:
    first = await ended(runner, "c", failures=1)
    made = [(await runner.client.retry("retried_flow", first)).run_id for _ in range(3)]
    assert made == [f"{first}.retry1"] * 3


async def test_a_retry_id_taken_by_another_run_is_a_duplicate(
    runner: InlineWorkflowRunner,
) -> None:
    first = await ended(runner, "d", failures=1)
    await runner.client.submit("retried_flow", {"item": "x"}, run_id=f"{first}.retry1")
    with pytest.raises(DuplicateRunError):
        await runner.client.retry("retried_flow", first)


@workflow(name="retried_sleeper")
async def sleeper(ctx: WorkflowContext, item: str) -> str:
    fetched = await fetch(item)
    await ctx.sleep(60)
    return fetched


async def test_a_run_cancelled_in_a_sleep_is_retried_from_the_sleep(
    runner: InlineWorkflowRunner, clock: ManualClock
) -> None:
    handle = await runner.client.submit("retried_sleeper", {"item": "e"})
    await runner.run(handle.name, handle.run_id)  # fetched, then parked in the sleep
    await runner.client.terminate("retried_sleeper", handle.run_id, reason="test")
    plan = await runner.client.plan_retry("retried_sleeper", handle.run_id)
    # fetch's try and outcome, not the sleep the run was terminated in:
    assert [e.kind for e in plan.seed] == [EventKind.STEP_PENDING, EventKind.STEP_DONE]
    retry = await runner.client.retry("retried_sleeper", handle.run_id)
    await runner.run(retry.name, retry.run_id)
    assert await retry.status() == RunStatus.SLEEPING  # sleeps again, from the start
    clock.advance(61)
    await runner.fire_due_timers()
    await runner.run(retry.name, retry.run_id)
    assert await retry.result(timeout=5) == "fetched e"
    assert CALLS["fetch e"] == 1


@pytest.mark.parametrize("case", ["completed", "not ended"])
async def test_a_completed_or_unfinished_run_is_not_retried(
    runner: InlineWorkflowRunner, case: Any
) -> None:
    if case == "not ended":
        handle = await runner.client.submit("retried_flow", {"item": "f"})
        run_id, match = handle.run_id, "has not ended"
    else:
        run_id, match = await ended(runner, "g", 0), "completed"
    with pytest.raises(RetryRefused, match=match) as refused:
        await runner.client.retry("retried_flow", run_id)
    assert refused.value.code == ErrorCode.INVALID_REQUEST


async def test_retrying_no_such_run_says_so(runner: InlineWorkflowRunner) -> None:
    with pytest.raises(RunNotFoundError):
        await runner.client.retry("retried_flow", "nope")


@pytest.fixture(params=["sqlite", "valkey"])
def durable_store(request: pytest.FixtureRequest, tmp_path: Any) -> Any:
    if request.param == "sqlite":
        store: Any = SQLiteStore(tmp_path / "retry.db")
    else:
        store = ValkeyStore(shared_url(), namespace=f"rt{uuid.uuid4().hex[:8]}", shard_count=4)
    yield store
    store.close()


async def test_a_seeded_retry_on_sqlite_and_valkey(durable_store: Any) -> None:
    runner = InlineWorkflowRunner(store=durable_store)
    await runner.start()
    try:
        first = await ended(runner, f"s-{uuid.uuid4().hex[:6]}", failures=1)
        item = durable_store.get_run("retried_flow", first).params["item"]
        retry = await runner.client.retry("retried_flow", first)
        await runner.run(retry.name, retry.run_id)
        assert await retry.result(timeout=10) == f"fetched {item}, shipped {item} (t1)"
        assert CALLS[f"fetch {item}"] == 1
        assert CALLS[f"ship {item}"] == 2
    finally:
        await runner.aclose()


async def test_find_retry_finds_the_retry_of_a_run_and_of_a_retry(
    runner: InlineWorkflowRunner,
) -> None:
    first = await ended(runner, "h", failures=2)
    assert await runner.client.find_retry("retried_flow", first) is None
    retry = await runner.client.retry("retried_flow", first)
    found = await runner.client.find_retry("retried_flow", first)
    assert found is not None
    assert (found.run_id, found.source_run_id, found.attempt) == (retry.run_id, first, 1)
    assert found.status == RunStatus.PENDING
    await runner.run(retry.name, retry.run_id)
    again = await retry.retry()
    found = await runner.client.find_retry("retried_flow", retry.run_id)
    assert found is not None
    assert (found.run_id, found.attempt) == (again.run_id, 2)


async def test_find_retry_needs_only_the_retry(store: MemoryStore) -> None:
    # The failed run has expired; its retry remains.
    store.submit_run(
        "retried_flow",
        "gone.retry1",
        {"item": "i"},
        provenance={"source": {"retry_of": "gone", "retry_root": "gone", "retry_number": 1}},
    )
    client = WorkflowClient(store)
    found = await client.find_retry("retried_flow", "gone")
    assert found is not None
    assert found.run_id == "gone.retry1"
    # A run that merely looks like a retry is not one.
    store.submit_run("retried_flow", "other.retry1", {"item": "j"})
    assert await client.find_retry("retried_flow", "other") is None


async def test_a_write_step_left_without_an_outcome_is_named_in_doubt(
    runner: InlineWorkflowRunner, store: MemoryStore
) -> None:
    """A worker died inside ``retried_ship`` (its ``step:pending`` journaled, no outcome),
    and the run was then terminated: the plan names the step so the caller can check its
    effect before the retry runs it again; the step that finished is served, not doubted."""
    handle = await runner.client.submit("retried_flow", {"item": "doubt"})
    store.claim_run(handle.name, handle.run_id, "lease-a")
    base = {"attempt": 1, "kind": "named"}
    store.append_events(
        handle.name,
        handle.run_id,
        [
            RunEvent(
                EventKind.STEP_PENDING,
                {**base, "call_index": 0, "step_id": "retried_fetch"},
                handle.run_id,
            ),
            RunEvent(
                EventKind.STEP_DONE,
                {**base, "call_index": 0, "step_id": "retried_fetch", "result": "fetched doubt"},
                handle.run_id,
            ),
            RunEvent(
                EventKind.STEP_PENDING,
                {**base, "call_index": 1, "step_id": "retried_ship"},
                handle.run_id,
            ),
        ],
        fence="lease-a",
    )
    await runner.client.terminate(handle.name, handle.run_id, reason="stuck")
    plan = await runner.client.plan_retry(handle.name, handle.run_id)
    assert plan.in_doubt == ("retried_ship",)
    retried = await runner.client.retry(handle.name, handle.run_id)
    FAILURES.pop("doubt", None)
    CALLS.clear()
    await runner.run(retried.name, retried.run_id)
    assert await retried.result() == "fetched doubt, shipped doubt (None)"
    assert CALLS == {"ship doubt": 1}  # the in-doubt step ran once more; the fetch was served
