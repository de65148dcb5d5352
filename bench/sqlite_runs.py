"""One-step runs per second on SQLiteStore, against raw SQLite commits on the same disk.

For ``synchronous`` full and normal, with one and two worker processes (and one worker with
step-boundary durability off, "buffered": a run's step events go with its terminal in one
commit, the fewest commits a run can take): submit RUNS one-step
runs and time them from the first submit until the last completes. In the same run, on the same
disk and with the same ``synchronous``, time a loop of raw ``BEGIN IMMEDIATE; INSERT; COMMIT``
transactions. Prints both and their ratio. Not a test; record the output in
docs/performance.md with the command:

    .venv/bin/python bench/sqlite_runs.py
"""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from lockgate import SQLiteStore, WorkflowClient

RUNS = 600
RAW_SECONDS = 2.0
HERE = Path(__file__).resolve().parent


def raw_commits_per_second(folder: Path, synchronous: str) -> float:
    path = folder / f"raw-{synchronous}.db"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(f"PRAGMA synchronous = {synchronous.upper()}")
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, payload TEXT)")
    count, started = 0, time.perf_counter()
    while time.perf_counter() - started < RAW_SECONDS:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO t (payload) VALUES (?)", ("x" * 100,))
        conn.execute("COMMIT")
        count += 1
    elapsed = time.perf_counter() - started
    conn.close()
    return count / elapsed


async def submit_all(store: SQLiteStore) -> None:
    client = WorkflowClient(store)
    for n in range(RUNS):
        await client.submit("bench_one_step", {"n": n})


def completed(store: SQLiteStore) -> int:
    counts: dict[str, int] = store.info()["workflows"].get("bench_one_step", {})
    return counts.get("complete", 0)


def runs_per_second(folder: Path, synchronous: str, workers: int, buffered: bool = False) -> float:
    path = folder / f"runs-{synchronous}-{workers}-{buffered}.db"
    store = SQLiteStore(path, synchronous=synchronous)  # type: ignore[arg-type]
    env = {**os.environ, "PYTHONPATH": f"{HERE}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    command = [sys.executable, str(HERE / "_one_step.py"), str(path), synchronous]
    command += ["buffered"] if buffered else []
    procs = [subprocess.Popen(command, env=env) for _ in range(workers)]
    try:
        while store.get_workflow_policy("bench_one_step") is None:  # the workers are up
            time.sleep(0.05)
        time.sleep(0.3)
        started = time.perf_counter()
        asyncio.run(submit_all(store))
        while (done := completed(store)) < RUNS:
            if time.perf_counter() - started > 300:
                raise RuntimeError(f"only {done} of {RUNS} runs completed in 300 s")
            time.sleep(0.02)
        elapsed = time.perf_counter() - started
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            proc.wait(timeout=60)
        store.close()
    return RUNS / elapsed


def main() -> None:
    with tempfile.TemporaryDirectory(dir=HERE.parent) as tmp:
        folder = Path(tmp)
        print(
            f"{RUNS} one-step runs per configuration, submit to complete; "
            f"raw commits for {RAW_SECONDS:g} s; files in {folder.parent}"
        )
        print(
            f"{'synchronous':<16}{'wkrs':>4}{'runs/s':>10}{'raw commits/s':>15}"
            f"{'runs : commits':>16}{'cost in commits/run':>21}"
        )
        for synchronous in ("full", "normal"):
            raw = raw_commits_per_second(folder, synchronous)
            for workers, buffered in ((1, False), (2, False), (1, True)):
                rate = runs_per_second(folder, synchronous, workers, buffered)
                label = synchronous + (" buffered" if buffered else "")
                print(
                    f"{label:<16}{workers:>4}{rate:>10,.0f}{raw:>15,.0f}"
                    f"{rate / raw:>16.3f}{raw / rate:>21.1f}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
