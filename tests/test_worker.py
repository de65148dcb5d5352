"""WorkflowWorker in one process, on a MemoryStore and the system clock with tiny intervals.

Each test serves a worker as a task and waits, bounded, for what it should do; no test
sleeps longer than a fraction of a second.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from typing import Any

import pytest

from lockgate import (
    ConfigurationError,
    EventKind,
    InlineWorkflowRunner,
    Limit,
    ManualClock,
    MemoryStore,
    Rate,
    RunEvent,
    RunStatus,
    StoreUnavailable,
    WaitTimeout,
    WorkflowContext,
    step,
    workflow,
)
from lockgate.stores import RunControls
from lockgate.stores._types import Claims
from lockgate.worker import WorkerOptions, WorkflowWorker

FAST = WorkerOptions(
    claim_poll_interval=0.005,
    timer_poll_interval_s=0.01,
    orphan_scan_interval=0.02,
    maintenance_interval=0.05,
    shutdown_grace=2.0,
)
WAIT_S = 60.0


@pytest.fixture
def store() -> MemoryStore:
    return MemoryStore(lock_ttl=5.0, heartbeat_interval=0.05)


async def wait_until(what: str, check: Callable[[], bool], timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting until {what}")
        await asyncio.sleep(0.005)


@contextlib.asynccontextmanager
async def serving(worker: WorkflowWorker) -> AsyncIterator[asyncio.Task[None]]:
    """Run the worker as a task; on exit stop it and wait for its shutdown."""
    task = asyncio.create_task(worker.run())
    try:
        yield task
    finally:
        worker.stop()
        async with asyncio.timeout(WAIT_S):
            await asyncio.gather(task, return_exceptions=True)


def journal(store: MemoryStore, name: str, run_id: str) -> list[RunEvent]:
    return store.load_run(name, run_id)


def kinds(events: list[RunEvent]) -> list[str]:
    return [e.kind for e in events]


def terminals(events: list[RunEvent]) -> list[RunEvent]:
    return [e for e in events if e.is_terminal]


# -- workflows -----------------------------------------------------------------------------------

CALLS: dict[str, int] = {}
ACTIVE = {"now": 0, "peak": 0}
GATES: dict[str, asyncio.Event] = {}


def count(key: str) -> None:
    CALLS[key] = CALLS.get(key, 0) + 1


@pytest.fixture(autouse=True)
def _fresh_state() -> None:
    CALLS.clear()
    GATES.clear()
    ACTIVE.update(now=0, peak=0)


@step
async def double(n: int) -> int:
    return n * 2


@workflow(name="wk_double")
async def wk_double(ctx: WorkflowContext, n: int) -> int:
    return int(await double(n)) + 1


@step
async def occupy() -> None:
    ACTIVE["now"] += 1
    ACTIVE["peak"] = max(ACTIVE["peak"], ACTIVE["now"])
    await asyncio.sleep(0.02)
    ACTIVE["now"] -= 1


@workflow(name="wk_occupy")
async def wk_occupy(ctx: WorkflowContext) -> None:
    await occupy()


@workflow(name="wk_sleepy")
async def wk_sleepy(ctx: WorkflowContext, seconds: float) -> str:
    await ctx.sleep(seconds)
    return "awake"


@workflow(name="wk_waiter")
async def wk_waiter(ctx: WorkflowContext, timeout: float | None = None) -> Any:
    try:
        return await ctx.wait_for_signal("go", timeout=timeout)
    except WaitTimeout:
        return "timed out"


@step
async def gated(run_id: str, gate: str) -> str:
    count(f"{run_id}:{gate}")
    await GATES[gate].wait()
    return gate


@step
async def after(run_id: str) -> str:
    count(f"{run_id}:after")
    return "after"


@workflow(name="wk_gated")
async def wk_gated(ctx: WorkflowContext, gate: str) -> list[str]:
    first = await gated(ctx.run_id, gate)
    return [first, await after(ctx.run_id)]


@workflow(name="wk_five_steps")
async def wk_five_steps(ctx: WorkflowContext) -> int:
    total = 0
    for i in range(5):
        total += int(await double(i))
    return total


@workflow(
    name="wk_gated_policy",
    version="7",
    concurrency=Limit("tenant", 2),
    rate_limit=Rate(lambda params: str(params["tenant"]), per_second=2.5),
)
async def wk_gated_policy(ctx: WorkflowContext, tenant: str) -> str:
    return tenant


def options(**changes: Any) -> WorkerOptions:
    return replace(FAST, **changes)


# -- running runs --------------------------------------------------------------------------------


async def test_runs_complete_each_once(store: MemoryStore) -> None:
    worker = WorkflowWorker(workflows=[wk_double], store=store, options=FAST)
    handles = [await worker.client.submit("wk_double", {"n": n}) for n in range(25)]
    async with serving(worker):
        results = [await h.result(timeout=WAIT_S) for h in handles]
    assert results == [2 * n + 1 for n in range(25)]
    for handle in handles:
        assert len(terminals(journal(store, "wk_double", handle.run_id))) == 1


async def test_max_concurrent_runs_bounds_bodies(store: MemoryStore) -> None:
    worker = WorkflowWorker(
        workflows=[wk_occupy], store=store, options=options(max_concurrent_runs=3)
    )
    handles = [await worker.client.submit("wk_occupy") for _ in range(12)]
    async with serving(worker):
        for handle in handles:
            await handle.result(timeout=WAIT_S)
    assert ACTIVE["peak"] == 3


class BatchRecordingStore(MemoryStore):
    """A MemoryStore that records how many leases each batch claim asked for."""

    def __init__(self) -> None:
        super().__init__()
        self.batches: list[int] = []

    def claim_next_runs_loaded(self, name: str, leases: Any, *args: Any, **kwargs: Any) -> Any:
        self.batches.append(len(leases))
        return super().claim_next_runs_loaded(name, leases, *args, **kwargs)


async def test_a_claim_takes_as_many_runs_as_slots_are_free_up_to_the_batch_size() -> None:
    store = BatchRecordingStore()
    worker = WorkflowWorker(
        workflows=[wk_occupy],
        store=store,
        options=options(max_concurrent_runs=6, claim_batch_size=4),
    )
    handles = [await worker.client.submit("wk_occupy") for _ in range(12)]
    async with serving(worker):
        for handle in handles:
            await handle.result(timeout=WAIT_S)
    # Six free slots: a claim of four, then one of the two left; never more than four.
    assert store.batches[:2] == [4, 2]
    assert max(store.batches) == 4
    assert ACTIVE["peak"] == 6
    for handle in handles:
        assert len(terminals(journal(store, "wk_occupy", handle.run_id))) == 1


async def test_timer_loop_wakes_sleeping_runs(store: MemoryStore) -> None:
    worker = WorkflowWorker(workflows=[wk_sleepy], store=store, options=FAST)
    handle = await worker.client.submit("wk_sleepy", {"seconds": 0.05})
    async with serving(worker):
        await wait_until("the run sleeps", lambda: status(store, handle) == RunStatus.SLEEPING)
        assert await handle.result(timeout=WAIT_S) == "awake"
    assert EventKind.RUN_WOKEN in kinds(journal(store, "wk_sleepy", handle.run_id))


async def test_signal_wait_resumes_on_signal_and_times_out_on_timer(store: MemoryStore) -> None:
    worker = WorkflowWorker(workflows=[wk_waiter], store=store, options=FAST)
    signalled = await worker.client.submit("wk_waiter")
    timing_out = await worker.client.submit("wk_waiter", {"timeout": 0.05})
    async with serving(worker):
        await wait_until(
            "the run waits for its signal",
            lambda: status(store, signalled) == RunStatus.SIGNAL_WAITING,
        )
        await signalled.signal("go", {"x": 1})
        assert await signalled.result(timeout=WAIT_S) == {"x": 1}
        assert await timing_out.result(timeout=WAIT_S) == "timed out"
    assert EventKind.RUN_WAIT_TIMED_OUT in kinds(journal(store, "wk_waiter", timing_out.run_id))


def status(store: MemoryStore, handle: Any) -> RunStatus:
    info = store.get_run(handle.name, handle.run_id)
    assert info is not None
    return info.status


async def test_orphan_scan_requeues_a_lapsed_lease_as_owner_gone() -> None:
    store = MemoryStore(lock_ttl=0.1, heartbeat_interval=0.02)
    worker = WorkflowWorker(workflows=[wk_double], store=store, options=FAST)
    handle = await worker.client.submit("wk_double", {"n": 4})
    # A worker that claimed the run and died: its lease lapses after lock_ttl.
    assert store.claim_next_run("wk_double", "ghost/0001", None) == handle.run_id
    async with serving(worker):
        assert await handle.result(timeout=WAIT_S) == 9
    requeues = [
        (e.payload["reason"], e.payload["count"], e.payload["crashes"])
        for e in journal(store, "wk_double", handle.run_id)
        if e.kind == EventKind.RUN_REQUEUED
    ]
    assert requeues == [("owner_gone", 1, 1)]  # and a crash of the run (poison_max_retries)


# -- shutdown ------------------------------------------------------------------------------------


async def test_stop_hands_the_run_back_at_its_next_boundary(store: MemoryStore) -> None:
    GATES["slow"] = asyncio.Event()
    first = WorkflowWorker(workflows=[wk_gated], store=store, options=FAST)
    handle = await first.client.submit("wk_gated", {"gate": "slow"})
    key = f"{handle.run_id}:slow"
    async with serving(first) as task:
        await wait_until("the first step runs", lambda: CALLS.get(key) == 1)
        first.stop()
        GATES["slow"].set()  # the step finishes inside the grace; the body stops after it
        async with asyncio.timeout(WAIT_S):
            await task
    events = journal(store, "wk_gated", handle.run_id)
    assert status(store, handle) == RunStatus.PENDING
    assert EventKind.RUN_REQUEUED not in kinds(events)
    assert [e.payload["step_id"] for e in events if e.kind == EventKind.STEP_DONE] == ["gated"]
    assert f"{handle.run_id}:after" not in CALLS

    second = WorkflowWorker(workflows=[wk_gated], store=store, options=FAST)
    async with serving(second):
        assert await handle.result(timeout=WAIT_S) == ["slow", "after"]
    executed = dict(CALLS)
    assert executed == {key: 1, f"{handle.run_id}:after": 1}


async def test_attempts_past_the_grace_are_cancelled_and_handed_back(store: MemoryStore) -> None:
    GATES["stuck"] = asyncio.Event()
    first = WorkflowWorker(workflows=[wk_gated], store=store, options=options(shutdown_grace=0.05))
    handle = await first.client.submit("wk_gated", {"gate": "stuck"})
    key = f"{handle.run_id}:stuck"
    async with serving(first) as task:
        await wait_until("the step runs", lambda: CALLS.get(key) == 1)
        first.stop()
        async with asyncio.timeout(WAIT_S):
            await task
    info = store.get_run("wk_gated", handle.run_id)
    assert info is not None
    assert (info.status, info.lock_holder) == (RunStatus.PENDING, None)
    assert EventKind.RUN_REQUEUED not in kinds(journal(store, "wk_gated", handle.run_id))

    GATES["stuck"].set()
    second = WorkflowWorker(workflows=[wk_gated], store=store, options=FAST)
    async with serving(second):
        assert await handle.result(timeout=WAIT_S) == ["stuck", "after"]
    # The step never journaled an outcome, so running it again is what durability promises.
    assert CALLS[key] == 2


async def test_stop_is_idempotent_and_a_stopped_worker_stays_stopped(store: MemoryStore) -> None:
    worker = WorkflowWorker(workflows=[wk_double], store=store, options=FAST)
    worker.stop()
    worker.stop()
    async with asyncio.timeout(WAIT_S):
        await worker.run()
    handle = await worker.client.submit("wk_double", {"n": 1})
    assert await worker.run_until_idle() == 0
    assert status(store, handle) == RunStatus.PENDING


async def test_sigterm_stops_a_worker_in_the_main_thread(store: MemoryStore) -> None:
    assert threading.current_thread() is threading.main_thread()
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    worker = WorkflowWorker(workflows=[wk_double], store=store, options=FAST)
    task = asyncio.create_task(worker.run())
    await wait_until(
        "the worker handles SIGTERM",
        lambda: signal.getsignal(signal.SIGTERM) != signal.SIG_DFL,
    )
    os.kill(os.getpid(), signal.SIGTERM)
    async with asyncio.timeout(WAIT_S):
        await task
    assert worker.stopping
    # The handlers are removed with the worker: SIGTERM is back to its default.
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


# -- start-up ------------------------------------------------------------------------------------


async def test_versions_and_policies_are_recorded_at_start(store: MemoryStore) -> None:
    worker = WorkflowWorker(workflows=[wk_gated_policy, wk_double], store=store, options=FAST)
    await worker.run_until_idle()
    assert store.get_workflow_policy("wk_gated_policy") == {
        "version": "7",
        "version_behavior": "pinned",
        "max_event_payload_bytes": 1_000_000,
        "concurrency": {"key": "tenant", "key_callable": False, "max": 2},
        "rate": {"key": None, "key_callable": True, "per_second": 2.5, "burst": 3},
        "trigger": None,
        "topic": None,
    }
    double_version = wk_double.__lockgate_workflow__.version  # type: ignore[attr-defined]
    assert store.get_workflow_policy("wk_double") == {
        "version": double_version,
        "version_behavior": "auto_upgrade",
        "max_event_payload_bytes": 1_000_000,
        "concurrency": None,
        "rate": None,
        "trigger": None,
        "topic": None,
    }
    assert store.version_rank("wk_gated_policy", "7") == 1
    assert store.version_rank("wk_double", double_version) == 1


# -- failures ------------------------------------------------------------------------------------


class BrokenTimers(MemoryStore):
    def get_sleeping_runs(self, before: float, limit: int = 100) -> list[tuple[str, str]]:
        raise RuntimeError("timer bug")


async def test_a_crashing_loop_stops_the_worker_and_surfaces_from_run() -> None:
    worker = WorkflowWorker(workflows=[wk_double], store=BrokenTimers(), options=FAST)
    with pytest.raises(RuntimeError, match="timer bug"):
        async with asyncio.timeout(WAIT_S):
            await worker.run()
    assert worker.stopping


class FlakyStore(MemoryStore):
    """Fails the first few calls of chosen methods, as a store under a blip would."""

    def __init__(self, failures: dict[str, int], error: Callable[[], Exception]) -> None:
        super().__init__(lock_ttl=5.0, heartbeat_interval=0.05)
        self.failures = dict(failures)
        self.error = error

    def _maybe_fail(self, method: str) -> None:
        if self.failures.get(method, 0) > 0:
            self.failures[method] -= 1
            raise self.error()

    def append_events(self, *args: Any, **kwargs: Any) -> None:
        self._maybe_fail("append_events")
        super().append_events(*args, **kwargs)

    def recover_pending_runs(self, name: str, now: float | None = None, **kwargs: Any) -> list[str]:
        self._maybe_fail("recover_pending_runs")
        return super().recover_pending_runs(name, now, **kwargs)

    def claim_next_runs_loaded(self, *args: Any, **kwargs: Any) -> Claims:
        self._maybe_fail("claim_next_runs_loaded")
        return super().claim_next_runs_loaded(*args, **kwargs)


async def test_store_blips_in_loops_and_attempts_do_not_kill_the_worker() -> None:
    # A raw library error, as a backend that does not translate it would raise: the attempt
    # requeues the run (store_unavailable) and raises StoreUnavailable, which the worker logs.
    store = FlakyStore({"append_events": 1}, lambda: OSError("disk hiccup"))
    worker = WorkflowWorker(workflows=[wk_double], store=store, options=FAST)
    handle = await worker.client.submit("wk_double", {"n": 5})
    async with serving(worker) as task:
        assert await handle.result(timeout=WAIT_S) == 11
        assert not task.done()
    requeues = [
        e.payload for e in journal(store, "wk_double", handle.run_id) if e.kind == "run:requeued"
    ]
    assert requeues == [{"reason": "store_unavailable", "count": 1}]


async def test_store_unavailable_in_claims_and_scans_is_retried() -> None:
    store = FlakyStore(
        {"claim_next_runs_loaded": 3, "recover_pending_runs": 3},
        lambda: StoreUnavailable("store restarting"),
    )
    worker = WorkflowWorker(workflows=[wk_double], store=store, options=FAST)
    handle = await worker.client.submit("wk_double", {"n": 2})
    async with serving(worker) as task:
        assert await handle.result(timeout=WAIT_S) == 5
        await wait_until("every blip was met", lambda: not any(store.failures.values()))
        assert not task.done()


async def test_a_translated_store_blip_in_an_attempt_requeues_the_run() -> None:
    store = FlakyStore({"append_events": 1}, lambda: StoreUnavailable("database is locked"))
    worker = WorkflowWorker(workflows=[wk_double], store=store, options=FAST)
    handle = await worker.client.submit("wk_double", {"n": 5})
    async with serving(worker):
        await wait_until("the run ends", lambda: status(store, handle).is_terminal, timeout=WAIT_S)
    assert status(store, handle) == RunStatus.COMPLETE


# -- options and arguments -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_concurrent_runs", 0),
        ("max_concurrent_runs", 2.5),
        ("max_concurrent_runs", True),
        ("claim_poll_interval", 0),
        ("claim_poll_interval", float("nan")),
        ("timer_poll_interval_s", -1),
        ("timer_max_batch", 0),
        ("claim_batch_size", 0),
        ("orphan_scan_interval", float("inf")),
        ("shutdown_grace", -0.5),
        ("maintenance_interval", "soon"),
        ("event_buffer_size", 0),
        ("step_boundary_durability", 1),
        ("health_port", 70_000),
        ("health_port", "8080"),
        ("health_host", ""),
        ("presence_ttl", 0),
        ("presence_interval", float("nan")),
        ("presence_interval", 5.0),  # not shorter than presence_ttl: a live worker would lapse
        ("takeover_interval", -1),
    ],
)
def test_worker_options_refuse_bad_values(field: str, value: Any) -> None:
    with pytest.raises(ConfigurationError, match=rf"WorkerOptions\({field}=\.\.\.\)"):
        WorkerOptions(**{field: value})


def test_worker_options_accept_edges() -> None:
    edges = WorkerOptions(shutdown_grace=0, health_port=0, max_concurrent_runs=1)
    assert (edges.shutdown_grace, edges.health_port) == (0, 0)
    with pytest.raises(AttributeError):
        edges.max_concurrent_runs = 2  # type: ignore[misc]


def test_worker_refuses_bad_arguments(store: MemoryStore) -> None:
    with pytest.raises(ConfigurationError, match="at least one workflow"):
        WorkflowWorker(workflows=[], store=store)
    with pytest.raises(ConfigurationError, match="not decorated with @workflow"):
        WorkflowWorker(workflows=[len], store=store)
    with pytest.raises(ConfigurationError, match=r"worker.id"):
        WorkflowWorker(workflows=[wk_double], store=store, worker_id="a/b")
    with pytest.raises(ConfigurationError, match="must be a WorkerOptions"):
        WorkflowWorker(workflows=[wk_double], store=store, options={"max_concurrent_runs": 1})  # type: ignore[arg-type]
    worker = WorkflowWorker(workflows=[wk_double, wk_double], store=store, worker_id="w-1")
    assert (worker.workflows, worker.worker_id, worker.health_address) == (
        ["wk_double"],
        "w-1",
        None,
    )


# -- write-behind buffer -------------------------------------------------------------------------


class CountingAppends(MemoryStore):
    def __init__(self) -> None:
        super().__init__(lock_ttl=5.0, heartbeat_interval=0.05)
        self.appends = 0

    def append_events(self, *args: Any, **kwargs: Any) -> None:
        self.appends += 1
        super().append_events(*args, **kwargs)


@pytest.mark.parametrize("durable", [True, False])
async def test_buffer_options_reach_every_attempt(durable: bool) -> None:
    store = CountingAppends()
    worker = WorkflowWorker(
        workflows=[wk_five_steps],
        store=store,
        options=options(step_boundary_durability=durable, event_buffer_size=64),
    )
    handle = await worker.client.submit("wk_five_steps")
    assert await worker.run_until_idle() == 1
    assert await handle.result(timeout=WAIT_S) == 20
    # Durable: each step's pending is appended before its effect, and its done before the
    # body's next durable call; the last done travels with the terminal (5 + 4 + 1). Buffered:
    # all ten events travel with the terminal in one append.
    assert store.appends == (10 if durable else 1)


# -- burst mode ----------------------------------------------------------------------------------


async def test_run_until_idle_drains_the_queue(store: MemoryStore) -> None:
    worker = WorkflowWorker(
        workflows=[wk_double, wk_occupy], store=store, options=options(max_concurrent_runs=4)
    )
    doubles = [await worker.client.submit("wk_double", {"n": n}) for n in range(10)]
    occupied = [await worker.client.submit("wk_occupy") for _ in range(6)]
    later = await worker.client.submit("wk_double", {"n": 0}, delay=3600)
    assert await worker.run_until_idle() == 16
    for handle in [*doubles, *occupied]:
        assert status(store, handle) == RunStatus.COMPLETE
    assert status(store, later) == RunStatus.SLEEPING
    assert ACTIVE["peak"] <= 4
    assert await worker.run_until_idle() == 0


# -- health --------------------------------------------------------------------------------------


async def http_get(address: tuple[str, int], path: str) -> tuple[int, dict[str, Any]]:
    reader, writer = await asyncio.open_connection(*address)
    try:
        writer.write(f"GET {path} HTTP/1.1\r\nHost: test\r\n\r\n".encode())
        await writer.drain()
        raw = await reader.read()
    finally:
        writer.close()
        await writer.wait_closed()
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


class Unreachable(MemoryStore):
    def ping(self) -> None:
        raise StoreUnavailable("connection refused")


async def test_health_endpoint_reports_liveness_and_readiness(store: MemoryStore) -> None:
    worker = WorkflowWorker(
        workflows=[wk_double], store=store, worker_id="w-health", options=options(health_port=0)
    )
    async with serving(worker):
        await wait_until("the endpoint listens", lambda: worker.health_address is not None)
        address = worker.health_address
        assert address is not None
        assert address[1] > 0
        assert await http_get(address, "/livez") == (200, {"status": "ok", "worker_id": "w-health"})
        assert await http_get(address, "/readyz") == (
            200,
            {"status": "ok", "worker_id": "w-health"},
        )
        assert (await http_get(address, "/nothing"))[0] == 404
    assert worker.health_address is not None  # where it listened, for the logs
    with pytest.raises(ConnectionRefusedError):
        await http_get(address, "/livez")


async def test_readiness_fails_while_the_store_does_not_answer() -> None:
    worker = WorkflowWorker(
        workflows=[wk_double], store=Unreachable(), options=options(health_port=0)
    )
    async with serving(worker):
        await wait_until("the endpoint listens", lambda: worker.health_address is not None)
        address = worker.health_address
        assert address is not None
        code, body = await http_get(address, "/readyz")
        assert (code, body["status"], body["error"]) == (503, "unavailable", "connection refused")
        assert (await http_get(address, "/livez"))[0] == 200


async def test_a_worker_runs_on_a_thread_without_signal_handlers(store: MemoryStore) -> None:
    worker = WorkflowWorker(workflows=[wk_double], store=store, options=FAST)
    handle = await worker.client.submit("wk_double", {"n": 3})
    done = threading.Event()

    def serve() -> None:
        asyncio.run(worker.run())
        done.set()

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        assert await handle.result(timeout=WAIT_S) == 7
    finally:
        worker.stop()  # from another thread than the worker's loop
        await asyncio.to_thread(thread.join, WAIT_S)
    assert done.is_set()


# -- the attempt's own lease deadline ------------------------------------------------------------


class DeafStore(MemoryStore):
    """A store whose heartbeats never get through (the worker is cut off from it), counting
    the writes attempts still make."""

    appends = 0

    def heartbeat(self, name: str, run_id: str, worker_id: str) -> tuple[str | None, str | None]:
        raise StoreUnavailable("heartbeat lost on the way")

    def append_and_poll(
        self, name: str, run_id: str, events: list[RunEvent], *, fence: str
    ) -> RunControls:
        self.appends += 1
        return super().append_and_poll(name, run_id, events, fence=fence)


STEP_GATE: dict[str, asyncio.Event] = {}


@step(name="wk_slow_effect")
async def slow_effect() -> str:
    await STEP_GATE["open"].wait()
    return "done"


@workflow(name="wk_deaf")
async def deaf_workflow(ctx: WorkflowContext) -> str:
    return await slow_effect()


async def test_an_attempt_cut_off_from_the_store_for_a_whole_lease_stops_writing() -> None:
    clock = ManualClock()
    store = DeafStore(clock=clock, lock_ttl=30.0, heartbeat_interval=10.0)
    STEP_GATE["open"] = asyncio.Event()
    runner = InlineWorkflowRunner(store=store, workflows=[deaf_workflow], clock=clock)
    handle = await runner.client.submit("wk_deaf", {})
    attempt = asyncio.create_task(runner.run("wk_deaf", handle.run_id))
    for _ in range(100):  # until step:pending is journaled and the effect is under way
        if store.appends:
            break
        await asyncio.sleep(0)
    for _ in range(4):  # 40 s on the clock: heartbeats at 10, 20, 30 all fail
        clock.advance(10)
        await asyncio.sleep(0)
    STEP_GATE["open"].set()
    # The lease lapsed because the store was away: the body is stopped, and the run goes back
    # counted against max_store_requeues (no one else took it meanwhile).
    with pytest.raises(StoreUnavailable, match="got through for a whole lease"):
        await attempt
    assert store.appends == 1  # the step's result was never sent
    events = await handle.events()
    assert EventKind.STEP_DONE not in [e.kind for e in events]
    assert (events[-1].kind, events[-1].payload["reason"]) == (
        EventKind.RUN_REQUEUED,
        "store_unavailable",
    )


@pytest.mark.parametrize("worker_id", ["web\x1f1", "web\n1", "w" * 257])
def test_a_worker_id_the_naming_rule_refuses_is_refused_at_construction(
    store: MemoryStore, worker_id: str
) -> None:
    """A worker's leases land where run ids do (lock holders, members of the store's sets):
    an id the naming rule refuses is refused when the worker is built, not at its first
    claim, where it would end the claim loop."""
    with pytest.raises(ConfigurationError, match=r"worker.id"):
        WorkflowWorker(workflows=[wk_double], store=store, worker_id=worker_id)
