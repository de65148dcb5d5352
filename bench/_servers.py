"""What the Valkey benchmarks share: the server they measure against, and the completion rate
of runs a worker process serves, counted in the store."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from lockgate import Store, ValkeyStore
from lockgate.worker import WorkerOptions, WorkflowWorker

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from valkey_server import ValkeyServer

VALKEY_ENV = "LOCKGATE_BENCH_VALKEY_URL"


@contextmanager
def valkey_url() -> Iterator[str]:
    """``LOCKGATE_BENCH_VALKEY_URL`` when set (an existing server), else the URL of a
    valkey-server started here on loopback and stopped at the end."""
    given = os.environ.get(VALKEY_ENV)
    if given:
        yield given
        return
    server = ValkeyServer().start()
    try:
        yield server.url
    finally:
        server.close()


def ended_runs(store: ValkeyStore) -> int:
    """Runs that ended in ``store``'s namespace: a ZCARD of each shard's index of ended runs."""
    return sum(
        int(store._cmd("ZCARD", store._key("ended", shard=shard)))
        for shard in range(store.shard_count)
    )


def serve_until_ended(
    store: Store, watcher: ValkeyStore, count: int, options: WorkerOptions, workflows: list[Any]
) -> None:
    """Serve ``workflows`` with an in-process worker on ``store`` until ``watcher`` (a store of
    its own on the same namespace) counts ``count`` ended runs, then stop it."""
    worker = WorkflowWorker(workflows=workflows, store=store, options=options)

    async def serve() -> None:
        task = asyncio.create_task(worker.run())
        while ended_runs(watcher) < count:  # noqa: ASYNC110 - polling another store
            await asyncio.sleep(0.01)
        worker.stop()
        await task

    asyncio.run(serve())


def completion_rate(
    store: ValkeyStore,
    runs: int,
    workers: Sequence[subprocess.Popen[bytes]],
    timeout: float = 300.0,
) -> float:
    """Runs per second ending in ``store`` while ``workers`` serve them, from the first run's
    end to the ``runs``-th (so the workers' start is no part of it)."""
    deadline = time.perf_counter() + timeout
    while ended_runs(store) == 0:
        gone = [w.poll() for w in workers if w.poll() is not None]
        if time.perf_counter() > deadline or gone:
            raise RuntimeError(f"no run ended (worker exit codes {gone})")
        time.sleep(0.001)
    started, first = time.perf_counter(), ended_runs(store)
    while (done := ended_runs(store)) < runs:
        if time.perf_counter() > deadline:
            raise RuntimeError(f"only {done} of {runs} runs ended in {timeout:g} s")
        time.sleep(0.01)
    return (runs - first) / (time.perf_counter() - started)
