"""The workflow the SQLite benchmark runs, and the worker process that serves it.

Run as a script: ``python bench/_one_step.py STORE SYNCHRONOUS [buffered]`` serves it until
SIGTERM; ``STORE`` is an SQLite path or a ``valkey://`` URL (``SYNCHRONOUS`` is then ignored);
``buffered`` turns step-boundary durability off, so a run's step events reach the store with
its terminal in one write. ``LOCKGATE_BENCH_CONCURRENCY`` sets the worker's slots (32).
"""

from __future__ import annotations

import asyncio
import os
import sys

from lockgate import SQLiteStore, Store, WorkflowContext, open_store, step, workflow
from lockgate.worker import WorkerOptions, WorkflowWorker


@step(name="bench_touch")
async def touch(n: int) -> int:
    return n + 1


@workflow(name="bench_one_step")
async def one_step(ctx: WorkflowContext, n: int) -> int:
    return await touch(n)


async def serve(path: str, synchronous: str, buffered: bool) -> None:
    store: Store = (
        open_store(path)
        if path.startswith(("valkey://", "redis://"))
        else SQLiteStore(path, synchronous=synchronous)  # type: ignore[arg-type]
    )
    options = WorkerOptions(
        max_concurrent_runs=int(os.environ.get("LOCKGATE_BENCH_CONCURRENCY", "32")),
        claim_poll_interval=0.002,
        timer_poll_interval_s=1.0,
        orphan_scan_interval=30.0,
        step_boundary_durability=not buffered,
    )
    worker = WorkflowWorker(workflows=[one_step], store=store, options=options)
    await worker.run()


if __name__ == "__main__":
    asyncio.run(serve(sys.argv[1], sys.argv[2], sys.argv[3:] == ["buffered"]))
