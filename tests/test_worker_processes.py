"""Worker processes on one SQLite file: real processes, real signals, real crashes.

Each test starts ``tests/procs/worker_main.py`` as subprocesses serving ``tests/procs/
workflows.py`` and checks, from the store and from what the step bodies recorded, that every
run ends exactly once, none is lost, and no step whose outcome was journaled runs again.

Tests wait for states, never for time to pass: a worker is started and then waited for until
its ``/readyz`` answers 200 (its workflows recorded, its store answering) before the test goes
on, and every wait has a deadline (``DEADLINE``) that a machine with every core busy meets.
"""

from __future__ import annotations

import collections
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pytest

from lockgate import EventKind, RunEvent, RunStatus
from lockgate._failpoints import ENV as FAILPOINTS_ENV
from lockgate._failpoints import POINTS
from lockgate.stores import SQLiteStore

PROCS = Path(__file__).parent / "procs"
NAME = "proc_steps"
LOCK_TTL = 1.5
HEARTBEAT = 0.3
#: Seconds any one state a test waits for may take, with every core of the machine busy.
DEADLINE = 120.0
#: What a worker logs once its health endpoint listens (each takes a free port).
HEALTH_LINE = re.compile(rb"health endpoint listening on http://127\.0\.0\.1:(\d+)")


@dataclass(frozen=True)
class Execution:
    """One line the step bodies recorded: a step effect that ran."""

    run_id: str
    call_index: int
    done_already: bool
    pid: int


@dataclass
class Cluster:
    """Worker processes on one SQLite file, each logging to a file of its own."""

    tmp: Path
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    logs: list[IO[bytes]] = field(default_factory=list)
    #: Added to every worker's environment (a journal URL, for one).
    env: dict[str, str] = field(default_factory=dict)

    @property
    def db(self) -> Path:
        return self.tmp / "lockgate.db"

    @property
    def record(self) -> Path:
        return self.tmp / "executions.txt"

    @property
    def target(self) -> str:
        """What the workers' ``--store`` (and the step bodies' second view) names."""
        return str(self.db)

    def store(self) -> SQLiteStore:
        return SQLiteStore(
            self.db, lock_ttl=LOCK_TTL, heartbeat_interval=HEARTBEAT, synchronous="normal"
        )

    def start(
        self, *args: str, failpoint: str | None = None, ready: bool = True
    ) -> subprocess.Popen[bytes]:
        """Start a worker process; with ``ready``, return once it is ready (or, armed with a
        ``failpoint``, once it is ready or has died at it)."""
        env = {k: v for k, v in os.environ.items() if k != FAILPOINTS_ENV}
        env.update(self.env)
        env.update(LOCKGATE_TEST_STORE=self.target, LOCKGATE_TEST_RECORD=str(self.record))
        if failpoint is not None:
            env[FAILPOINTS_ENV] = failpoint
        log = (self.tmp / f"worker-{len(self.procs)}.log").open("wb")
        self.logs.append(log)
        main = str(PROCS / "worker_main.py")
        proc = subprocess.Popen(
            [sys.executable, main, "--store", self.target, "--health-port", "0", *args],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        self.procs.append(proc)
        if ready:
            self.wait_ready([proc], may_die=failpoint is not None)
        return proc

    def wait_ready(
        self, procs: list[subprocess.Popen[bytes]] | None = None, *, may_die: bool = False
    ) -> None:
        """Wait until each of ``procs`` (default: every worker) answers 200 on ``/readyz``."""
        for proc in self.procs if procs is None else procs:
            log = self.tmp / f"worker-{self.procs.index(proc)}.log"

            def ready(proc: subprocess.Popen[bytes] = proc, log: Path = log) -> bool:
                if proc.poll() is not None:
                    if may_die:
                        return True
                    raise AssertionError(f"worker {proc.pid} exited\n{self.tail()}")
                found = HEALTH_LINE.search(log.read_bytes())
                return found is not None and readyz(int(found.group(1))) == 200

            wait_for(f"worker {proc.pid} is ready", ready, self, DEADLINE)

    def executions(self) -> list[Execution]:
        if not self.record.exists():
            return []
        rows = [line.split() for line in self.record.read_text().splitlines() if line]
        return [Execution(r, int(c), d == "1", int(p)) for r, c, d, p in rows]

    def tail(self) -> str:
        """The end of every worker's log, for a failure message."""
        parts = []
        for index, proc in enumerate(self.procs):
            text = (self.tmp / f"worker-{index}.log").read_text(errors="replace")
            parts.append(
                f"--- worker {index} (pid {proc.pid}, rc {proc.poll()}) ---\n{text[-3000:]}"
            )
        return "\n".join(parts)

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
        for proc in self.procs:
            proc.wait(timeout=10)
        for log in self.logs:
            log.close()


def readyz(port: int) -> int:
    """The status ``/readyz`` answers on ``port`` (0 when nothing answers)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=10) as answer:
            json.loads(answer.read())
            return int(answer.status)
    except urllib.error.HTTPError as refused:
        return int(refused.code)
    except OSError:
        return 0


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    procs = Cluster(tmp_path)
    try:
        yield procs
    finally:
        procs.close()


def wait_for(what: str, check: Callable[[], bool], cluster: Cluster, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(
                f"timed out after {timeout}s waiting until {what}\n{cluster.tail()}"
            )
        time.sleep(0.05)


def submit(store: SQLiteStore, count: int, **params: Any) -> dict[str, int]:
    """Queue ``count`` runs of the test workflow; returns run id -> its ``n``."""
    runs = {}
    for n in range(count):
        run_id = store.submit_run(
            NAME, uuid.uuid4().hex, {"n": n, **params}, version="1", version_behavior="pinned"
        )
        runs[run_id] = n
    return runs


def wait_ended(store: SQLiteStore, runs: dict[str, int], cluster: Cluster, timeout: float) -> None:
    pending = set(runs)

    def all_ended() -> bool:
        for run_id in list(pending):
            info = store.get_run(NAME, run_id)
            if info is not None and info.status.is_terminal:
                pending.discard(run_id)
        return not pending

    wait_for(f"all {len(runs)} runs end (left: {len(pending)})", all_ended, cluster, timeout)


def requeues(events: list[RunEvent]) -> list[str]:
    return [str(e.payload["reason"]) for e in events if e.kind == EventKind.RUN_REQUEUED]


def check_invariants(
    store: SQLiteStore, runs: dict[str, int], cluster: Cluster, steps: int
) -> tuple[dict[str, list[RunEvent]], collections.Counter[tuple[str, int]]]:
    """Every run completed exactly once with its own result; every step ran; none ran after
    its outcome was journaled; and a step ran twice only in a run that lost a worker."""
    journals = {run_id: store.load_run(NAME, run_id) for run_id in runs}
    for run_id, events in journals.items():
        ends = [e for e in events if e.is_terminal]
        assert len(ends) == 1, f"run {run_id}: {len(ends)} terminal events"
        assert events[-1] is ends[0], f"run {run_id}: events after its terminal"
        assert ends[0].kind == EventKind.RUN_COMPLETE, f"run {run_id}: {ends[0].payload}"
        assert ends[0].payload["result"] == 2 * runs[run_id]
    executions = cluster.executions()
    again = [e for e in executions if e.done_already]
    assert not again, f"steps ran after their step:done was journaled: {again[:5]}"
    counts = collections.Counter((e.run_id, e.call_index) for e in executions)
    expected = {(run_id, call) for run_id in runs for call in range(steps)}
    assert set(counts) == expected
    for (run_id, call), times in counts.items():
        if times > 1:
            assert "owner_gone" in requeues(journals[run_id]), (
                f"run {run_id} ran call {call} {times} times without losing a worker"
            )
    return journals, counts


def test_three_workers_complete_500_runs_once_despite_a_sigkill(cluster: Cluster) -> None:
    store = cluster.store()
    workers = [cluster.start("--worker-id", f"w{i}", ready=False) for i in range(3)]
    cluster.wait_ready()
    runs = submit(store, 500, steps=2, pause=0.01)
    victim = workers[0]

    def victim_is_busy() -> bool:
        return sum(e.pid == victim.pid for e in cluster.executions()) >= 20

    wait_for("the first worker has run 20 steps", victim_is_busy, cluster, timeout=DEADLINE)
    victim.send_signal(signal.SIGKILL)
    assert victim.wait(timeout=DEADLINE) == -signal.SIGKILL

    wait_ended(store, runs, cluster, timeout=DEADLINE)
    journals, _ = check_invariants(store, runs, cluster, steps=2)
    # The killed worker held runs mid-step: they were recovered after their lease lapsed and
    # completed by the others.
    lost = [run_id for run_id, events in journals.items() if "owner_gone" in requeues(events)]
    assert lost, "no run was recovered from the killed worker"
    assert all(proc.poll() is None for proc in workers[1:]), cluster.tail()


def test_sigterm_hands_runs_back_and_another_worker_finishes_them(cluster: Cluster) -> None:
    store = cluster.store()
    # Steps long enough (3 s) that the SIGTERM lands in the first ones even when the worker
    # takes its time to handle it, short against the grace (10 s).
    runs = submit(store, 6, steps=2, pause=3.0)
    first = cluster.start("--worker-id", "first", "--concurrency", "4")
    wait_for(
        "the first worker is in the middle of four steps",
        lambda: len(cluster.executions()) >= 4,
        cluster,
        timeout=DEADLINE,
    )
    first.send_signal(signal.SIGTERM)
    assert first.wait(timeout=DEADLINE) == 0, cluster.tail()

    for run_id in runs:
        info = store.get_run(NAME, run_id)
        assert info is not None
        assert (info.status, info.lock_holder) == (RunStatus.PENDING, None)
        assert requeues(store.load_run(NAME, run_id)) == []
    # The steps in flight at SIGTERM finished inside the grace and were journaled.
    assert len(cluster.executions()) == 4

    cluster.start("--worker-id", "second")
    wait_ended(store, runs, cluster, timeout=DEADLINE)
    _, counts = check_invariants(store, runs, cluster, steps=2)
    assert set(counts.values()) == {1}, "a handed-back run repeated a step"


#: For a two-step run whose first worker crashes at the point: how many times each call's
#: effect runs (only a crash between an effect and its journal append repeats one), and the
#: attempts journaled as step:pending for the first call (a second one is the clean worker's).
EXPECTED = {
    "before_step_effect": ((1, 1), [1, 2]),
    "after_step_effect": ((2, 1), [1, 2]),
    "after_step_append": ((1, 1), [1]),
    "after_terminal_append": ((1, 1), [1]),
}


@pytest.mark.parametrize("point", POINTS)
def test_a_crash_at_each_fault_point_is_recovered(cluster: Cluster, point: str) -> None:
    assert set(EXPECTED) == set(POINTS)
    store = cluster.store()
    runs = submit(store, 1, steps=2, pause=0.0)
    (run_id,) = runs
    crashing = cluster.start("--worker-id", "crashing", failpoint=f"{point}:crash")
    assert crashing.wait(timeout=DEADLINE) == -signal.SIGKILL, cluster.tail()

    cluster.start("--worker-id", "clean")
    wait_ended(store, runs, cluster, timeout=DEADLINE)
    wait_for(
        "the dead worker's lease is gone",
        lambda: store.lock_holder(NAME, run_id) is None,
        cluster,
        timeout=DEADLINE,
    )
    _, counts = check_invariants(store, runs, cluster, steps=2)
    executions, pending_attempts = EXPECTED[point]
    assert (counts[run_id, 0], counts[run_id, 1]) == executions
    events = store.load_run(NAME, run_id)
    assert [
        e.payload["attempt"]
        for e in events
        if e.kind == EventKind.STEP_PENDING and e.payload["call_index"] == 0
    ] == pending_attempts
    if point == "after_terminal_append":
        # It died holding a finished run: nothing is left to recover or run again.
        assert requeues(events) == []
        assert {e.pid for e in cluster.executions()} == {crashing.pid}
    else:
        assert requeues(events) == ["owner_gone"]
