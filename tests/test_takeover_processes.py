"""A dead worker's runs move in seconds: real ``lockgate worker`` processes with default
options (default leases, default presence and takeover), one of two killed with SIGKILL in the
middle of a step, on SQLite, on Valkey, and on Valkey with a Kafka journal serving a bound and
an ordered bound topic. The step's next start, on the other worker, must come within
:data:`TAKEOVER_S` of the kill, as the step bodies' own record says (``procs/
takeover_workflows.py``). A worker frozen (SIGSTOP) for less than its presence TTL keeps its
run; one frozen past it loses the run, and what it writes after it wakes is refused.

Tests wait for states, never for time to pass; the only figure asserted is the takeover time,
measured from the kill to the recorded start.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from lockgate import EventKind, RunStatus, WorkflowClient
from lockgate.stores import Store
from lockgate.stores.opener._open import open_store
from lockgate.streams.bound import bound_run_id
from lockgate.worker import WorkerOptions
from test_kafka_trigger_processes import kcat_produce
from test_worker_processes import PROCS, readyz, wait_for
from valkey_server import shared_url

#: The contract: a killed worker's run starts again on a live one within this many seconds.
TAKEOVER_S = 10.0
#: Seconds any one state a test waits for may take, with every core of the machine busy.
DEADLINE = 120.0
HEALTH = re.compile(rb"health (?:endpoint )?on http://127\.0\.0\.1:(\d+)")
#: A freeze shorter than the presence TTL by a margin for a loaded machine: a GC pause, a
#: swapped-out page, a busy host.
BRIEF_FREEZE_S = 2.5


@dataclass(frozen=True)
class Line:
    what: str
    run_id: str
    pid: int
    at: float


@dataclass
class Workers:
    """``lockgate worker takeover_workflows:SERVED`` processes on one store."""

    tmp: Path
    store_url: str
    journal: str | None = None
    topic: str = ""
    bootstrap: str = ""
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    logs: list[IO[bytes]] = field(default_factory=list)
    stores: list[Store] = field(default_factory=list)

    @property
    def record(self) -> Path:
        return self.tmp / "record.txt"

    def start(self, served: str) -> subprocess.Popen[bytes]:
        """A worker with default options, once it answers ready."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("LOCKGATE_")}
        env.update(LOCKGATE_TEST_RECORD=str(self.record), LOCKGATE_TEST_BOUND_TOPIC=self.topic)
        log_path = self.tmp / f"worker-{len(self.procs)}.log"
        log = log_path.open("wb")
        self.logs.append(log)
        command = ["worker", f"takeover_workflows:{served}", "--store", self.store_url]
        if self.journal is not None:
            command += ["--journal", self.journal]
        command += ["--health-port", "0", "--log-level", "info"]
        proc = subprocess.Popen(
            [sys.executable, "-m", "lockgate", *command],
            cwd=PROCS,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        self.procs.append(proc)

        def ready() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"worker {proc.pid} exited\n{self.tail()}")
            found = HEALTH.search(log_path.read_bytes())
            return found is not None and readyz(int(found.group(1))) == 200

        wait_for(f"worker {proc.pid} is ready", ready, self, DEADLINE)  # type: ignore[arg-type]
        return proc

    def store(self) -> Store:
        store = open_store(self.store_url, journal=self.journal)
        self.stores.append(store)
        return store

    def lines(self) -> list[Line]:
        if not self.record.exists():
            return []
        rows = [line.split() for line in self.record.read_text().splitlines() if line]
        return [Line(w, r, int(p), float(t)) for w, r, p, t in rows]

    def starts(self, run_id: str) -> list[Line]:
        return [ln for ln in self.lines() if ln.what == "start" and ln.run_id == run_id]

    def release(self, run_id: str) -> None:
        (self.tmp / f"{run_id}.go").touch()

    def holder(self, run_id: str) -> subprocess.Popen[bytes]:
        """The worker process running the run's first attempt, once it started."""
        wait_for(
            f"run {run_id} starts its step",
            lambda: bool(self.starts(run_id)),
            self,  # type: ignore[arg-type]
            DEADLINE,
        )
        pid = self.starts(run_id)[0].pid
        (proc,) = [p for p in self.procs if p.pid == pid]
        return proc

    def tail(self) -> str:
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
                proc.send_signal(signal.SIGCONT)
                proc.kill()
        for proc in self.procs:
            proc.wait(timeout=10)
        for log in self.logs:
            log.close()
        for store in self.stores:
            store.close()


def valkey_url() -> str:
    return f"{shared_url()}?namespace=t{uuid.uuid4().hex[:10]}"


@pytest.fixture
def sqlite_workers(tmp_path: Path) -> Iterator[Workers]:
    workers = Workers(tmp_path, f"sqlite:///{tmp_path / 'lockgate.db'}")
    yield workers
    workers.close()


@pytest.fixture
def valkey_workers(tmp_path: Path) -> Iterator[Workers]:
    workers = Workers(tmp_path, valkey_url())
    yield workers
    workers.close()


@pytest.fixture
def kafka_workers(tmp_path: Path, kafka_bootstrap: str) -> Iterator[Workers]:
    prefix = f"tk{uuid.uuid4().hex[:10]}"
    workers = Workers(
        tmp_path,
        valkey_url(),
        journal=f"kafka://{kafka_bootstrap}?topic_prefix={prefix}",
        topic=f"{prefix}-bound",
        bootstrap=kafka_bootstrap,
    )
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(workers.topic, 2, 1)])[workers.topic].result(timeout=30)
    yield workers
    workers.close()


def submit(store: Store, name: str = "takeover_plain", **params: Any) -> str:
    async def go() -> str:
        handle = await WorkflowClient(store).submit(name, params)
        return handle.run_id

    return asyncio.run(go())


def kill_and_time_takeover(workers: Workers, run_id: str) -> float:
    """SIGKILL the worker running the run's step; return the seconds from the kill to the
    step's next start, on the other worker."""
    victim = workers.holder(run_id)
    killed_at = time.time()
    victim.send_signal(signal.SIGKILL)
    assert victim.wait(timeout=DEADLINE) == -signal.SIGKILL
    wait_for(
        f"run {run_id}'s step starts again on the other worker",
        lambda: any(ln.pid != victim.pid for ln in workers.starts(run_id)),
        workers,  # type: ignore[arg-type]
        DEADLINE,
    )
    again = next(ln for ln in workers.starts(run_id) if ln.pid != victim.pid)
    return again.at - killed_at


def wait_complete(workers: Workers, store: Store, name: str, run_id: str) -> None:
    def complete() -> bool:
        info = store.get_run(name, run_id)
        return info is not None and info.status == RunStatus.COMPLETE

    wait_for(f"run {run_id} completes", complete, workers, DEADLINE)  # type: ignore[arg-type]


def requeue_reasons(store: Store, name: str, run_id: str) -> list[str]:
    return [
        str(e.payload["reason"])
        for e in store.load_run(name, run_id)
        if e.kind == EventKind.RUN_REQUEUED
    ]


def test_the_defaults_take_a_dead_worker_over_within_ten_seconds() -> None:
    # The figures the tests below hold the defaults to (docs/workers.md explains them).
    defaults = WorkerOptions()
    assert defaults.presence_ttl + defaults.takeover_interval < TAKEOVER_S / 1.5
    # A frozen worker writes at most presence_interval before its freeze and soon after it.
    assert defaults.presence_ttl > BRIEF_FREEZE_S + defaults.presence_interval + 1.0


@pytest.mark.parametrize("backend", ["sqlite", "valkey"])
def test_a_sigkilled_workers_step_starts_again_on_the_other_within_10s(
    request: pytest.FixtureRequest, backend: str
) -> None:
    workers: Workers = request.getfixturevalue(f"{backend}_workers")
    workers.start("plain")
    workers.start("plain")
    store = workers.store()
    run_id = submit(store)
    took = kill_and_time_takeover(workers, run_id)
    wait_complete(workers, store, "takeover_plain", run_id)
    assert requeue_reasons(store, "takeover_plain", run_id) == ["owner_gone"]
    assert took < TAKEOVER_S, f"the step started again {took:.1f}s after the kill\n{workers.tail()}"


@pytest.mark.parametrize("served", ["bound", "ordered"])
def test_a_bound_run_of_a_sigkilled_worker_starts_again_within_10s(
    kafka_workers: Workers, served: str
) -> None:
    workers = kafka_workers
    workers.start(served)
    workers.start(served)
    store = workers.store()
    # Two records of one key, so one partition: with ordered the second waits for the first.
    kcat_produce(
        workers.bootstrap,
        workers.topic,
        [f"k\t{json.dumps({'n': 0})}", f"k\t{json.dumps({'n': 1, 'hold': False})}"],
    )
    wait_for(
        "the first record's run starts its step",
        lambda: any(ln.run_id.endswith(":0") for ln in workers.lines() if ln.what == "start"),
        workers,  # type: ignore[arg-type]
        DEADLINE,
    )
    holding = [ln for ln in workers.lines() if ln.what == "start" and ln.run_id.endswith(":0")]
    first = holding[0].run_id
    partition = int(first.split(":")[-2])
    second = bound_run_id(workers.topic, partition, 1)
    name = f"takeover_{'bound' if served == 'bound' else 'ordered'}"
    took = kill_and_time_takeover(workers, first)
    wait_complete(workers, store, name, first)
    wait_complete(workers, store, name, second)  # the partition moved on
    if served == "ordered":
        (first_end,) = [ln for ln in workers.lines() if ln.what == "end" and ln.run_id == first]
        assert workers.starts(second)[0].at >= first_end.at, "ordered ran out of order"
    assert took < TAKEOVER_S, f"the step started again {took:.1f}s after the kill\n{workers.tail()}"


@pytest.mark.parametrize("backend", ["sqlite", "valkey"])
def test_a_worker_frozen_briefly_keeps_its_run(
    request: pytest.FixtureRequest, backend: str
) -> None:
    workers: Workers = request.getfixturevalue(f"{backend}_workers")
    workers.start("plain")
    workers.start("plain")
    store = workers.store()
    run_id = submit(store)
    frozen = workers.holder(run_id)
    frozen.send_signal(signal.SIGSTOP)
    stopped_at = time.monotonic()
    try:
        # The one wait on time itself: the freeze is what is under test.
        time.sleep(BRIEF_FREEZE_S)
    finally:
        frozen.send_signal(signal.SIGCONT)
    froze_for = time.monotonic() - stopped_at
    workers.release(run_id)
    wait_complete(workers, store, "takeover_plain", run_id)
    assert [ln.pid for ln in workers.starts(run_id)] == [frozen.pid], workers.tail()
    assert requeue_reasons(store, "takeover_plain", run_id) == []
    assert froze_for >= BRIEF_FREEZE_S


@pytest.mark.parametrize("backend", ["sqlite", "valkey"])
def test_a_worker_frozen_past_its_presence_loses_its_run_and_its_late_writes(
    request: pytest.FixtureRequest, backend: str
) -> None:
    workers: Workers = request.getfixturevalue(f"{backend}_workers")
    workers.start("plain")
    workers.start("plain")
    store = workers.store()
    run_id = submit(store)
    frozen = workers.holder(run_id)
    frozen.send_signal(signal.SIGSTOP)
    stopped_at = time.time()
    try:
        wait_for(
            "the other worker starts the frozen worker's step",
            lambda: any(ln.pid != frozen.pid for ln in workers.starts(run_id)),
            workers,  # type: ignore[arg-type]
            DEADLINE,
        )
        wait_complete(workers, store, "takeover_plain", run_id)
    finally:
        frozen.send_signal(signal.SIGCONT)
    again = next(ln for ln in workers.starts(run_id) if ln.pid != frozen.pid)
    # Its lease (30 s by default) had not lapsed: presence moved the run.
    assert again.at - stopped_at < TAKEOVER_S, workers.tail()
    workers.release(run_id)  # the woken worker's first attempt finishes its step now
    wait_for(
        "the woken worker's step returns",
        lambda: any(
            ln.what == "end" and ln.pid == frozen.pid and ln.run_id == run_id
            for ln in workers.lines()
        ),
        workers,  # type: ignore[arg-type]
        DEADLINE,
    )
    events = store.load_run("takeover_plain", run_id)
    done = [e for e in events if e.kind == EventKind.STEP_DONE]
    assert len(done) == 1, events
    assert done[0].payload["result"] == again.pid  # the woken worker's step:done was refused
    assert [e.kind for e in events if e.is_terminal] == [EventKind.RUN_COMPLETE]
    assert frozen.poll() is None, workers.tail()  # it lives on, serving


def test_a_worker_whose_event_loop_is_blocked_past_its_presence_ttl_keeps_its_run(
    sqlite_workers: Workers,
) -> None:
    # Presence is written from a thread: a blocked loop (a body that never awaits) is left
    # to the lease and the loop watchdog, as before, not taken for a dead process.
    workers = sqlite_workers
    defaults = WorkerOptions()
    blocked_s = defaults.presence_ttl + 2 * defaults.takeover_interval
    workers.start("blocking")
    workers.start("blocking")
    store = workers.store()
    run_id = submit(store, "takeover_blocking", seconds=blocked_s)
    holder = workers.holder(run_id)
    wait_complete(workers, store, "takeover_blocking", run_id)
    assert [ln.pid for ln in workers.starts(run_id)] == [holder.pid], workers.tail()
    assert requeue_reasons(store, "takeover_blocking", run_id) == []
