"""A worker publishes its presence (``WorkerInfo``) on the heartbeat cadence while it serves,
with its slots in use and the shards it leases, and drops it when it stops: a real worker in
this process, on a real store of each kind."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from lockgate import MemoryStore, Store, StoreUnavailable, WorkflowContext, step, workflow
from lockgate.stores import SQLiteStore, ValkeyStore, WorkerInfo
from lockgate.worker import WorkerOptions, WorkflowWorker

FAST = WorkerOptions(
    claim_poll_interval=0.005,
    orphan_scan_interval=0.05,
    maintenance_interval=0.5,
    shard_lease_interval=0.05,
    max_concurrent_runs=4,
    shutdown_grace=2.0,
)
WAIT_S = 60.0
HELD: dict[str, asyncio.Event] = {}


@step
async def hold() -> None:
    await HELD["go"].wait()


@workflow(name="presence_held")
async def presence_held(ctx: WorkflowContext) -> None:
    await hold()


def on_valkey() -> Store:
    from valkey_server import shared_url

    namespace = f"p{uuid.uuid4().hex[:12]}"
    return ValkeyStore(shared_url(), namespace=namespace, shard_count=2, heartbeat_interval=0.05)


FACTORIES: dict[str, Callable[[Path], Store]] = {
    "memory": lambda tmp: MemoryStore(lock_ttl=5.0, heartbeat_interval=0.05),
    "sqlite": lambda tmp: SQLiteStore(tmp / "p.db", heartbeat_interval=0.05, synchronous="normal"),
    "valkey-sharded": lambda tmp: on_valkey(),
}


@pytest.fixture(params=list(FACTORIES))
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    made = FACTORIES[request.param](tmp_path)
    yield made
    made.close()


async def wait_for(what: str, check: Callable[[], WorkerInfo | None]) -> WorkerInfo:
    deadline = time.monotonic() + WAIT_S
    while (found := check()) is None:
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {WAIT_S}s waiting until {what}")
        await asyncio.sleep(0.01)
    return found


@contextlib.asynccontextmanager
async def serving(worker: WorkflowWorker) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(worker.run())
    try:
        yield task
    finally:
        worker.stop()
        async with asyncio.timeout(WAIT_S):
            await asyncio.gather(task, return_exceptions=True)


def record(store: Store, worker_id: str, busy: int | None = None) -> WorkerInfo | None:
    for info in store.live_workers():
        if info.worker_id == worker_id and (busy is None or info.slots_in_use == busy):
            return info
    return None


def owning(store: Store, shards: int) -> WorkerInfo | None:
    info = record(store, "w-presence")
    owned = [o for o in info.owned if o.startswith("shard:")] if info is not None else []
    return info if len(owned) == shards else None


async def test_a_worker_publishes_its_presence_while_serving_and_drops_it_on_stop(
    store: Store,
) -> None:
    HELD["go"] = asyncio.Event()
    worker = WorkflowWorker(
        workflows=[presence_held], store=store, worker_id="w-presence", options=FAST
    )
    async with serving(worker) as task:
        handle = await worker.client.submit("presence_held")
        busy = await wait_for(
            "the record shows the held run", lambda: record(store, "w-presence", 1)
        )
        assert (busy.pid, busy.workflows, busy.slots) == (os.getpid(), ("presence_held",), 4)
        assert busy.version
        assert busy.host
        assert busy.heartbeat_at >= busy.started_at > 0
        if isinstance(store, ValkeyStore):
            await wait_for("the record names both leased shards", lambda: owning(store, 2))
        HELD["go"].set()
        await handle.result(timeout=WAIT_S)
        idle = await wait_for("a later beat shows it idle", lambda: record(store, "w-presence", 0))
        assert idle.heartbeat_at > busy.heartbeat_at
        worker.stop()
        async with asyncio.timeout(WAIT_S):
            await task
    assert record(store, "w-presence") is None


#: Presence and takeover fast enough for a test: a record lives 1 s.
QUICK_TAKEOVER = dataclasses.replace(
    FAST, presence_ttl=1.0, presence_interval=0.2, takeover_interval=0.2, shutdown_grace=10.0
)
#: Longer than a lapsed record takes to be acted on (presence_ttl + takeover_interval).
NAP_S = 2.5
STARTED: dict[str, asyncio.Event] = {}


@step
async def nap_past_presence() -> str:
    STARTED["nap"].set()
    await asyncio.sleep(NAP_S)
    return "napped"


@workflow(name="presence_drained")
async def presence_drained(ctx: WorkflowContext) -> str:
    return await nap_past_presence()


async def test_a_draining_worker_keeps_its_presence_so_no_one_takes_its_runs(
    store: Store,
) -> None:
    STARTED["nap"] = asyncio.Event()
    draining = WorkflowWorker(
        workflows=[presence_drained], store=store, worker_id="w-drain", options=QUICK_TAKEOVER
    )
    other = WorkflowWorker(
        workflows=[presence_drained], store=store, worker_id="w-other", options=QUICK_TAKEOVER
    )
    async with serving(draining) as task:
        handle = await draining.client.submit("presence_drained")
        async with asyncio.timeout(WAIT_S):
            await STARTED["nap"].wait()
        async with serving(other):
            draining.stop()  # its step naps on, past presence_ttl, inside the grace
            async with asyncio.timeout(WAIT_S):
                await task
            assert await handle.result(timeout=WAIT_S) == "napped"
    events = store.load_run("presence_drained", handle.run_id)
    assert [e for e in events if e.kind == "run:requeued"] == []
    assert sum(e.kind == "step:pending" for e in events) == 1  # the step ran once


class OutageStore(MemoryStore):
    """A MemoryStore that can be made to refuse, as a store away would, the presence writes of
    the workers named in ``refusing`` and, while ``away``, the takeover's reads too."""

    def __init__(self) -> None:
        super().__init__(lock_ttl=30.0, heartbeat_interval=0.05)
        self.refusing: set[str] = set()
        self.away = False

    def record_worker(self, info: WorkerInfo, ttl: float) -> None:
        if info.worker_id in self.refusing:
            raise StoreUnavailable(f"the store is away (presence of {info.worker_id})")
        super().record_worker(info, ttl)

    def recover_lapsed_holders(self, *args: Any, **kwargs: Any) -> list[str]:
        if self.away:
            raise StoreUnavailable("the store is away (takeover)")
        return super().recover_lapsed_holders(*args, **kwargs)


#: A record lives 2 s; one worker's writes come back this much later than the other's, well
#: inside a presence_ttl (a slower reconnect after the same outage).
STEADY = dataclasses.replace(QUICK_TAKEOVER, presence_ttl=2.0)
LATE_S = 0.8


async def test_after_an_outage_that_lapsed_every_record_no_live_worker_takes_anothers_runs() -> (
    None
):
    """The store away longer than a presence_ttl lapses every worker's record at once. The
    first worker to write its record again must not count the others as dead before they had
    a presence_ttl to write theirs: it takes nothing over until its own record has been
    written without a break for a whole presence_ttl."""
    HELD["go"] = asyncio.Event()
    store = OutageStore()
    holder = WorkflowWorker(
        workflows=[presence_held], store=store, worker_id="w-holder", options=STEADY
    )
    first = WorkflowWorker(
        workflows=[presence_held], store=store, worker_id="w-first", options=STEADY
    )
    async with serving(holder):
        handle = await holder.client.submit("presence_held")
        await wait_for("w-holder holds the run", lambda: record(store, "w-holder", busy=1))
        async with serving(first):
            await wait_for("w-first publishes", lambda: record(store, "w-first"))
            store.away = True
            store.refusing = {"w-holder", "w-first"}
            deadline = time.monotonic() + WAIT_S
            while store.live_workers():  # every record lapsed
                assert time.monotonic() < deadline, store.live_workers()
                await asyncio.sleep(0.01)
            store.away = False
            store.refusing = {"w-holder"}  # w-first is back first
            await wait_for("w-first writes again", lambda: record(store, "w-first"))
            await asyncio.sleep(LATE_S)
            store.refusing = set()
            await wait_for("w-holder writes again", lambda: record(store, "w-holder"))
            # Past the point where w-first may take over: its record has now been steady for
            # longer than a presence_ttl, and w-holder's is back.
            await asyncio.sleep(STEADY.presence_ttl + 2 * STEADY.takeover_interval)
            HELD["go"].set()
            assert await handle.result(timeout=WAIT_S) is None
    events = store.load_run("presence_held", handle.run_id)
    assert [e.payload for e in events if e.kind == "run:requeued"] == []
    assert sum(e.kind == "step:pending" for e in events) == 1
