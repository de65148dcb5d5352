"""A chain of ``continue_as_new`` hops against plain one-step runs, on one store.

One worker (in this process) serves both workflows; each does one step, and a hop then
continues as new. A chain is sequential, so the baseline is sequential too: one-step runs
submitted one after another, each waited for before the next. Printed, from one run:

- the raw baseline: one SQLite commit (``--store sqlite``) or one ``EVALSHA`` (``valkey``);
- per one-step run and per hop of a ``--hops`` chain, and their ratio;
- the reads (and time) ``resolve_continuation`` takes from a chain's root at hop 1 and at the
  last hop: the tail record keeps them the same however long the chain.

Not a test; record the output in docs/performance.md with the command:

    .venv/bin/python bench/chains.py                    # SQLite, a file in a temporary folder
    .venv/bin/python bench/chains.py --store valkey     # a valkey-server started here
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sqlite3
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from lockgate import (
    SQLiteStore,
    Store,
    ValkeyStore,
    WorkflowClient,
    WorkflowContext,
    resolve_continuation,
    step,
    workflow,
)
from lockgate.worker import WorkerOptions, WorkflowWorker


@step(name="bench_chain_touch")
async def touch(n: int) -> int:
    return n + 1


@workflow(name="bench_chain_plain")
async def plain(ctx: WorkflowContext, n: int) -> int:
    return await touch(n)


@workflow(name="bench_chain_hop")
async def hop(ctx: WorkflowContext, hops: int, at: int = 0) -> int:
    reached = await touch(at)
    if reached > hops:
        return at
    await ctx.continue_as_new({"hops": hops, "at": reached})


class Counted:
    """A view of a store that counts the reads a resolve makes."""

    READS = ("get_last_event", "get_chain_tail", "load_run")

    def __init__(self, store: Store) -> None:
        self.store = store
        self.reads = 0

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.store, name)
        if name not in self.READS:
            return method

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.reads += 1
            return method(*args, **kwargs)

        return counted


def raw_sqlite_commit(folder: Path, count: int) -> float:
    """Seconds per commit of one small row, WAL, synchronous=normal: the floor of a write."""
    db = sqlite3.connect(folder / "raw.db", isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT)")
    started = time.perf_counter()
    for n in range(count):
        db.execute("BEGIN IMMEDIATE")
        db.execute("INSERT INTO t (v) VALUES (?)", (str(n),))
        db.execute("COMMIT")
    elapsed = time.perf_counter() - started
    db.close()
    return elapsed / count


def raw_evalsha(url: str, count: int) -> float:
    """Seconds per ``EVALSHA`` of a one-key ``INCR`` script, one round trip each."""
    import redis

    client = redis.Redis.from_url(url)
    sha = client.script_load("return redis.call('INCR', KEYS[1])")
    started = time.perf_counter()
    for _ in range(count):
        client.evalsha(sha, 1, "bench:raw")
    elapsed = time.perf_counter() - started
    client.close()
    return elapsed / count


async def plain_runs(client: WorkflowClient, count: int) -> float:
    started = time.perf_counter()
    for n in range(count):
        handle = await client.submit("bench_chain_plain", {"n": n})
        assert await handle.result(timeout=60) == n + 1
    return (time.perf_counter() - started) / count


async def chain(client: WorkflowClient, hops: int) -> tuple[str, float]:
    started = time.perf_counter()
    handle = await client.submit("bench_chain_hop", {"hops": hops})
    assert await handle.result(timeout=3600) == hops
    return handle.run_id, (time.perf_counter() - started) / (hops + 1)


def resolve_cost(store: Store, root: str, repeat: int = 200) -> tuple[int, float]:
    """Reads one resolve from ``root`` makes, and its mean time."""
    counted = Counted(store)
    resolve_continuation(counted, "bench_chain_hop", root)
    reads = counted.reads
    started = time.perf_counter()
    for _ in range(repeat):
        resolve_continuation(store, "bench_chain_hop", root)
    return reads, (time.perf_counter() - started) / repeat


async def measure(store: Store, hops: int, runs: int) -> dict[str, Any]:
    options = WorkerOptions(
        max_concurrent_runs=8,
        claim_poll_interval=0.001,
        timer_poll_interval_s=0.5,
        orphan_scan_interval=30.0,
    )
    worker = WorkflowWorker(workflows=[plain, hop], store=store, options=options)
    serving = asyncio.create_task(worker.run())
    try:
        client = WorkflowClient(store, poll_interval=0.001)
        await asyncio.sleep(0.5)  # the worker has recorded its workflows
        per_run = await plain_runs(client, runs)
        short_root, _ = await chain(client, 1)
        print(f"chain of {hops} hops running...", file=sys.stderr, flush=True)
        long_root, per_hop = await chain(client, hops)
    finally:
        worker.stop()
        with contextlib.suppress(Exception):
            await serving
    return {
        "per_run": per_run,
        "per_hop": per_hop,
        "short": resolve_cost(store, short_root),
        "long": resolve_cost(store, long_root),
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", choices=("sqlite", "valkey"), default="sqlite")
    parser.add_argument("--hops", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=1_000, help="sequential one-step runs")
    args = parser.parse_args(argv)
    with contextlib.ExitStack() as stack:
        if args.store == "sqlite":
            folder = Path(stack.enter_context(tempfile.TemporaryDirectory()))
            raw = raw_sqlite_commit(folder, 2_000)
            raw_name = "raw SQLite commit"
            store: Store = SQLiteStore(folder / "chains.db", synchronous="normal")
        else:
            sys.path.insert(0, str(Path(__file__).resolve().parent))
            from _servers import valkey_url

            url = stack.enter_context(valkey_url())
            raw = raw_evalsha(url, 2_000)
            raw_name = "raw EVALSHA"
            store = ValkeyStore(url, namespace=f"chain{uuid.uuid4().hex[:8]}")
        figures = asyncio.run(measure(store, args.hops, args.runs))
        store.close()
    per_run, per_hop = figures["per_run"], figures["per_hop"]
    (short_reads, short_time), (long_reads, long_time) = figures["short"], figures["long"]
    print(f"store: {args.store}, chain of {args.hops} hops, {args.runs} sequential plain runs")
    print(f"{raw_name}:                   {raw * 1e6:8.1f} us")
    print(f"one-step run (sequential):        {per_run * 1e3:8.2f} ms  ({per_run / raw:.0f}x raw)")
    print(f"one hop (step + continue_as_new): {per_hop * 1e3:8.2f} ms  ({per_hop / raw:.0f}x raw)")
    print(f"ratio (hop / one-step run):       {per_hop / per_run:8.2f}")
    print(f"resolve from the root at hop 1:       {short_reads} reads, {short_time * 1e6:.0f} us")
    print(f"resolve from the root at hop {args.hops}: {long_reads} reads, {long_time * 1e6:.0f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
