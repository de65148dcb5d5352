"""A worker whose store does not answer, and a worker asked twice to stop, in one process.

A MemoryStore that can be cut off (``OutageStore``) stands for a server that is down: while
``down`` is set, every call a worker makes at start and in its loops raises StoreUnavailable,
as a Valkey store does once its retries give up. Each test waits, bounded, for the state it
needs.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
import time
from typing import Any

import pytest

from lockgate import (
    ConfigurationError,
    ManualClock,
    MemoryStore,
    RunStatus,
    StoreUnavailable,
    WorkflowContext,
    step,
    workflow,
)
from lockgate.stores import StoreMarker, WorkerInfo
from lockgate.worker import WorkerOptions, WorkflowWorker
from lockgate.worker._status import StoreState
from test_worker import FAST, WAIT_S, http_get, options, serving, wait_until, wk_double


class OutageStore(MemoryStore):
    """A store that can be cut off; counts the calls it refused while down."""

    def __init__(self) -> None:
        super().__init__(lock_ttl=5.0, heartbeat_interval=0.05)
        self.down = False
        self.refused: dict[str, int] = {}

    def _answer(self, method: str) -> None:
        if self.down:
            self.refused[method] = self.refused.get(method, 0) + 1
            raise StoreUnavailable("connection refused")

    def register_version(self, name: str, version: str) -> int:
        self._answer("register_version")
        return super().register_version(name, version)

    def record_workflow_policy(self, name: str, policy: dict[str, Any]) -> None:
        self._answer("record_workflow_policy")
        super().record_workflow_policy(name, policy)

    def claim_next_runs_loaded(self, *args: Any, **kwargs: Any) -> Any:
        self._answer("claim_next_runs_loaded")
        return super().claim_next_runs_loaded(*args, **kwargs)

    def get_sleeping_runs(self, before: float, limit: int = 100) -> list[tuple[str, str]]:
        self._answer("get_sleeping_runs")
        return super().get_sleeping_runs(before, limit)

    def recover_pending_runs(self, name: str, now: float | None = None, **kwargs: Any) -> list[str]:
        self._answer("recover_pending_runs")
        return super().recover_pending_runs(name, now, **kwargs)

    def run_maintenance(self, now: float | None = None) -> int:
        self._answer("run_maintenance")
        return super().run_maintenance(now)

    def record_worker(self, info: WorkerInfo, ttl: float) -> None:
        self._answer("record_worker")  # the worker's presence beat
        super().record_worker(info, ttl)

    def drop_worker(self, worker_id: str) -> None:
        self._answer("drop_worker")
        super().drop_worker(worker_id)

    def ping(self) -> None:
        self._answer("ping")

    def ensure_marker(self) -> bool:
        self._answer("ensure_marker")
        return super().ensure_marker()

    def read_marker(self) -> StoreMarker | None:
        self._answer("read_marker")  # the worker's check that the store kept its data
        return super().read_marker()


@pytest.fixture
def store() -> MemoryStore:
    return MemoryStore(lock_ttl=5.0, heartbeat_interval=0.05)


def lockgate_records(caplog: pytest.LogCaptureFixture, level: int) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name.startswith("lockgate") and r.levelno >= level]


# -- start-up --------------------------------------------------------------------------------------


async def test_a_worker_started_while_its_store_is_down_waits_for_it_then_serves() -> None:
    store = OutageStore()
    store.down = True
    worker = WorkflowWorker(
        workflows=[wk_double], store=store, worker_id="w-wait", options=options(health_port=0)
    )
    handle = await worker.client.submit("wk_double", {"n": 4})  # submit_run still answers
    async with serving(worker) as task:
        await wait_until("the endpoint listens", lambda: worker.health_address is not None)
        address = worker.health_address
        assert address is not None
        await wait_until(
            "the worker tried to register twice", lambda: store.refused["register_version"] >= 2
        )
        assert not task.done()  # it waits instead of failing
        assert await http_get(address, "/livez") == (200, {"status": "ok", "worker_id": "w-wait"})
        assert await http_get(address, "/readyz") == (
            503,
            {"status": "starting", "error": "connection refused", "worker_id": "w-wait"},
        )
        store.down = False
        assert await handle.result(timeout=WAIT_S) == 9
        assert await http_get(address, "/readyz") == (200, {"status": "ok", "worker_id": "w-wait"})
    assert store.get_workflow_policy("wk_double") is not None


async def test_a_worker_stopped_while_it_waits_for_its_store_returns_at_once() -> None:
    store = OutageStore()
    store.down = True
    worker = WorkflowWorker(workflows=[wk_double], store=store, options=FAST)
    task = asyncio.create_task(worker.run())
    await wait_until("the worker tried to register", lambda: "register_version" in store.refused)
    worker.stop()
    async with asyncio.timeout(WAIT_S):
        await task
    assert store.get_workflow_policy("wk_double") is None
    assert "claim_next_runs_loaded" not in store.refused  # it never began to claim


class MisconfiguredStore(MemoryStore):
    def register_version(self, name: str, version: str) -> int:
        raise ConfigurationError("NOPERM this user has no permissions to run 'evalsha'")


async def test_a_store_error_that_is_not_an_outage_ends_the_worker_at_start() -> None:
    worker = WorkflowWorker(workflows=[wk_double], store=MisconfiguredStore(), options=FAST)
    with pytest.raises(ConfigurationError, match="NOPERM"):
        async with asyncio.timeout(WAIT_S):
            await worker.run()


class BrokenMaintenance(MemoryStore):
    def run_maintenance(self, now: float | None = None) -> int:
        raise ConfigurationError("the store file was deleted")


async def test_a_lockgate_error_that_ends_a_loop_is_logged_in_one_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="lockgate")
    worker = WorkflowWorker(workflows=[wk_double], store=BrokenMaintenance(), options=FAST)
    with pytest.raises(ConfigurationError, match="deleted"):
        async with asyncio.timeout(WAIT_S):
            await worker.run()
    (failed,) = lockgate_records(caplog, logging.ERROR)
    assert "lockgate-maintenance failed; stopping: the store file was deleted" in failed.message
    assert failed.exc_info is None  # its message says it all: no traceback


# -- outages while serving -----------------------------------------------------------------------


async def test_an_outage_is_logged_once_as_it_begins_and_once_as_it_ends(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="lockgate")
    store = OutageStore()
    worker = WorkflowWorker(workflows=[wk_double], store=store, options=FAST)
    async with serving(worker):
        first = await worker.client.submit("wk_double", {"n": 1})
        assert await first.result(timeout=WAIT_S) == 3
        store.down = True
        await wait_until(
            "claims, timer passes, scans and maintenance all failed, many times",
            lambda: (
                min(
                    store.refused.get(m, 0)
                    for m in (
                        "claim_next_runs_loaded",
                        "get_sleeping_runs",
                        "recover_pending_runs",
                        "run_maintenance",
                    )
                )
                >= 2
                and sum(store.refused.values()) >= 30
            ),
        )
        store.down = False
        second = await worker.client.submit("wk_double", {"n": 2})
        assert await second.result(timeout=WAIT_S) == 5
    (warning,) = lockgate_records(caplog, logging.WARNING)
    assert warning.name == "lockgate.worker.status"
    assert "is unreachable: connection refused" in warning.message
    (back,) = [r for r in caplog.records if "answers again" in r.message]
    assert back.levelno == logging.INFO


def test_a_failure_of_a_call_asked_before_the_latest_answer_is_stale(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="lockgate")
    clock = ManualClock()
    state = StoreState("TestStore", clock)
    state.answered(asked_at=0.0)
    state.failed(StoreUnavailable("gone"), asked_at=1.0)  # the outage begins
    state.failed(StoreUnavailable("gone"), asked_at=2.0)  # the same outage
    clock.advance(5.0)
    state.answered(asked_at=4.0)  # it ends
    # A call asked during the outage, whose retries gave up after it ended: no news.
    state.failed(StoreUnavailable("gone"), asked_at=3.0)
    assert (state.reachable, state.error) == (True, None)
    state.failed(StoreUnavailable("gone again"), asked_at=6.0)  # a second outage
    assert (state.reachable, state.error) == (False, "gone again")
    told = [(r.levelname, r.message) for r in caplog.records]
    assert told == [
        ("WARNING", "store TestStore is unreachable: gone; the worker waits for it"),
        ("INFO", "store TestStore answers again, after 5.0s"),
        ("WARNING", "store TestStore is unreachable: gone again; the worker waits for it"),
    ]


# -- stopping twice --------------------------------------------------------------------------------

HELD: dict[str, asyncio.Event] = {}


@step(name="wk_held_step")
async def held_step() -> str:
    HELD["started"].set()
    await HELD["release"].wait()  # never set: only a cancel ends it
    return "released"


@workflow(name="wk_held")
async def wk_held(ctx: WorkflowContext) -> str:
    return await held_step()


async def test_a_second_sigterm_stops_a_draining_worker_at_once(
    store: MemoryStore, caplog: pytest.LogCaptureFixture
) -> None:
    assert threading.current_thread() is threading.main_thread()
    caplog.set_level(logging.INFO, logger="lockgate")
    HELD.update(started=asyncio.Event(), release=asyncio.Event())
    worker = WorkflowWorker(
        workflows=[wk_held],
        store=store,
        options=options(shutdown_grace=600.0, health_port=0),
    )
    handle = await worker.client.submit("wk_held")
    task = asyncio.create_task(worker.run())
    async with asyncio.timeout(WAIT_S):
        await HELD["started"].wait()
    assert signal.getsignal(signal.SIGTERM) != signal.SIG_DFL
    os.kill(os.getpid(), signal.SIGTERM)
    await wait_until("the worker is stopping", lambda: worker.stopping)
    address = worker.health_address
    assert address is not None
    assert (await http_get(address, "/readyz"))[1]["status"] == "stopping"
    await asyncio.sleep(0.05)
    assert not task.done()  # draining: the step holds its run, with ten minutes of grace left
    started = time.monotonic()
    os.kill(os.getpid(), signal.SIGTERM)
    async with asyncio.timeout(WAIT_S):
        await task
    assert time.monotonic() - started < WAIT_S
    info = store.get_run("wk_held", handle.run_id)
    assert info is not None
    assert (info.status, info.lock_holder) == (RunStatus.PENDING, None)  # handed back
    told = [r.message for r in caplog.records if r.name == "lockgate.worker.status"]
    assert any("SIGTERM received; draining: finishing 1 run," in m for m in told), told
    assert any("(Ctrl-C again to stop now)" in m for m in told), told
    assert any("SIGTERM again; stopping now: handing back 1 run unfinished" in m for m in told)
    assert any("1 run cancelled and handed back" in m for m in told), told


async def test_stop_now_cuts_the_shutdown_grace_short(store: MemoryStore) -> None:
    HELD.update(started=asyncio.Event(), release=asyncio.Event())
    worker = WorkflowWorker(
        workflows=[wk_held], store=store, options=WorkerOptions(shutdown_grace=600.0)
    )
    handle = await worker.client.submit("wk_held")

    def serve() -> None:  # on a thread: no signal handlers, stop_now() from outside
        asyncio.run(worker.run())

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        # The step itself, not just the claim: a stop that comes before the body reaches it
        # hands the run back at the body's first boundary, and the worker stops at once.
        await wait_until("the step runs", HELD["started"].is_set)
        worker.stop()
        await asyncio.sleep(0.05)
        assert thread.is_alive()
        worker.stop_now()
        await asyncio.to_thread(thread.join, WAIT_S)
        assert not thread.is_alive()
    finally:
        worker.stop_now()
        await asyncio.to_thread(thread.join, WAIT_S)
    info = store.get_run("wk_held", handle.run_id)
    assert info is not None
    assert (info.status, info.lock_holder) == (RunStatus.PENDING, None)


async def test_failing_claims_tell_the_outage(caplog: pytest.LogCaptureFixture) -> None:
    """Claims are a worker's most frequent store calls, and an outage that only claims meet
    (every other loop resting for an hour) is told by them, once as it begins and once as it
    ends."""
    caplog.set_level(logging.INFO, logger="lockgate")
    store = OutageStore()
    quiet = options(
        timer_poll_interval_s=3600.0, orphan_scan_interval=3600.0, maintenance_interval=3600.0
    )
    worker = WorkflowWorker(workflows=[wk_double], store=store, options=quiet)
    async with serving(worker):
        first = await worker.client.submit("wk_double", {"n": 1})
        assert await first.result(timeout=WAIT_S) == 3  # serving: registered, claiming
        store.down = True
        await wait_until(
            "claims failed", lambda: store.refused.get("claim_next_runs_loaded", 0) >= 3
        )
        # The presence beat and the marker check keep the store's heartbeat cadence whatever
        # the options say.
        assert set(store.refused) - {"record_worker", "read_marker"} == {"claim_next_runs_loaded"}
        store.down = False
        run = await worker.client.submit("wk_double", {"n": 4})
        assert await run.result(timeout=WAIT_S) == 9
    (warning,) = lockgate_records(caplog, logging.WARNING)
    assert "is unreachable: connection refused" in warning.message
    (back,) = [r for r in caplog.records if "answers again" in r.message]
    assert back.levelno == logging.INFO
