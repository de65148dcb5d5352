"""A fan-out of 1,000 children against 1,000 independent submits, on one store.

One worker (in this process, 32 slots) serves a one-step child workflow and a parent that
fans it out. First, time 1,000 children submitted one by one by a client, from the first
submit until the last completes; then one parent that starts the same 1,000 through
``ctx.fan_out`` (``--most`` in flight), from its submit until it completes with every result.
Prints both wall times and their ratio. Not a test; record the output in
docs/performance.md with the command:

    .venv/bin/python bench/fanout.py               # SQLite, a file in a temporary folder
    .venv/bin/python bench/fanout.py --store valkey  # a valkey-server started here
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import tempfile
import time
import uuid
from pathlib import Path

from lockgate import SQLiteStore, Store, ValkeyStore, WorkflowClient, WorkflowContext, workflow
from lockgate.worker import WorkerOptions, WorkflowWorker


@workflow(name="bench_fan_child")
async def child(ctx: WorkflowContext, n: int) -> int:
    return n + 1


@workflow(name="bench_fan_parent")
async def parent(ctx: WorkflowContext, count: int, most: int) -> int:
    results = await ctx.fan_out(child, [{"n": n} for n in range(count)], max_in_flight=most)
    return sum(results)


async def independent(client: WorkflowClient, store: Store, count: int) -> float:
    started = time.perf_counter()
    ids = [(await client.submit("bench_fan_child", {"n": n})).run_id for n in range(count)]
    waiting = 0
    while waiting < len(ids):
        info = store.get_run("bench_fan_child", ids[waiting])
        if info is not None and info.status.is_terminal:
            waiting += 1
            continue
        await asyncio.sleep(0.01)
    return time.perf_counter() - started


async def fanned(client: WorkflowClient, count: int, most: int) -> float:
    started = time.perf_counter()
    handle = await client.submit("bench_fan_parent", {"count": count, "most": most})
    total = await handle.result(timeout=3600)
    assert total == sum(n + 1 for n in range(count)), total
    return time.perf_counter() - started


async def measure(store: Store, count: int, most: int) -> tuple[float, float]:
    options = WorkerOptions(
        max_concurrent_runs=32,
        claim_poll_interval=0.002,
        timer_poll_interval_s=0.5,
        orphan_scan_interval=30.0,
    )
    worker = WorkflowWorker(workflows=[child, parent], store=store, options=options)
    serving = asyncio.create_task(worker.run())
    try:
        client = WorkflowClient(store, poll_interval=0.01)
        await asyncio.sleep(0.5)  # the worker has recorded its workflows
        alone = await independent(client, store, count)
        together = await fanned(client, count, most)
    finally:
        worker.stop()
        with contextlib.suppress(Exception):
            await serving
    return alone, together


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", choices=("sqlite", "valkey"), default="sqlite")
    parser.add_argument("--children", type=int, default=1000)
    parser.add_argument("--most", type=int, default=100, help="max_in_flight of the fan-out")
    args = parser.parse_args(argv)
    with contextlib.ExitStack() as stack:
        if args.store == "sqlite":
            folder = Path(stack.enter_context(tempfile.TemporaryDirectory()))
            store: Store = SQLiteStore(folder / "fanout.db", synchronous="normal")
        else:
            sys.path.insert(0, str(Path(__file__).resolve().parent))
            from _servers import valkey_url

            url = stack.enter_context(valkey_url())
            store = ValkeyStore(url, namespace=f"fan{uuid.uuid4().hex[:8]}")
        alone, together = asyncio.run(measure(store, args.children, args.most))
        store.close()
    print(f"store: {args.store}, children: {args.children}, fan-out max_in_flight: {args.most}")
    print(f"{args.children} independent submits: {alone:.2f} s")
    print(f"one fan-out of {args.children}:     {together:.2f} s")
    print(f"ratio (fan-out / independent): {together / alone:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
