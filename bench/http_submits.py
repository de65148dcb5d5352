"""Submits per second over HTTP against ``client.submit`` on the same SQLite store.

Starts ``lockgate serve _one_step:one_step`` on an SQLite file in a temporary folder (loopback,
a bearer token, as deployed) and, in this process: SUBMITS ``client.submit`` calls from 64
concurrent tasks on an SQLiteStore of the same file, then SUBMITS ``POST /bench_one_step/runs``
over 64 concurrent connections (an aiohttp session). No worker runs, so both only queue. Prints
submits/s, p50/p99 latency and errors of each, and the ratio HTTP / direct. Not a test; record
the output in docs/performance.md with the command:

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


async def drive(one: Callable[[int], Awaitable[None]]) -> tuple[float, list[float], int]:
    """Run SUBMITS calls of ``one`` from CONNECTIONS tasks: (seconds, latencies, errors)."""
    latencies: list[float] = []
    errors = 0
    counter = iter(range(SUBMITS))

    async def lane() -> None:
        nonlocal errors
        for n in counter:
            started = time.perf_counter()
            try:
                await one(n)
            except Exception as exc:
                errors += 1
                if errors == 1:
                    print(f"first error: {type(exc).__name__}: {exc}", file=sys.stderr)
            latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    await asyncio.gather(*(lane() for _ in range(CONNECTIONS)))
    return time.perf_counter() - started, sorted(latencies), errors


def report(what: str, seconds: float, latencies: list[float], errors: int) -> float:
    rate = SUBMITS / seconds
    p50 = latencies[len(latencies) // 2] * 1000
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000
    print(
        f"{what:<28} {rate:8.0f} submits/s  p50 {p50:7.1f} ms  p99 {p99:7.1f} ms  errors {errors}"
    )
    return rate


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        db = folder / "bench.db"
        proc, url = start_server(folder, db)
        try:
            sys.path.insert(0, str(HERE))
            import _one_step  # noqa: F401  (declares bench_one_step here, as the server has)

            store = SQLiteStore(db)
            client = WorkflowClient(store)

            async def direct(n: int) -> None:
                await client.submit("bench_one_step", {"n": n})

            direct_rate = report("client.submit (in process)", *await drive(direct))
            store.close()

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

                http_rate = report("POST /{name}/runs (HTTP)", *await drive(over_http))
            print(f"ratio HTTP / client.submit: {http_rate / direct_rate:.2f} (target >= 0.5)")
            print(f"{SUBMITS} submits each, {CONNECTIONS} concurrent, SQLite, loopback")
        finally:
            proc.terminate()
            proc.wait(60)


if __name__ == "__main__":
    asyncio.run(main())
