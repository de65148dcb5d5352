"""The console's runs list over a store holding 100,000 runs: server time per page.

Fills an SQLite file (and, unless ``--sqlite-only``, a Valkey namespace) with RUNS queued runs
of one workflow (group commits on SQLite, concurrent client submits on Valkey), then asks the
console (``create_app``, in this process, no network: the time measured is the app's, from
the request's arrival to its last byte) for pages of ``/console/runs``:

- the first page, and the page 20 pages in (following each page's cursor);
- a status filter no run matches (the worst case: the page reads its whole budget of store
  pages, then answers with a cursor to go on);
- a gate-key filter matching one run in ten (it opens each candidate's ``run:init``);
- an owner filter the store answers from its index.

Each figure is the median and the worst of REPEAT requests, beside the raw baseline: one
``store.list_runs`` page of 100 runs on the same store, and the ratio. Not a test; record the
output in docs/performance.md with the command:

    .venv/bin/python bench/console_runs.py
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from starlette.types import ASGIApp, Receive, Scope, Send

from _servers import valkey_url
from lockgate import (
    Limit,
    SQLiteStore,
    Store,
    ValkeyStore,
    WorkflowClient,
    WorkflowContext,
    workflow,
)
from lockgate.http import create_app
from lockgate.stores._batch import new_run

RUNS = 100_000
REPEAT = 15
NAME = "bench_console"
OWNERS = 10
TENANTS = 10


@workflow(name=NAME, concurrency=Limit("tenant", 5))
async def bench_console(ctx: WorkflowContext, tenant: str, n: int) -> int:
    return n


class Timed:
    """ASGI middleware keeping the seconds each request took in the app."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.last = 0.0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = time.perf_counter()
        await self.app(scope, receive, send)
        self.last = time.perf_counter() - started


def fields(n: int) -> dict[str, Any]:
    tenant = f"t{n % TENANTS}"
    return {
        "params": {"tenant": tenant, "n": n},
        "owner": f"owner{n % OWNERS}",
        "concurrency_key": tenant,
        "concurrency_max": 5,
    }


def fill_sqlite(store: SQLiteStore) -> None:
    group = 1000
    for start in range(0, RUNS, group):
        runs = []
        for n in range(start, start + group):
            f = fields(n)
            runs.append(new_run(NAME, uuid.uuid4().hex, f.pop("params"), **f))
        answers = store.create_runs(runs)
        assert all(isinstance(a, str) for a in answers), answers[:3]
        progress(start + group)


def fill_valkey(store: ValkeyStore) -> None:
    async def fill() -> None:
        sem = asyncio.Semaphore(128)
        done = 0

        client = WorkflowClient(store)

        async def one(n: int) -> None:
            nonlocal done
            f = fields(n)  # the client stamps the Limit's key from the params
            async with sem:
                await client.submit(NAME, f["params"], owner=f["owner"])
            done += 1
            if done % 1000 == 0:
                progress(done)

        await asyncio.gather(*(one(n) for n in range(RUNS)))

    asyncio.run(fill())


def progress(done: int) -> None:
    if done % 10_000 == 0:
        print(f"  {done:,} runs stored", file=sys.stderr)


async def measure(store: Store, label: str) -> None:
    timed = Timed(create_app(store, workflows=[bench_console]))
    transport = httpx.ASGITransport(app=timed)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:

        async def page(url: str) -> tuple[float, httpx.Response]:
            answer = await http.get(url)
            assert answer.status_code == 200, answer.text[:300]
            return timed.last, answer

        async def deep() -> str:
            url = f"/console/runs?workflow={NAME}"
            for _ in range(19):
                _, answer = await page(url)
                url = next_url(answer.text)
            return url

        def raw() -> None:
            store.list_runs(NAME, limit=100)

        baseline = [timed_call(raw) for _ in range(REPEAT)]
        deep_url = await deep()
        cases: list[tuple[str, str]] = [
            ("first page", f"/console/runs?workflow={NAME}"),
            ("20 pages in (by cursor)", deep_url),
            ("status filter, no match", f"/console/runs?workflow={NAME}&status=complete"),
            ("gate filter, 1 in 10", f"/console/runs?workflow={NAME}&gate=t3"),
            ("owner filter, 1 in 10", f"/console/runs?workflow={NAME}&owner=owner7"),
        ]
        base = statistics.median(baseline)
        print(f"{label}: {RUNS:,} runs; raw list_runs page of 100: {base * 1000:.2f} ms")
        for what, url in cases:
            seconds = [(await page(url))[0] for _ in range(REPEAT)]
            mid = statistics.median(seconds)
            print(
                f"  {what:<26} median {mid * 1000:7.1f} ms  worst {max(seconds) * 1000:7.1f} ms"
                f"  ({mid / base:5.1f}x the raw page)"
            )


def next_url(html: str) -> str:
    found = re.search(r'href="([^"]+)" data-testid="next-page"', html)
    assert found is not None, "the page has no next page"
    return found.group(1).replace("&amp;", "&")


def timed_call(call: Callable[[], Any]) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sqlite-only", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = SQLiteStore(Path(tmp) / "console.db")
        started = time.perf_counter()
        fill_sqlite(store)
        print(f"  filled SQLite in {time.perf_counter() - started:.0f} s", file=sys.stderr)
        asyncio.run(measure(store, "SQLite"))
        store.close()
    if args.sqlite_only:
        return
    with valkey_url() as url:
        store = ValkeyStore(url, namespace=f"bc{uuid.uuid4().hex[:8]}")
        started = time.perf_counter()
        fill_valkey(store)
        print(f"  filled Valkey in {time.perf_counter() - started:.0f} s", file=sys.stderr)
        asyncio.run(measure(store, "Valkey"))
        store.close()


if __name__ == "__main__":
    main()
