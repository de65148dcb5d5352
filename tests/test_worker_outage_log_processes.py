"""An outage of the store told once as it begins and once as it ends, by a real ``lockgate
worker`` process on SQLite, however many of its calls fail in between.

The outage is real: another connection holds the file's write lock past the store's busy
timeout, as a stuck writer would. Reads still answer (WAL) while every write fails, which is
also what a file made read-only or a full disk does to a worker: its timer loop reads the due
waits, then fails to end each one. The worker's own metrics say how many calls failed.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from lockgate import RunStatus, WorkflowClient
from lockgate.stores import SQLiteStore

T = TypeVar("T")

#: Seconds any one state may take to come about, on a machine whose cores are all busy.
DEADLINE = 60.0
#: Store calls that must fail while the lock is held before it is let go: many retries.
FAILURES = 30
RUNS = 5

WORKFLOWS = textwrap.dedent(
    """
    from lockgate import workflow

    @workflow(name="outage_naps")
    async def naps(ctx, times: int) -> int:
        for _ in range(times):
            await ctx.sleep(0.05)
        return times
    """
)
STORE_ERRORS = re.compile(r"^lockgate_store_errors_total\{[^}]*\} ([0-9.e+]+)$", re.MULTILINE)


def until(what: str, check: Callable[[], T | None], log: Path) -> T:
    deadline = time.monotonic() + DEADLINE
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting until {what}; log:\n{log.read_text()}")
        time.sleep(0.05)


@pytest.fixture
def worker_log(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    (tmp_path / "outage_module.py").write_text(WORKFLOWS)
    log = tmp_path / "worker.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOCKGATE_")}
    store = "sqlite:///lockgate.db?busy_timeout_s=0.2"
    command = ["worker", "outage_module", "--store", store, "--poll-interval", "0.05"]
    options = ["--timer-interval", "0.05", "--health-port", "0", "--log-level", "info"]
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "lockgate", *command, *options],
            cwd=tmp_path,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    yield process, log
    if process.poll() is None:
        process.kill()
    process.wait(timeout=DEADLINE)


def store_errors(port: int) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return sum(float(found) for found in STORE_ERRORS.findall(text))


def test_a_store_that_refuses_every_write_for_a_while_is_one_outage_in_the_log(
    tmp_path: Path, worker_log: tuple[subprocess.Popen[bytes], Path]
) -> None:
    db = tmp_path / "lockgate.db"
    SQLiteStore(db).close()
    process, log = worker_log
    port = int(
        until(
            "the worker says where its health endpoint is",
            lambda: re.search(
                r"health (?:endpoint )?on http://127\.0\.0\.1:(\d+)", log.read_text()
            ),
            log,
        ).group(1)
    )
    until("the worker serves", lambda: "serving outage_naps" in log.read_text(), log)
    store = SQLiteStore(db)
    client = WorkflowClient(store)
    try:
        ids = [
            asyncio.run(client.submit("outage_naps", {"times": 400})).run_id for _ in range(RUNS)
        ]
        until(
            "every run sleeps",
            lambda: all(store.get_run("outage_naps", i).status == RunStatus.SLEEPING for i in ids),
            log,
        )
        holder = sqlite3.connect(db, isolation_level=None)
        try:
            holder.execute("BEGIN IMMEDIATE")  # the write lock, held as a stuck writer holds it
            before = store_errors(port)
            until(
                f"{FAILURES} store calls failed",
                lambda: store_errors(port) - before >= FAILURES,
                log,
            )
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        until("the outage's end is told", lambda: "answers again" in log.read_text(), log)
        # Writes get through again: the runs go on sleeping and waking.
        woken = {i: store.get_run("outage_naps", i).wait for i in ids}
        until(
            "every run woke again after the outage",
            lambda: all(store.get_run("outage_naps", i).wait != woken[i] for i in ids),
            log,
        )
    finally:
        store.close()
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=DEADLINE) == 0, log.read_text()
    text = log.read_text()
    began = [line for line in text.splitlines() if "is unreachable" in line]
    ended = [line for line in text.splitlines() if "answers again" in line]
    assert len(began) == 1, text
    assert "database is locked" in began[0]
    assert len(ended) == 1, text
    # The presence thread's refused writes are the same outage: not told again.
    assert "presence" not in text, text
    assert "Traceback" not in text
