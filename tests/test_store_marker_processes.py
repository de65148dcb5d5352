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
from lockgate.stores import Store, ValkeyStore, open_store
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


def in_first_step(store: Store, run_id: str) -> bool:
    return any(e.kind == EventKind.STEP_PENDING for e in store.load_run("cli_naps", run_id))


def serving(workers: list[Worker], cwd: Path, url: str, *options: str) -> list[int]:
    """Two ``lockgate worker`` processes on ``url``, once both are ready: their health ports."""
    for _ in range(2):
        workers.append(Worker(cwd, url, "--health-port", "0", *options))
    ports = [worker.health_port() for worker in workers]
    for worker, port in zip(workers, ports, strict=True):
        worker.until("/readyz answers 200", lambda port=port: get(port, "/readyz")[0] == 200)
    return ports


def lose_the_data(server: ValkeyServer, workers: list[Worker], ports: list[int]) -> str:
    """SIGKILL the server, start it again empty on its port, and wait until every worker said
    so and is not ready; the advice the first one gave."""
    server.stop(kill=True)  # nothing written down, nothing to come back from
    server.start()
    lines = [worker.line(f"{LOST}.*") for worker in workers]
    for worker, port in zip(workers, ports, strict=True):
        worker.until("/readyz answers 503", lambda port=port: get(port, "/readyz")[0] == 503)
    _, body = get(ports[0], "/readyz")
    assert body["status"] == "store_lost", body
    assert LOST in body["error"], body
    return lines[0].group(0)


def lockgate(cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lockgate", *argv],
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        cwd=cwd,
    )


def going_on(workers: list[Worker], ports: list[int]) -> None:
    for worker, port in zip(workers, ports, strict=True):
        worker.line("carries its marker again")
        worker.until("/readyz answers 200", lambda port=port: get(port, "/readyz")[0] == 200)


def told_once_and_quietly(workers: list[Worker]) -> None:
    for worker in workers:
        assert worker.stop() == 0, worker.text()
        text = worker.text()
        assert "Traceback" not in text, text
        assert "RunNotFoundError" not in text, text
        assert len(re.findall(LOST, text)) == 1, text  # told once, not once per run or read
        # Nothing but the one error line about the loss: no per-run warnings or errors.
        assert len(complaints(text)) == 1, complaints(text)


#: A line of librdkafka's own that the Kafka client relays through the ``lockgate.kafka``
#: logger: ``FACILITY [client#producer-N] message`` (a broker slow to give out an idempotence
#: PID on a loaded machine, a request timing out). Not lockgate's to answer for.
RELAYED = re.compile(r" lockgate\.kafka: \S+ \[[^\]]*#(?:producer|consumer)-\d+\] ")


def complaints(text: str) -> list[str]:
    """The warning and error lines of lockgate's own in a worker's output: not librdkafka's
    relayed ones, nor the store state's "is unreachable" (the restart is an outage too)."""
    return [
        line
        for line in text.splitlines()
        if re.search(r"\b(ERROR|WARNING|error:|warning:)", line)
        and "unreachable" not in line
        and not RELAYED.search(line)
    ]


def test_the_complaints_counted_are_lockgates_own_lines() -> None:
    text = "\n".join(
        [
            "2026-12-02 07:10:00,001 INFO lockgate.worker: worker w1 started",
            "2026-12-02 07:10:01,002 WARNING lockgate.kafka: GETPID [rdkafka#producer-1] "
            "Failed to acquire idempotence PID from broker 127.0.0.1:9092/1: Broker: "
            "Coordinator load in progress: retrying",
            "2026-12-02 07:10:01,502 ERROR lockgate.kafka: REQTMOUT [rdkafka#consumer-2] "
            "127.0.0.1:9092/1: Timed out 1 in-flight request(s)",
            "2026-12-02 07:10:02,003 WARNING lockgate.worker.status: the store is unreachable",
            f"2026-12-02 07:10:03,004 ERROR lockgate.worker: the namespace {LOST}: run ...",
            "2026-12-02 07:10:04,005 WARNING lockgate.kafka: the journal topic 'j' deletes "
            "records after retention.ms=1000: a run that lives longer loses its journal",
            "2026-12-02 07:10:05,006 WARNING lockgate.worker: run r1 failed its step",
        ]
    )
    found = complaints(text)
    assert [line.split(" ", 3)[3] for line in found] == [
        f"lockgate.worker: the namespace {LOST}: run ...",
        "lockgate.kafka: the journal topic 'j' deletes records after retention.ms=1000: a run "
        "that lives longer loses its journal",
        "lockgate.worker: run r1 failed its step",
    ]


def test_a_valkey_restarted_empty_is_told_once_and_stops_claiming_until_marked_again(
    tmp_path: Path, server: ValkeyServer, workers: list[Worker]
) -> None:
    namespace = f"lost{uuid.uuid4().hex[:8]}"
    url = f"valkey://127.0.0.1:{server.port}/0?namespace={namespace}"
    ports = serving(workers, tmp_path, url)

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

        advice = lose_the_data(server, workers, ports)
        assert "`lockgate store init`" in advice, advice
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

        marked = lockgate(tmp_path, "store", "init", "--store", url)
        assert marked.returncode == 0, marked.stderr
        assert "marked ValkeyStore(" in marked.stdout, marked.stdout

        going_on(workers, ports)
        workers[0].until("the probe completes", lambda: status(store, probe) == RunStatus.COMPLETE)
        workers[0].until(
            "the workers recorded their workflow again",
            lambda: store.get_workflow_policy("cli_naps") == policy,
        )
        after = submit(store, 0.0, 0.0)  # by name, from the recorded policy
        workers[0].until("a new run completes", lambda: status(store, after) == RunStatus.COMPLETE)
    finally:
        store.close()
    told_once_and_quietly(workers)


def test_with_a_kafka_journal_store_rebuild_brings_the_runs_and_the_workers_back(
    tmp_path: Path, server: ValkeyServer, workers: list[Worker], kafka_bootstrap: str
) -> None:
    namespace = f"lost{uuid.uuid4().hex[:8]}"
    url = f"valkey://127.0.0.1:{server.port}/0?namespace={namespace}"
    journal = f"kafka://{kafka_bootstrap}?topic_prefix=lgm{uuid.uuid4().hex[:10]}"
    ports = serving(workers, tmp_path, url, "--journal", journal)
    store = open_store(url, journal=journal, retry_attempts=10)
    try:
        done = submit(store, 0.0, 0.0)
        workers[0].until("a run completes", lambda: status(store, done) == RunStatus.COMPLETE)
        in_flight = [submit(store, 1.0, 0.0) for _ in range(6)]
        workers[0].until(
            "every run is in its first step",
            lambda: all(in_first_step(store, run_id) for run_id in in_flight),
        )

        advice = lose_the_data(server, workers, ports)
        assert "`lockgate store rebuild`" in advice, advice
        assert store.get_run("cli_naps", done) is None

        rebuilt = lockgate(tmp_path, "store", "rebuild", "--store", url, "--journal", journal)
        assert rebuilt.returncode == 0, rebuilt.stderr
        assert "restored 7 runs" in rebuilt.stdout, rebuilt.stdout

        going_on(workers, ports)
        assert status(store, done) == RunStatus.COMPLETE  # back from the journal
        for run_id in in_flight:
            workers[0].until(
                f"run {run_id} completes", lambda r=run_id: status(store, r) == RunStatus.COMPLETE
            )
        workers[0].until(
            "the workers recorded their workflow again",
            lambda: store.get_workflow_policy("cli_naps") is not None,
        )
        after = submit(store, 0.0, 0.0)
        workers[0].until("a new run completes", lambda: status(store, after) == RunStatus.COMPLETE)
    finally:
        store.close()
    told_once_and_quietly(workers)


def test_a_worker_started_on_an_emptied_store_whose_journal_holds_records_does_not_mark_it(
    tmp_path: Path, server: ValkeyServer, workers: list[Worker], kafka_bootstrap: str
) -> None:
    """Every worker gone and Valkey lost: a worker starting then finds no marker, as on a new
    store, but the journal topic holds records. It must not mark the store (that would serve
    the empty namespace as new and leave the journaled runs behind): it says so once, is not
    ready and claims nothing until a rebuild restores the runs and the marker."""
    namespace = f"lost{uuid.uuid4().hex[:8]}"
    url = f"valkey://127.0.0.1:{server.port}/0?namespace={namespace}"
    journal = f"kafka://{kafka_bootstrap}?topic_prefix=lgm{uuid.uuid4().hex[:10]}"
    first = Worker(tmp_path, url, "--journal", journal)
    workers.append(first)
    store = open_store(url, journal=journal, retry_attempts=10)
    try:
        done = submit(store, 0.0, 0.0)
        first.until("a run completes", lambda: status(store, done) == RunStatus.COMPLETE)
        assert first.stop() == 0, first.text()
        server.stop(kill=True)
        server.start()  # empty: no marker, no runs; the journal topic keeps its records
        assert store.read_marker() is None

        late = Worker(tmp_path, url, "--journal", journal, "--health-port", "0")
        workers.append(late)
        port = late.health_port()
        line = late.line(f"{LOST}.*").group(0)
        assert "journal holds" in line, line
        assert "`lockgate store rebuild`" in line, line
        late.until("/readyz answers 503", lambda: get(port, "/readyz")[0] == 503)
        queued = submit(store, 0.0, 0.0)
        stays(
            "the store stays unmarked and the new run unclaimed",
            lambda: store.read_marker() is None and status(store, queued) == RunStatus.PENDING,
            2.0,
        )

        rebuilt = lockgate(tmp_path, "store", "rebuild", "--store", url, "--journal", journal)
        assert rebuilt.returncode == 0, rebuilt.stderr
        going_on([late], [port])
        assert status(store, done) == RunStatus.COMPLETE  # back from the journal
        late.until("the queued run completes", lambda: status(store, queued) == RunStatus.COMPLETE)
    finally:
        store.close()
    told_once_and_quietly([late])
