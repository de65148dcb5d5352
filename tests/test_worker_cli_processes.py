"""``lockgate worker`` as a real process: started before its Valkey server, stopped with one
Ctrl-C and with two, and its health endpoint on a port the system picks.

Each test runs ``python -m lockgate worker`` on a small workflows module written into the
test's directory, reads what it prints on stderr, and asks its health endpoint. Every wait is
for a state (a line printed, an endpoint's answer, a run's status), bounded by a deadline
generous enough for a loaded machine.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from lockgate import EventKind, RunStatus, WorkflowClient
from lockgate.stores import SQLiteStore, Store, ValkeyStore
from valkey_server import ValkeyServer, free_port

T = TypeVar("T")

#: Seconds any one state may take to come about, on a machine whose cores are all busy.
DEADLINE = 60.0

WORKFLOWS = textwrap.dedent(
    """
    import asyncio

    from lockgate import step, workflow

    @step
    async def nap(label: str, seconds: float) -> str:
        await asyncio.sleep(seconds)
        return label

    @workflow(name="cli_naps")
    async def naps(ctx, first: float, second: float) -> list:
        return [await nap("first", first), await nap("second", second)]
    """
)


class Worker:
    """One ``lockgate worker`` process, its stderr going to a file."""

    def __init__(self, cwd: Path, store: str, *options: str) -> None:
        self.log = cwd / f"worker-{uuid.uuid4().hex[:6]}.log"
        (cwd / "cli_naps_module.py").write_text(WORKFLOWS)
        env = {k: v for k, v in os.environ.items() if not k.startswith("LOCKGATE_")}
        with self.log.open("wb") as sink:
            command = ["worker", "cli_naps_module", "--store", store, "--poll-interval", "0.05"]
            self.process = subprocess.Popen(
                [sys.executable, "-m", "lockgate", *command, *options],
                cwd=cwd,
                env=env,
                stdout=sink,
                stderr=subprocess.STDOUT,
            )

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def until(self, what: str, check: Callable[[], T | None], timeout: float = DEADLINE) -> T:
        deadline = time.monotonic() + timeout
        while True:
            found = check()
            if found:
                return found
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting until {what}; log:\n{self.text()}")
            time.sleep(0.05)

    def line(self, pattern: str) -> re.Match[str]:
        """The first line printed matching ``pattern``, once there is one."""
        compiled = re.compile(pattern)

        def printed() -> re.Match[str] | None:
            assert self.process.poll() is None or compiled.search(self.text()), self.text()
            return compiled.search(self.text())

        return self.until(f"the worker prints {pattern!r}", printed)

    def health_port(self) -> int:
        return int(self.line(r"health (?:endpoint )?on http://127\.0\.0\.1:(\d+)").group(1))

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                return self.process.wait(timeout=DEADLINE)
            except subprocess.TimeoutExpired:
                self.process.kill()
        return self.process.wait()


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[list[Worker]]:
    started: list[Worker] = []
    yield started
    for worker in started:
        if worker.process.poll() is None:
            worker.process.kill()
        worker.process.wait(timeout=DEADLINE)


def get(port: int, path: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as refused:
        return refused.code, json.loads(refused.read())


def submit(store: Store, first: float, second: float) -> str:
    """Submit by name, as the worker recorded the workflow (it must be serving)."""
    params = {"first": first, "second": second}
    return asyncio.run(WorkflowClient(store).submit("cli_naps", params)).run_id


def status(store: Store, run_id: str) -> RunStatus:
    info = store.get_run("cli_naps", run_id)
    assert info is not None
    return info.status


# -- a store that is not there yet ---------------------------------------------------------------


def test_a_worker_started_before_its_valkey_server_waits_then_serves(
    tmp_path: Path, workers: list[Worker]
) -> None:
    port = free_port()  # nothing listens there yet
    url = f"valkey://127.0.0.1:{port}/0?namespace=early"
    worker = Worker(tmp_path, url, "--health-port", "0")
    workers.append(worker)
    health = worker.health_port()
    worker.line(r"warning: store valkey://127\.0\.0\.1:\d+/0\?namespace=early is unreachable")
    assert get(health, "/livez")[0] == 200
    code, body = get(health, "/readyz")
    assert (code, body["status"]) == (503, "starting"), body
    assert "cannot reach Valkey" in body["error"]
    server = ValkeyServer(port=port)
    try:
        time.sleep(1.0)  # the worker keeps waiting meanwhile; it must still be there after
        assert worker.process.poll() is None, worker.text()
        server.start()
        worker.until("/readyz answers 200", lambda: get(health, "/readyz")[0] == 200)
        store = ValkeyStore(server.url, namespace="early")
        try:
            run_id = submit(store, 0.0, 0.0)
            worker.until("the run completes", lambda: status(store, run_id) == RunStatus.COMPLETE)
        finally:
            store.close()
        assert worker.stop() == 0, worker.text()
    finally:
        server.close()
    text = worker.text()
    assert "Traceback" not in text, text
    assert len(re.findall("unreachable", text)) == 1, text  # told once, not once a try
    assert re.search(r"answers again, after \d+\.\ds", text), text
    assert (
        f"serving cli_naps on ValkeyStore('redis://127.0.0.1:{port}/0', namespace='early'), "
        f"up to 50 runs at once, health on http://127.0.0.1:{health}; stop with Ctrl-C or SIGTERM"
    ) in text


def test_a_worker_stopped_while_it_waits_for_its_store_exits_0(
    tmp_path: Path, workers: list[Worker]
) -> None:
    worker = Worker(tmp_path, f"valkey://127.0.0.1:{free_port()}/0")
    workers.append(worker)
    worker.line("is unreachable")
    worker.process.send_signal(signal.SIGINT)
    assert worker.process.wait(timeout=DEADLINE) == 0, worker.text()
    assert "Traceback" not in worker.text()


# -- Ctrl-C --------------------------------------------------------------------------------------


@pytest.fixture
def sqlite_url(tmp_path: Path) -> Iterator[tuple[str, SQLiteStore]]:
    db = tmp_path / "naps.db"
    store = SQLiteStore(db)  # creates the file the worker opens
    yield f"sqlite:///{db}", store
    store.close()


def started_serving(worker: Worker) -> None:
    worker.line(r"worker \S+ serving cli_naps on SQLiteStore\(")


def test_one_ctrl_c_drains_the_running_runs(
    tmp_path: Path, workers: list[Worker], sqlite_url: tuple[str, SQLiteStore]
) -> None:
    url, store = sqlite_url
    worker = Worker(tmp_path, url)
    workers.append(worker)
    started_serving(worker)
    run_id = submit(store, 1.5, 30.0)
    worker.until(
        "the first step runs",
        lambda: any(e.kind == EventKind.STEP_PENDING for e in store.load_run("cli_naps", run_id)),
    )
    worker.process.send_signal(signal.SIGINT)
    worker.line(r"SIGINT received; draining: finishing 1 run, for up to 30s \(Ctrl-C again")
    assert worker.process.wait(timeout=DEADLINE) == 0, worker.text()
    # The step under way finished and was journaled; the run went back at the next boundary.
    events = store.load_run("cli_naps", run_id)
    assert [e.payload.get("result") for e in events if e.kind == EventKind.STEP_DONE] == ["first"]
    info = store.get_run("cli_naps", run_id)
    assert info is not None
    assert (info.status, info.lock_holder) == (RunStatus.PENDING, None)
    assert "stopping now" not in worker.text()


def test_a_second_ctrl_c_stops_at_once_and_hands_the_runs_back(
    tmp_path: Path, workers: list[Worker], sqlite_url: tuple[str, SQLiteStore]
) -> None:
    url, store = sqlite_url
    worker = Worker(tmp_path, url, "--shutdown-grace", "120")
    workers.append(worker)
    started_serving(worker)
    runs = [submit(store, 600.0, 0.0) for _ in range(2)]
    worker.until(
        "both runs are in their first step",
        lambda: all(
            any(e.kind == EventKind.STEP_PENDING for e in store.load_run("cli_naps", run_id))
            for run_id in runs
        ),
    )
    worker.process.send_signal(signal.SIGINT)
    worker.line("draining: finishing 2 runs")
    worker.process.send_signal(signal.SIGINT)
    # A ten-minute step and two minutes of grace: only the second Ctrl-C ends it this soon.
    assert worker.process.wait(timeout=DEADLINE) == 0, worker.text()
    worker.line("SIGINT again; stopping now: handing back 2 runs unfinished")
    worker.line(r"worker stopped \(\S+\); 2 runs cancelled and handed back")
    for run_id in runs:
        info = store.get_run("cli_naps", run_id)
        assert info is not None
        assert (info.status, info.lock_holder) == (RunStatus.PENDING, None)


# -- the health endpoint ---------------------------------------------------------------------------


def test_health_port_0_prints_the_port_it_took(
    tmp_path: Path, workers: list[Worker], sqlite_url: tuple[str, SQLiteStore]
) -> None:
    url, _ = sqlite_url
    worker = Worker(tmp_path, url, "--health-port", "0")
    workers.append(worker)
    started_serving(worker)
    port = worker.health_port()
    code, body = get(port, "/livez")
    assert (code, body["status"]) == (200, "ok")
    assert f"worker {body['worker_id']} serving cli_naps" in worker.text()
    worker.until("/readyz answers 200", lambda: get(port, "/readyz")[0] == 200)
    assert worker.stop() == 0, worker.text()
