"""Worker processes on one real Valkey server: many processes, real signals, a server that
restarts or stops under load.

Each test starts ``tests/procs/worker_main.py`` as subprocesses on a ``valkey://`` URL (a
namespace of its own per test) and checks, from the store and from what the bodies recorded,
that every run ends exactly once, none is lost, gates hold, and no journaled step runs again.
As in ``test_worker_processes``, a test goes on once every worker it started is ready, and
waits for states with deadlines a busy machine meets.
"""

from __future__ import annotations

import collections
import itertools
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from lockgate import EventKind
from lockgate.stores import Store, ValkeyStore
from test_flow_processes import completed_once, max_overlap, recorded_bodies
from test_worker_processes import DEADLINE, HEARTBEAT, LOCK_TTL, Cluster, wait_for
from valkey_server import ValkeyServer, shared_url


@dataclass
class ValkeyCluster(Cluster):
    """Worker processes on one Valkey namespace (a fresh one per test), each logging to a file
    of its own: the SQLite tests' cluster, pointed at a server."""

    server_url: str = ""
    namespace: str = field(default_factory=lambda: f"p{uuid.uuid4().hex[:10]}")

    @property
    def target(self) -> str:
        return f"{self.server_url}?namespace={self.namespace}"

    def store(self, **options: Any) -> ValkeyStore:  # type: ignore[override]
        return ValkeyStore(
            self.server_url,
            namespace=self.namespace,
            lock_ttl=LOCK_TTL,
            heartbeat_interval=HEARTBEAT,
            **options,
        )


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ValkeyCluster]:
    running = ValkeyCluster(tmp_path, server_url=shared_url())
    yield running
    running.close()


def all_ended(store: Store, name: str, runs: Iterator[str] | list[str]) -> Callable[[], bool]:
    pending = set(runs)

    def check() -> bool:
        for run_id in list(pending):
            info = store.get_run(name, run_id)
            if info is not None and info.status.is_terminal:
                pending.discard(run_id)
        return not pending

    return check


def test_four_workers_finish_2000_runs_across_50_keys_with_a_limit_of_three(
    cluster: ValkeyCluster,
) -> None:
    store = cluster.store()
    record = cluster.tmp / "bodies.txt"
    workers = [
        cluster.start("--worker-id", f"w{i}", "--concurrency", "40", "--poll", "0.005", ready=False)
        for i in range(4)
    ]
    cluster.wait_ready()  # all four are claiming before the first run is queued
    runs: dict[str, tuple[str, int]] = {}
    for n in range(2000):
        tenant = f"t{n % 50}"
        run_id = store.submit_run(
            "proc_limited3",
            uuid.uuid4().hex,
            {"tenant_id": tenant, "n": n, "record": str(record), "pause": 1.5},
            version="1",
            version_behavior="pinned",
            concurrency_key=tenant,
            concurrency_max=3,
        )
        runs[run_id] = (tenant, n)
    # 4 x 40 attempt slots against 50 keys x 3, and bodies long enough (1.5 s) for claims to
    # fill them: more room than the limits allow, so the gates, not the workers, bound each key.
    wait_for(
        "all 2000 runs end", all_ended(store, "proc_limited3", list(runs)), cluster, 2 * DEADLINE
    )
    assert all(proc.poll() is None for proc in workers), cluster.tail()
    for run_id, (_, n) in runs.items():
        _, end = completed_once(store, "proc_limited3", run_id)
        assert end.payload["result"] == n
    bodies, _ = recorded_bodies(record)
    assert sorted(body.run_id for body in bodies) == sorted(runs)  # each body ran once
    by_key: dict[str, list[Any]] = collections.defaultdict(list)
    for body in bodies:
        by_key[body.key].append(body)
    peaks = {key: max_overlap(found) for key, found in by_key.items()}
    assert max(peaks.values()) <= 3, peaks
    assert max(peaks.values()) == 3, peaks  # the limit was used, not just respected
    assert len({body.pid for body in bodies}) == 4  # every worker took part


# -- faults ------------------------------------------------------------------------------------

STEPS = "proc_steps"  # tests/procs/workflows.py: records each step effect, then sleeps


def submit_steps(store: Store, count: int, **params: Any) -> dict[str, int]:
    runs = {}
    for n in range(count):
        run_id = store.submit_run(
            STEPS, uuid.uuid4().hex, {"n": n, **params}, version="1", version_behavior="pinned"
        )
        runs[run_id] = n
    return runs


def assert_all_completed_once(store: Store, cluster: ValkeyCluster, runs: dict[str, int]) -> None:
    for run_id, n in runs.items():
        _, end = completed_once(store, STEPS, run_id)
        assert end.payload["result"] == n * 2
    again = [e for e in cluster.executions() if e.done_already]
    assert again == [], f"journaled steps ran again: {again}\n{cluster.tail()}"


def test_a_worker_killed_mid_step_loses_nothing_and_reruns_no_journaled_step(
    cluster: ValkeyCluster,
) -> None:
    store = cluster.store()
    runs = submit_steps(store, 30, steps=3, pause=0.2)
    doomed = cluster.start("--worker-id", "doomed", "--concurrency", "4")
    wait_for(
        "the doomed worker is inside a step",
        lambda: any(e.pid == doomed.pid for e in cluster.executions()),
        cluster,
        DEADLINE,
    )
    cluster.start("--worker-id", "survivor", "--concurrency", "4")  # ready: claiming too
    doomed.send_signal(signal.SIGKILL)
    wait_for("all runs end", all_ended(store, STEPS, list(runs)), cluster, DEADLINE)
    assert_all_completed_once(store, cluster, runs)
    requeued = [
        run_id
        for run_id in runs
        if any(e.kind == EventKind.RUN_REQUEUED for e in store.load_run(STEPS, run_id))
    ]
    assert requeued, "the killed worker held runs that had to be recovered"


def test_a_frozen_worker_past_its_lease_has_every_write_refused(cluster: ValkeyCluster) -> None:
    store = cluster.store()
    (run_id,) = submit_steps(store, 1, steps=2, pause=1.0)
    frozen = cluster.start("--worker-id", "frozen", "--concurrency", "1")
    wait_for(
        "the worker is inside the first step",
        lambda: any(e.pid == frozen.pid for e in cluster.executions()),
        cluster,
        DEADLINE,
    )
    frozen.send_signal(signal.SIGSTOP)
    try:
        cluster.start("--worker-id", "rescuer", "--concurrency", "1")
        wait_for("the run ends", all_ended(store, STEPS, [run_id]), cluster, DEADLINE)
    finally:
        frozen.send_signal(signal.SIGCONT)
    # The thawed attempt finishes its step, finds its lease gone, and ends: its worker logs
    # how (its lease lost, or no heartbeat through for a whole lease).
    frozen_log = cluster.tmp / "worker-0.log"
    wait_for(
        "the thawed attempt ended",
        lambda: f"run {run_id} of {STEPS}: " in frozen_log.read_text(errors="replace"),
        cluster,
        DEADLINE,
    )
    assert frozen.poll() is None, cluster.tail()
    completed_once(store, STEPS, run_id)
    journal = store.load_run(STEPS, run_id)
    epochs = {e.headers.get("lg-epoch") for e in journal if e.kind == EventKind.STEP_DONE}
    assert epochs == {"2"}, f"step results from more than the rescuing claim: {journal}"
    ran = [(e.pid, e.call_index) for e in cluster.executions()]
    assert (frozen.pid, 0) in ran  # the frozen attempt did run its step; its result is gone
    assert not [e for e in cluster.executions() if e.done_already]


@pytest.fixture
def own_server() -> Iterator[ValkeyServer]:
    """A server of the test's own, with an AOF synced on every write."""
    server = ValkeyServer(appendonly=True).start()
    yield server
    server.close()


def test_a_server_killed_and_restarted_mid_load_loses_no_run(
    tmp_path: Path, own_server: ValkeyServer
) -> None:
    cluster = ValkeyCluster(tmp_path, server_url=own_server.url)
    try:
        store = cluster.store()
        runs = submit_steps(store, 60, steps=2, pause=0.05)
        for i in range(2):
            cluster.start("--worker-id", f"w{i}", "--concurrency", "4", ready=False)
        cluster.wait_ready()  # killed while still starting, a worker would only wait longer
        wait_for("runs are under way", lambda: len(cluster.executions()) >= 10, cluster, DEADLINE)
        own_server.stop(kill=True)
        own_server.start()  # same port, same directory: it replays its AOF
        wait_for("all runs end", all_ended(store, STEPS, list(runs)), cluster, DEADLINE)
        assert_all_completed_once(store, cluster, runs)
        assert all(proc.poll() is None for proc in cluster.procs), cluster.tail()
    finally:
        cluster.close()


def test_a_server_down_for_seconds_pauses_runs_which_then_resume(
    tmp_path: Path, own_server: ValkeyServer
) -> None:
    cluster = ValkeyCluster(tmp_path, server_url=own_server.url)
    try:
        store = cluster.store()
        runs = submit_steps(store, 40, steps=2, pause=0.05)
        # Orphan scans far apart (20 s, against an 8 s outage): what puts the interrupted runs
        # back is their own workers.
        for i in range(2):
            cluster.start(
                "--worker-id", f"w{i}", "--concurrency", "4", "--orphan-scan", "20", ready=False
            )
        cluster.wait_ready()  # both serving before the fault
        wait_for("runs are under way", lambda: len(cluster.executions()) >= 10, cluster, DEADLINE)
        own_server.stop(kill=True)
        # Longer than a store call's retries (about 3 s) and than the lease (1.5 s): the
        # attempts give up on the store, and their leases lapse, while it is away.
        time.sleep(7.0)
        during = len(cluster.executions())
        time.sleep(1.0)
        assert len(cluster.executions()) <= during + 8  # at most the steps already under way
        own_server.start()
        wait_for("all runs end", all_ended(store, STEPS, list(runs)), cluster, DEADLINE)
        assert_all_completed_once(store, cluster, runs)
        assert all(proc.poll() is None for proc in cluster.procs), cluster.tail()
        # Each worker told the outage once as it began and once as it ended, however many of
        # its calls failed meanwhile.
        for index in range(2):
            log = (cluster.tmp / f"worker-{index}.log").read_text(errors="replace")
            assert log.count("the worker waits for it") == 1, log
            assert log.count("answers again") == 1, log
        # The attempts the outage interrupted put their runs back counted against
        # max_store_requeues, once the server answered, not as lost owners. The one way to
        # owner_gone here is a claim whose reply the outage lost: the server leased the run,
        # no attempt ever started on it, and the (20 s) orphan scan requeued it. Such a
        # requeue follows no attempt's events.
        reasons: collections.Counter[str] = collections.Counter()
        for run_id in runs:
            journal = store.load_run(STEPS, run_id)
            for before, event in itertools.pairwise(journal):
                if event.kind != EventKind.RUN_REQUEUED:
                    continue
                reasons[event.payload["reason"]] += 1
                if event.payload["reason"] == "owner_gone":
                    assert before.kind in (EventKind.RUN_INIT, EventKind.RUN_REQUEUED), (
                        [e.kind for e in journal],
                        cluster.tail(),
                    )
        assert reasons["store_unavailable"] >= 1, (reasons, cluster.tail())
    finally:
        cluster.close()
