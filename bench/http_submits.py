"""Submits per second over HTTP against ``client.submit`` on the same SQLite store.

Starts ``lockgate serve _one_step:one_step`` on an SQLite file in a temporary folder (loopback,
a bearer token, as deployed) and, in this process, times SUBMITS ``client.submit`` calls from 64
concurrent tasks on an SQLiteStore of the same file, SUBMITS ``POST /bench_one_step/runs``
over 64 concurrent connections (an aiohttp session), and SUBMITS ``client.submit`` calls of a
client with ``group_submits=True``, as the server's own client is: the ratio to the plain
client is the issue's figure, the ratio to the grouped one what the HTTP layer itself costs.
No worker runs, so all only queue.

The paths write to one file that grows as they run, so each is timed in ROUNDS rounds, in
the order direct, HTTP, grouped, grouped, HTTP, direct, ...: each path's rounds sit as early as
the others' on average, and none is timed on a bigger file alone. Prints submits/s, p50/p99
latency and errors of each path over its rounds, and the ratios. Not a test; record the
output in docs/performance.md with the command:

    .venv/bin/python bench/http_submits.py
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
import httpx

from lockgate import SQLiteStore, WorkflowClient

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"
CONNECTIONS = 64
SUBMITS = int(os.environ.get("LOCKGATE_BENCH_SUBMITS", "4000"))
ROUNDS = 4
TOKEN = "bench-token"
SERVE = [sys.executable, "-m", "lockgate", "serve", "_one_step:one_step", "--store"]
LINE = re.compile(rb"serving the HTTP API on (http://127\.0\.0\.1:\d+)")


def start_server(folder: Path, db: Path) -> tuple[subprocess.Popen[bytes], str]:
    (folder / "tokens").write_text(f"read,write {TOKEN}\n")
    log = folder / "serve.log"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), str(HERE)])}
    proc = subprocess.Popen(
        [*SERVE, f"sqlite:///{db}", "--port", "0", "--tokens", str(folder / "tokens")],
        stderr=log.open("wb"),
        stdout=subprocess.DEVNULL,
        env=env,
        cwd=HERE,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = LINE.search(log.read_bytes())
        if found:
            url = found.group(1).decode()
            while httpx.get(f"{url}/readyz").status_code != 200:
                time.sleep(0.05)
            return proc, url
        if proc.poll() is not None:
            raise SystemExit(f"lockgate serve exited: {log.read_text()}")
        time.sleep(0.05)
    raise SystemExit("lockgate serve did not start")


class Tally:
    """One path's rounds: their seconds, latencies and errors."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.latencies: list[float] = []
        self.errors = 0


async def drive(one: Callable[[int], Awaitable[None]], calls: range, tally: Tally) -> None:
    """Run ``calls`` calls of ``one`` from CONNECTIONS tasks, adding to ``tally``."""
    latencies = tally.latencies
    counter = iter(calls)

    async def lane() -> None:
        for n in counter:
            started = time.perf_counter()
            try:
                await one(n)
            except Exception as exc:
                tally.errors += 1
                if tally.errors == 1:
                    print(f"first error: {type(exc).__name__}: {exc}", file=sys.stderr)
            latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    await asyncio.gather(*(lane() for _ in range(CONNECTIONS)))
    tally.seconds += time.perf_counter() - started


def report(what: str, tally: Tally) -> float:
    latencies, errors = sorted(tally.latencies), tally.errors
    rate = len(latencies) / tally.seconds
    p50 = latencies[len(latencies) // 2] * 1000
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000
    print(
        f"{what:<28} {rate:8.0f} submits/s  p50 {p50:7.1f} ms  p99 {p99:7.1f} ms  errors {errors}"
    )
    return rate


async def main() -> None:
    per_round = SUBMITS // ROUNDS
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        db = folder / "bench.db"
        proc, url = start_server(folder, db)
        try:
            sys.path.insert(0, str(HERE))
            import _one_step  # noqa: F401  (declares bench_one_step here, as the server has)

            store = SQLiteStore(db)
            client = WorkflowClient(store)
            grouping = WorkflowClient(store, group_submits=True)

            async def direct(n: int) -> None:
                await client.submit("bench_one_step", {"n": n})

            async def grouped(n: int) -> None:
                await grouping.submit("bench_one_step", {"n": n})

            # aiohttp drives the load: httpx's client tops out near 350 requests/s on this
            # machine against an app that only answers 200, aiohttp's near 8,000, so with it
            # the figure is the server's, not the load generator's.
            connector = aiohttp.TCPConnector(limit=CONNECTIONS)
            headers = {"Authorization": f"Bearer {TOKEN}"}
            timeout = aiohttp.ClientTimeout(total=60)
            async with aiohttp.ClientSession(
                url, connector=connector, headers=headers, timeout=timeout
            ) as http:

                async def over_http(n: int) -> None:
                    async with http.post("/bench_one_step/runs", json={"n": n}) as answer:
                        body = await answer.read()
                        if answer.status != 201:
                            raise RuntimeError(f"{answer.status}: {body[:200]!r}")

                paths = {
                    "direct": (direct, Tally()),
                    "http": (over_http, Tally()),
                    "grouped": (grouped, Tally()),
                }
                order = ["direct", "http", "grouped", "grouped", "http", "direct"]
                for n in range(ROUNDS * 3):
                    which = order[n % len(order)]  # each path as early as the others on average
                    one, tally = paths[which]
                    calls = range(n * per_round, (n + 1) * per_round)
                    await drive(one, calls, tally)
                    print(f"  round {n + 1}/{ROUNDS * 3}: {which}", file=sys.stderr)
            store.close()
            direct_rate = report("client.submit (in process)", paths["direct"][1])
            http_rate = report("POST /{name}/runs (HTTP)", paths["http"][1])
            grouped_rate = report("client.submit, grouped", paths["grouped"][1])
            print(f"ratio HTTP / client.submit: {http_rate / direct_rate:.2f} (target >= 0.5)")
            print(
                f"ratio HTTP / grouped client.submit: {http_rate / grouped_rate:.2f} "
                "(the HTTP layer's own cost, the server grouping as the client does)"
            )
            print(
                f"{per_round * ROUNDS} submits each in {ROUNDS} rounds, {CONNECTIONS} concurrent, "
                "SQLite, loopback"
            )
        finally:
            proc.terminate()
            proc.wait(60)


if __name__ == "__main__":
    asyncio.run(main())
