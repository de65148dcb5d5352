"""How long the ``lockgate`` command takes to start, against the bare interpreter.

Times ``lockgate --version``, ``lockgate --help``, ``lockgate runs list`` on an SQLite file
and ``lockgate runs list`` on a Valkey server (each store holding RUNS runs of one workflow),
and ``python -c pass`` with the same interpreter, each run ROUNDS times. The commands take
turns within each round, so a machine whose load changes during the run slows them all alike.
The commands run with their bytecode cached, as an installed package has it (the first,
unmeasured run of each writes it).
Prints each one's median wall time and CPU time (user and system: what the command itself
costs, which the other processes on a shared machine move less) and their ratios to the bare
interpreter's. Not a test; record
the output in docs/performance.md with the command:

    .venv/bin/python bench/cli_start.py

Set ``LOCKGATE_BENCH_VALKEY_URL`` to measure against an existing server instead of one started
here.
"""

from __future__ import annotations

import asyncio
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _servers import valkey_url
from lockgate import SQLiteStore, ValkeyStore, WorkflowClient, WorkflowContext, workflow
from lockgate.stores import Store

ROUNDS = 20
RUNS = 50
NAME = "bench_cli_start"
#: The console script installed beside this interpreter, as a user runs it.
LOCKGATE = str(Path(sys.executable).with_name("lockgate"))


@workflow(name=NAME)
async def bench_cli_start(ctx: WorkflowContext, n: int) -> int:
    return n


async def _submit(store: Store) -> None:
    client = WorkflowClient(store)
    for n in range(RUNS):
        await client.submit(NAME, {"n": n})


def _seconds(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """The wall time of ``argv``, and the CPU time (user and system) it used."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    # With bytecode written (the warm-up run writes it), as an installed package has it: with
    # PYTHONDONTWRITEBYTECODE set, every start would compile each module it imports again.
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("LOCKGATE_") and k != "PYTHONDONTWRITEBYTECODE"
    }
    with tempfile.TemporaryDirectory() as folder, valkey_url() as server:
        sqlite_url = f"sqlite:///{folder}/runs.db"
        sqlite = SQLiteStore(f"{folder}/runs.db", create=True)
        valkey = ValkeyStore(server, namespace="bench-cli-start")
        for store in (sqlite, valkey):
            asyncio.run(_submit(store))
            store.close()
        commands = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "lockgate --version": [LOCKGATE, "--version"],
            "lockgate --help": [LOCKGATE, "--help"],
            "lockgate runs list (SQLite)": [LOCKGATE, "runs", "list", NAME, "--store", sqlite_url],
            "lockgate runs list (Valkey)": [
                LOCKGATE,
                "runs",
                "list",
                NAME,
                "--store",
                f"{server}?namespace=bench-cli-start",
            ],
        }
        times: dict[str, list[tuple[float, float]]] = {label: [] for label in commands}
        for argv in commands.values():  # one unmeasured run each: caches, bytecode
            _seconds(argv, env)
        for _ in range(ROUNDS):
            for label, argv in commands.items():
                times[label].append(_seconds(argv, env))
    bare = [statistics.median(t[i] for t in times["python -c pass"]) for i in (0, 1)]
    print(f"median of {ROUNDS} runs each, taking turns; {RUNS} runs in each store; load average")
    print(f"{os.getloadavg()[0]:.1f} at the end, on {os.cpu_count()} CPUs")
    print(f"{'':30} {'wall':>9}  {'ratio':>5}  {'CPU':>9}  {'ratio':>5}")
    for label, measured in times.items():
        wall, cpu = (statistics.median(t[i] for t in measured) for i in (0, 1))
        print(
            f"{label:30} {wall * 1000:6.1f} ms  {wall / bare[0]:4.1f}x"
            f"  {cpu * 1000:6.1f} ms  {cpu / bare[1]:4.1f}x"
        )


if __name__ == "__main__":
    main()
