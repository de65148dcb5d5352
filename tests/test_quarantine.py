"""Poison and stuck runs in one process: the WorkerOptions knobs and their checks, a body that
ignores a cancel (``cancel_timeout``), stranded pinned runs (``stranded_policy``), a body that
blocks the worker's event loop (the watchdog and ``poison_counts_loop_blocked``), and the retry
of a quarantined run."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any

import pytest

from lockgate import (
    ConfigurationError,
    EventKind,
    ManualClock,
    MemoryStore,
    RunStatus,
    StrandedPolicy,
    WorkflowContext,
    step,
    workflow,
)
from lockgate.stores import PoisonPolicy
from lockgate.worker import WorkerOptions, WorkflowWorker

FAST = WorkerOptions(
    claim_poll_interval=0.005,
    timer_poll_interval_s=0.01,
    orphan_scan_interval=0.02,
    maintenance_interval=0.05,
    shutdown_grace=1.0,
)
#: How long any one state a test waits for may take, with every core of the machine busy.
WAIT_S = 60.0


async def wait_until(what: str, check: Callable[[], bool], timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        await asyncio.sleep(0.01)


@asynccontextmanager
async def serving(worker: WorkflowWorker) -> AsyncIterator[None]:
    task = asyncio.create_task(worker.run())
    try:
        yield
    finally:
        worker.stop()
        async with asyncio.timeout(WAIT_S):
            await asyncio.gather(task, return_exceptions=True)


def status(store: MemoryStore, name: str, run_id: str) -> RunStatus:
    info = store.get_run(name, run_id)
    assert info is not None
    return info.status


# -- options ------------------------------------------------------------------------------------


def test_the_poison_knobs_default_as_the_reference_says() -> None:
    options = WorkerOptions()
    assert (
        options.cancel_timeout,
        options.poison_max_retries,
        options.poison_retry_ttl_s,
        options.poison_counts_loop_blocked,
        options.stranded_policy,
        options.stranded_timeout,
    ) == (5.0, 3, 3600.0, True, StrandedPolicy.WAIT, 0.0)
    assert options.poison_policy == PoisonPolicy(3, 3600.0, True)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("poison_max_retries", -1),
        ("poison_max_retries", 1.5),
        ("poison_max_retries", True),
        ("poison_retry_ttl_s", 0),
        ("poison_retry_ttl_s", float("inf")),
        ("poison_counts_loop_blocked", "yes"),
        ("cancel_timeout", -0.1),
        ("cancel_timeout", float("nan")),
        ("stranded_timeout", -1),
        ("stranded_policy", "sometimes"),
        ("stranded_policy", 1),
    ],
)
def test_bad_poison_knobs_are_refused(field: str, value: Any) -> None:
    with pytest.raises(ConfigurationError, match=field):
        WorkerOptions(**{field: value})


def test_a_stranded_policy_may_be_named_by_its_value() -> None:
    assert WorkerOptions(stranded_policy="fail").stranded_policy is StrandedPolicy.FAIL  # type: ignore[arg-type]
    assert WorkerOptions(poison_max_retries=0, cancel_timeout=0).poison_max_retries == 0


# -- cancel_timeout -------------------------------------------------------------------------------

#: Set by the step as it starts (a new event per test, on the test's loop).
STUCK: dict[str, asyncio.Event] = {}


class CountingStore(MemoryStore):
    """Counts the heartbeats that see a cancel latched."""

    cancel_beats = 0

    def heartbeat(self, name: str, run_id: str, worker_id: str) -> tuple[str | None, str | None]:
        answer = super().heartbeat(name, run_id, worker_id)
        self.cancel_beats += answer[0] is not None
        return answer


@step
async def deaf(seconds: float) -> str:
    STUCK["started"].set()
    await asyncio.sleep(seconds)  # no boundary in here: a cancel is not raised in it
    return "woke"


@workflow(name="qt_deaf")
async def qt_deaf(ctx: WorkflowContext) -> str:
    return await deaf(600.0)


async def test_a_body_that_ignores_a_cancel_is_cancelled_after_cancel_timeout() -> None:
    STUCK["started"] = asyncio.Event()
    store = MemoryStore(lock_ttl=5.0, heartbeat_interval=0.02)
    options = replace(FAST, cancel_timeout=0.2)
    worker = WorkflowWorker(workflows=[qt_deaf], store=store, options=options)
    handle = await worker.client.submit("qt_deaf")
    async with serving(worker):
        await asyncio.wait_for(STUCK["started"].wait(), WAIT_S)
        asked = time.monotonic()
        await worker.client.cancel("qt_deaf", handle.run_id)
        await wait_until(
            "the run ends cancelled",
            lambda: status(store, "qt_deaf", handle.run_id) == RunStatus.CANCELLED,
        )
        assert time.monotonic() - asked >= 0.2
        assert worker.running_attempts == 0
    last = store.get_last_event("qt_deaf", handle.run_id)
    assert last is not None
    assert (last.kind, last.payload["code"]) == (EventKind.RUN_ERROR, "cancelled")


async def test_without_the_timeout_the_deaf_body_keeps_running() -> None:
    STUCK["started"] = asyncio.Event()
    store = CountingStore(lock_ttl=5.0, heartbeat_interval=0.02)
    options = replace(FAST, cancel_timeout=60.0)
    worker = WorkflowWorker(workflows=[qt_deaf], store=store, options=options)
    handle = await worker.client.submit("qt_deaf")
    async with serving(worker):
        await asyncio.wait_for(STUCK["started"].wait(), WAIT_S)
        await worker.client.cancel("qt_deaf", handle.run_id)
        await wait_until("ten heartbeats saw the cancel", lambda: store.cancel_beats >= 10)
        assert status(store, "qt_deaf", handle.run_id) == RunStatus.IN_PROGRESS


# -- stranded runs --------------------------------------------------------------------------------


@workflow(name="qt_pinned", version="2")
async def qt_pinned(ctx: WorkflowContext) -> str:
    return "v2"


@pytest.mark.parametrize("policy", [StrandedPolicy.WAIT, StrandedPolicy.FAIL])
async def test_a_pinned_run_no_worker_serves(policy: StrandedPolicy) -> None:
    clock = ManualClock()
    store = MemoryStore(clock=clock)
    store.submit_run("qt_pinned", "old", {}, version="1", version_behavior="pinned")
    store.submit_run("qt_pinned", "new", {}, version="2", version_behavior="pinned")
    options = replace(FAST, stranded_policy=policy, stranded_timeout=30.0)
    worker = WorkflowWorker(workflows=[qt_pinned], store=store, options=options, clock=clock)
    clock.advance(10.0)
    await worker.run_until_idle()
    assert status(store, "qt_pinned", "old") == RunStatus.PENDING  # not stranded long enough
    assert status(store, "qt_pinned", "new") == RunStatus.COMPLETE
    clock.advance(30.0)
    await worker.run_until_idle()
    if policy == StrandedPolicy.WAIT:
        assert status(store, "qt_pinned", "old") == RunStatus.PENDING
        return
    assert status(store, "qt_pinned", "old") == RunStatus.ERROR
    last = store.get_last_event("qt_pinned", "old")
    assert last is not None
    assert last.payload["code"] == "stranded"
    assert last.payload["detail"]["version"] == "1"


# -- a body that blocks the loop --------------------------------------------------------------

BLOCKS = {"left": 0}


@workflow(name="qt_blocker")
async def qt_blocker(ctx: WorkflowContext) -> str:
    if BLOCKS["left"] > 0:
        BLOCKS["left"] -= 1
        time.sleep(1.0)  # noqa: ASYNC251 - the point: on the loop, heartbeats stop
    await ctx.sleep(0)
    return "done"


@pytest.mark.parametrize("counts", [True, False])
async def test_a_loop_blocking_body_counts_as_a_crash_as_the_worker_says(counts: bool) -> None:
    BLOCKS["left"] = 1
    store = MemoryStore(lock_ttl=0.5, heartbeat_interval=0.1)
    options = replace(FAST, poison_max_retries=0, poison_counts_loop_blocked=counts)
    worker = WorkflowWorker(workflows=[qt_blocker], store=store, options=options)
    handle = await worker.client.submit("qt_blocker")
    wanted = RunStatus.QUARANTINED if counts else RunStatus.COMPLETE
    async with serving(worker):
        await wait_until(
            f"the run is {wanted}", lambda: status(store, "qt_blocker", handle.run_id) == wanted
        )
    journal = store.load_run("qt_blocker", handle.run_id)
    if counts:
        assert journal[-1].payload["detail"]["loop_blocked"] is True
    else:
        requeued = [e.payload for e in journal if e.kind == EventKind.RUN_REQUEUED]
        assert len(requeued) == 1
        assert requeued[0]["loop_blocked"] is True
        assert "crash_at" not in requeued[0]


# -- retrying a quarantined run ---------------------------------------------------------------


@workflow(name="qt_fixed")
async def qt_fixed(ctx: WorkflowContext, n: int) -> int:
    return n + 1


async def test_a_quarantined_run_is_released_by_its_retry() -> None:
    now = [1000.0]
    store = MemoryStore(clock=lambda: now[0], lock_ttl=5.0)
    worker = WorkflowWorker(
        workflows=[qt_fixed], store=store, options=replace(FAST, poison_max_retries=1)
    )
    handle = await worker.client.submit("qt_fixed", {"n": 41})
    for attempt in range(2):  # two workers died under it
        assert store.claim_next_run("qt_fixed", f"ghost/{attempt}") == handle.run_id
        now[0] += 6.0
        store.recover_pending_runs("qt_fixed", poison=worker.options.poison_policy)
    assert status(store, "qt_fixed", handle.run_id) == RunStatus.QUARANTINED
    retry = await worker.client.retry("qt_fixed", handle.run_id)
    await worker.run_until_idle()
    assert await retry.result(timeout=WAIT_S) == 42
    assert status(store, "qt_fixed", handle.run_id) == RunStatus.QUARANTINED
