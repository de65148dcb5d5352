"""Flow control end to end through workers: a ``Limit`` held across worker processes on one
SQLite file, and the ``Limit`` + ``Rate`` of a ``sync_account`` workflow through an in-process
worker on the system clock.

Both tests judge the gates from what the bodies recorded as they ran, not from the store: the
number of bodies of one key running at once (a sweep over their start/end events) and when the
bodies started.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import threading
import time
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from lockgate import (
    EventKind,
    Limit,
    MemoryStore,
    Rate,
    RunEvent,
    StepContext,
    SystemClock,
    WorkflowClient,
    WorkflowContext,
    step,
    workflow,
)
from lockgate.stores import Store
from lockgate.worker import WorkerOptions, WorkflowWorker
from test_worker_processes import DEADLINE, Cluster, wait_for


@dataclass(frozen=True)
class Body:
    """One execution of a body, from its recorded start and end."""

    run_id: str
    key: str
    pid: int
    start: float
    end: float


def max_overlap(bodies: Iterable[Body]) -> int:
    """The most bodies running at once: a sweep over their starts and ends in time order, an
    end before a start at the same instant (intervals that only touch do not overlap)."""
    events = sorted(
        [(body.start, 1) for body in bodies] + [(body.end, -1) for body in bodies],
        key=lambda event: (event[0], event[1]),
    )
    running = peak = 0
    for _, delta in events:
        running += delta
        peak = max(peak, running)
    return peak


def completed_once(store: Store, name: str, run_id: str) -> tuple[RunEvent, RunEvent]:
    """The run's ``run:init`` and its one terminal event, a ``run:complete`` ending the
    journal."""
    events = store.load_run(name, run_id)
    ends = [e for e in events if e.is_terminal]
    assert len(ends) == 1, f"run {run_id}: {len(ends)} terminal events"
    assert events[-1] is ends[0], f"run {run_id}: events after its terminal"
    assert ends[0].kind == EventKind.RUN_COMPLETE, f"run {run_id}: {ends[0].payload}"
    (init,) = [e for e in events if e.kind == EventKind.RUN_INIT]
    return init, ends[0]


# -- Limit across worker processes ---------------------------------------------------------------

LIMITED = "proc_limited"  # tests/procs/workflows.py: Limit(key="tenant_id", max=2)


def recorded_bodies(path: Path) -> tuple[list[Body], list[str]]:
    """Each run's body from the lines ``proc_limited`` appended, and the lines in file order as
    ``"+run_id"``/``"-run_id"``. A run whose body started more than once (or never ended)
    fails here."""
    starts: dict[str, tuple[float, int, str]] = {}
    bodies: list[Body] = []
    order: list[str] = []
    for line in path.read_text().splitlines():
        what, ns, pid, run_id, key = line.split()
        if what == "start":
            assert run_id not in starts, f"run {run_id}: its body started twice"
            starts[run_id] = (int(ns) / 1e9, int(pid), key)
            order.append(f"+{run_id}")
        else:
            start, start_pid, start_key = starts[run_id]
            assert (start_pid, start_key) == (int(pid), key), line
            bodies.append(Body(run_id, key, int(pid), start, int(ns) / 1e9))
            order.append(f"-{run_id}")
    assert len(bodies) == len(starts), "a body started and never ended"
    return bodies, order


def overlap_in_file_order(order: list[str], runs: set[str]) -> int:
    """The same sweep over the order the lines reached the file (``O_APPEND``): no clock."""
    running = peak = 0
    for mark in order:
        if mark[1:] in runs:
            running += 1 if mark[0] == "+" else -1
            peak = max(peak, running)
    return peak


async def submit_by_name(
    client: WorkflowClient, tenant: str, count: int, record: Path
) -> dict[str, int]:
    """Queue ``count`` runs for ``tenant``; returns run id -> its ``n``. Bodies take 0.03 to
    0.09 s (0.06 on average), so runs claimed together end apart and their slots are taken
    again one at a time, by whichever worker polls first."""
    runs = {}
    for n in range(count):
        params = {
            "tenant_id": tenant,
            "n": n,
            "record": str(record),
            "pause": 0.03 + 0.02 * (n % 4),
        }
        handle = await client.submit(LIMITED, params)
        runs[handle.run_id] = n
    return runs


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    procs = Cluster(tmp_path)
    try:
        yield procs
    finally:
        procs.close()


def test_a_limit_of_two_holds_across_three_worker_processes(cluster: Cluster) -> None:
    store = cluster.store()  # creates the file before the workers open it
    record = cluster.tmp / "bodies.txt"
    # Polling often keeps every worker asking for acme's slots while others hold them.
    workers = [
        cluster.start("--worker-id", f"w{i}", "--concurrency", "4", "--poll", "0.005", ready=False)
        for i in range(3)
    ]
    # Ready: each recorded the policy of proc_limited and claims. Submit by name, as a process
    # that does not import the workflow: the gates are stamped from that policy.
    cluster.wait_ready()
    assert store.get_workflow_policy(LIMITED) is not None
    client = WorkflowClient(store)
    # acme's 50 runs first, then globex's 10 behind them in the queue: globex's must not wait
    # for acme's to drain.
    acme = asyncio.run(submit_by_name(client, "acme", 50, record))
    globex = asyncio.run(submit_by_name(client, "globex", 10, record))
    runs = {**acme, **globex}
    pending = set(runs)

    def all_ended() -> bool:
        for run_id in list(pending):
            info = store.get_run(LIMITED, run_id)
            if info is not None and info.status.is_terminal:
                pending.discard(run_id)
        return not pending

    wait_for(
        f"all {len(runs)} runs end (left: {len(pending)})",
        all_ended,
        cluster,
        timeout=DEADLINE,
    )
    assert all(proc.poll() is None for proc in workers), cluster.tail()

    for run_id, n in runs.items():
        init, end = completed_once(store, LIMITED, run_id)
        tenant = "acme" if run_id in acme else "globex"
        assert init.payload["gates"] == {"concurrency": {"key": tenant, "max": 2}}
        assert end.payload["result"] == n
    bodies, order = recorded_bodies(record)
    assert sorted(b.run_id for b in bodies) == sorted(runs), "not every body ran exactly once"
    by_key = {
        key: sorted((b for b in bodies if b.key == key), key=lambda b: b.start)
        for key in ("acme", "globex")
    }
    acme_bodies, globex_bodies = by_key["acme"], by_key["globex"]

    # The Limit held across the processes, with two bodies at once at some point: parallel,
    # not one at a time. The order the lines reached the file says the same without a clock.
    peak = max_overlap(acme_bodies)
    assert peak == 2, f"acme ran {peak} bodies at once under Limit(max=2)\n{cluster.tail()}"
    assert overlap_in_file_order(order, set(acme)) == 2
    assert max_overlap(globex_bodies) <= 2
    assert overlap_in_file_order(order, set(globex)) <= 2
    # ...and it held while the slots were shared between processes: at some point bodies of
    # acme ran in two worker processes at once.
    shared = [
        (a, b)
        for a in acme_bodies
        for b in acme_bodies
        if a.pid < b.pid and a.start < b.end and b.start < a.end
    ]
    pids = collections.Counter(b.pid for b in acme_bodies)
    assert shared, f"acme's bodies never ran in two processes at once (bodies per pid: {pids})"
    # No head-of-line blocking: globex, queued behind all of acme, was done before acme's
    # last ten bodies started.
    assert globex_bodies[-1].end < acme_bodies[40].start


# -- sync_account: Limit and Rate through an in-process worker ----------------------------------

SYNC_LIMIT = 2
SYNC_BURST = 10
SYNC_PER_SECOND = 5.0
SYNC_RUNS = 30
SYNC_PAUSE = 0.1

wall_clock = SystemClock()
_synced: list[tuple[str, str, float]] = []  # (start|end, run_id, time on the store's clock)
_synced_lock = threading.Lock()


def note_sync(what: str, run_id: str) -> None:
    with _synced_lock:
        _synced.append((what, run_id, wall_clock()))


@step
def pull_account(tenant_id: str, account: str, ctx: StepContext) -> str:
    note_sync("start", ctx.run_id)
    time.sleep(SYNC_PAUSE)
    note_sync("end", ctx.run_id)
    return f"{tenant_id}/{account}"


@workflow(
    name="sync_account",
    concurrency=Limit(key="tenant_id", max=SYNC_LIMIT),
    rate_limit=Rate(key="tenant_id", per_second=SYNC_PER_SECOND, burst=SYNC_BURST),
)
async def sync_account(ctx: WorkflowContext, tenant_id: str, account: str) -> str:
    return await pull_account(tenant_id, account)


@contextlib.asynccontextmanager
async def serving(worker: WorkflowWorker) -> AsyncIterator[None]:
    task = asyncio.create_task(worker.run())
    try:
        yield
    finally:
        worker.stop()
        async with asyncio.timeout(5):
            await asyncio.gather(task, return_exceptions=True)
        if task.done() and not task.cancelled() and task.exception() is not None:
            raise AssertionError("the worker failed") from task.exception()


async def test_sync_account_keeps_its_limit_and_rate_through_a_worker() -> None:
    """30 runs of one tenant: never more than 2 bodies at once, and the k-th start no sooner
    than the bucket allows (burst 10, then 5 a second): about 4 s in all."""
    _synced.clear()
    store = MemoryStore(clock=wall_clock, lock_ttl=5.0, heartbeat_interval=0.5)
    worker = WorkflowWorker(
        workflows=[sync_account],
        store=store,
        clock=wall_clock,
        options=WorkerOptions(
            max_concurrent_runs=8,
            claim_poll_interval=0.01,
            timer_poll_interval_s=0.05,
            orphan_scan_interval=0.5,
            shutdown_grace=2.0,
        ),
    )
    client = WorkflowClient(store, clock=wall_clock, poll_interval=0.02)
    handles = [
        await client.submit("sync_account", {"tenant_id": "acme", "account": f"a{n}"})
        for n in range(SYNC_RUNS)
    ]
    # Before the worker starts, so before the bucket is first filled at the first claim: a
    # lower bound for when the burst was granted.
    opened = wall_clock()
    async with serving(worker):
        deadline = time.monotonic() + 10
        while True:
            ended = [(await h.status()).is_terminal for h in handles]
            if all(ended):
                break
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"timed out after 10s: {sum(ended)}/{SYNC_RUNS} runs ended, "
                    f"{len(_synced)} body events recorded"
                )
            await asyncio.sleep(0.02)

    for n, handle in enumerate(handles):
        init, _ = completed_once(store, "sync_account", handle.run_id)
        assert init.payload["gates"] == {
            "concurrency": {"key": "acme", "max": SYNC_LIMIT},
            "rate": {"key": "acme", "per_second": SYNC_PER_SECOND, "burst": SYNC_BURST},
        }
        assert await handle.result(timeout=1) == f"acme/a{n}"

    starts = {run_id: at for what, run_id, at in _synced if what == "start"}
    ends = {run_id: at for what, run_id, at in _synced if what == "end"}
    assert len(_synced) == 2 * SYNC_RUNS, "a body ran more than once"
    assert set(starts) == set(ends) == {h.run_id for h in handles}
    bodies = [Body(run_id, "acme", 0, starts[run_id], ends[run_id]) for run_id in starts]
    assert max_overlap(bodies) == SYNC_LIMIT

    times = sorted(starts.values())
    # The k-th start spent the k-th token: the bucket held SYNC_BURST when it was filled (no
    # sooner than ``opened``) and gained SYNC_PER_SECOND a second since.
    for k, at in enumerate(times, start=1):
        allowed = SYNC_BURST + SYNC_PER_SECOND * (at - opened)
        assert k <= allowed + 1e-6, f"start {k} at +{at - opened:.3f}s: only {allowed:.2f} tokens"
    # The burst was used: the first ten went as fast as the Limit let them, far sooner than
    # the 1.8 s the rate alone would give them...
    assert times[SYNC_BURST - 1] - times[0] < 1.5, times[:SYNC_BURST]
    # ...and the 30th started about (30 - 10) / 5 = 4 s after the first (0.1 s allowed for
    # the first run's claim-to-body lag, which the bucket's clock does not see).
    needed = (SYNC_RUNS - SYNC_BURST) / SYNC_PER_SECOND
    assert times[-1] - times[0] >= needed - 0.1, times[-1] - times[0]
