"""A Valkey that restarts without its data under running ``lockgate worker`` processes.

The server (one of the test's own, no persistence) is SIGKILLed while runs are in flight and
started again, empty, on the same port. The workers find the namespace's marker gone: each
says so in one error line, answers 503 on ``/readyz``, prints no traceback for the runs it
held, and claims nothing, until ``lockgate store init`` marks the namespace again; then they
go on. Every wait is for a state, bounded by a deadline a loaded machine meets; the one window
that checks nothing is claimed is a span the claim loops (polling every 0.05 s) would fill many
times over.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from lockgate import EventKind, RunStatus
from lockgate.stores import ValkeyStore
from test_worker_cli_processes import DEADLINE, Worker, get, status, submit
from valkey_server import ValkeyServer

LOST = "lost its data"


@pytest.fixture
def server() -> Iterator[ValkeyServer]:
    started = ValkeyServer().start()  # no AOF, no RDB: a restart comes back empty
    yield started
    started.close()


@pytest.fixture
def workers() -> Iterator[list[Worker]]:
    started: list[Worker] = []
    yield started
    for worker in started:
        if worker.process.poll() is None:
            worker.process.kill()
        worker.process.wait(timeout=DEADLINE)


def stays(what: str, check: Callable[[], bool], seconds: float) -> None:
    """``check`` holds throughout ``seconds`` (asked every 50 ms)."""
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        assert check(), f"no longer true: {what}"
        time.sleep(0.05)


def in_first_step(store: ValkeyStore, run_id: str) -> bool:
    return any(e.kind == EventKind.STEP_PENDING for e in store.load_run("cli_naps", run_id))


def test_a_valkey_restarted_empty_is_told_once_and_stops_claiming_until_marked_again(
    tmp_path: Path, server: ValkeyServer, workers: list[Worker]
) -> None:
    namespace = f"lost{uuid.uuid4().hex[:8]}"
    url = f"valkey://127.0.0.1:{server.port}/0?namespace={namespace}"
    for _ in range(2):
        workers.append(Worker(tmp_path, url, "--health-port", "0"))
    ports = [worker.health_port() for worker in workers]
    for worker, port in zip(workers, ports, strict=True):
        worker.until("/readyz answers 200", lambda port=port: get(port, "/readyz")[0] == 200)

    store = ValkeyStore(server.url, namespace=namespace, retry_attempts=10)
    try:
        done = submit(store, 0.0, 0.0)
        workers[0].until("a run completes", lambda: status(store, done) == RunStatus.COMPLETE)
        policy = store.get_workflow_policy("cli_naps")
        assert policy is not None
        in_flight = [submit(store, 1.0, 0.0) for _ in range(6)]
        workers[0].until(
            "every run is in its first step",
            lambda: all(in_first_step(store, run_id) for run_id in in_flight),
        )

        server.stop(kill=True)  # SIGKILL: nothing written down, nothing to come back from
        server.start()

        for worker, port in zip(workers, ports, strict=True):
            worker.line(LOST)
            worker.until("/readyz answers 503", lambda port=port: get(port, "/readyz")[0] == 503)
        _, body = get(ports[0], "/readyz")
        assert body["status"] == "store_lost", body
        assert LOST in body["error"], body
        assert store.get_run("cli_naps", done) is None  # gone with the data
        # A run queued into the emptied namespace is not claimed while the marker is gone.
        probe = f"probe-{uuid.uuid4().hex[:8]}"
        store.submit_run(
            "cli_naps",
            probe,
            {"first": 0.0, "second": 0.0},
            version=policy["version"],
            version_behavior="pinned",
        )
        stays(
            "the probe run waits unclaimed",
            lambda: status(store, probe) == RunStatus.PENDING,
            3.0,
        )

        marked = subprocess.run(
            [sys.executable, "-m", "lockgate", "store", "init", "--store", url],
            capture_output=True,
            text=True,
            timeout=DEADLINE,
            cwd=tmp_path,
        )
        assert marked.returncode == 0, marked.stderr
        assert "marked ValkeyStore(" in marked.stdout, marked.stdout

        for worker, port in zip(workers, ports, strict=True):
            worker.line("carries its marker again")
            worker.until("/readyz answers 200", lambda port=port: get(port, "/readyz")[0] == 200)
        workers[0].until("the probe completes", lambda: status(store, probe) == RunStatus.COMPLETE)
        workers[0].until(
            "the workers recorded their workflow again",
            lambda: store.get_workflow_policy("cli_naps") == policy,
        )
        after = submit(store, 0.0, 0.0)  # by name, from the recorded policy
        workers[0].until("a new run completes", lambda: status(store, after) == RunStatus.COMPLETE)
    finally:
        store.close()
    for worker in workers:
        assert worker.stop() == 0, worker.text()
        text = worker.text()
        assert "Traceback" not in text, text
        assert "RunNotFoundError" not in text, text
        assert len(re.findall(LOST, text)) == 1, text  # told once, not once per run or read
        # Nothing but the one error line about the loss: no per-run warnings or errors.
        complaints = [
            line
            for line in text.splitlines()
            if re.search(r"\b(ERROR|WARNING|error:|warning:)", line) and "unreachable" not in line
        ]
        assert len(complaints) == 1, complaints
