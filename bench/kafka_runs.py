"""One-step runs per second on the Valkey + Kafka composite, against ValkeyStore alone.

Starts a valkey-server on loopback (as ``valkey_runs.py`` does; ``LOCKGATE_BENCH_VALKEY_URL``
for an existing one) and uses the Kafka broker of ``_broker.py``
(``LOCKGATE_TEST_KAFKA_BOOTSTRAP``, else one started here). Then, from one run, with the same
worker process (``_one_step.py``, with ``max_concurrent_runs`` 128 unless
``LOCKGATE_BENCH_CONCURRENCY`` says otherwise), the same Valkey server and the same workflow:

- ValkeyStore alone: RUNS one-step runs queued before the worker starts, timed from the first
  run's end to the last's, so neither the submits nor the start-up count;
- the composite (``open_store(url, journal="kafka://...")``: Valkey coordinates, the journals
  go to a fresh topic): the same.

128 slots is how docs/kafka.md ("Worker slots") sizes a worker on Kafka journals: each write
of a run waits in its slot for Kafka's acknowledgement. ValkeyStore alone serves about the same
with 32 slots or 128 (its worker's loop is busy at 32 already; see docs/performance.md), so
both get 128 here.

The ValkeyStore figure is measured just before and just after each composite one, and the
ratio is taken against their mean, REPEATS times (``LOCKGATE_BENCH_REPEATS``, 3; RUNS is
``LOCKGATE_BENCH_RUNS``, 2000); the median ratio is the figure.

Not a test; record the output in docs/performance.md with the command:

    .venv/bin/python bench/kafka_runs.py
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from pathlib import Path

from lockgate import CompositeStore, Store, ValkeyStore, WorkflowClient, open_store

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE))

from _bracket import bracketed  # noqa: E402
from _broker import kafka_bootstrap  # noqa: E402
from _servers import completion_rate, valkey_url  # noqa: E402

RUNS = int(os.environ.get("LOCKGATE_BENCH_RUNS", "2000"))
REPEATS = int(os.environ.get("LOCKGATE_BENCH_REPEATS", "3"))
JOURNAL_ENV = "LOCKGATE_JOURNAL_URL"
SLOTS_ENV = "LOCKGATE_BENCH_CONCURRENCY"
SLOTS = "128"


async def submit_all(store: Store, count: int) -> None:
    client = WorkflowClient(store)
    for n in range(count):
        await client.submit("bench_one_step", {"n": n})


def runs_per_second(url: str, journal: str | None) -> float:
    """RUNS runs queued on ``url`` (journals in Kafka at ``journal`` when given) before one
    worker process starts, timed from the first run's end to the last's."""
    target = f"{url}?namespace=bench{uuid.uuid4().hex[:8]}"
    store = open_store(target, journal=journal)
    lifecycle = store.lifecycle if isinstance(store, CompositeStore) else store
    assert isinstance(lifecycle, ValkeyStore)
    asyncio.run(submit_all(store, RUNS))
    env = {**os.environ, "PYTHONPATH": f"{HERE}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    env.setdefault(SLOTS_ENV, SLOTS)
    env.pop(JOURNAL_ENV, None)
    if journal is not None:
        env[JOURNAL_ENV] = journal
    proc = subprocess.Popen([sys.executable, str(HERE / "_one_step.py"), target, "normal"], env=env)
    try:
        return completion_rate(lifecycle, RUNS, [proc])
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        store.close()


def main() -> None:
    slots = os.environ.get(SLOTS_ENV, SLOTS)
    with valkey_url() as url, kafka_bootstrap() as bootstrap:

        def composite() -> float:
            journal = f"kafka://{bootstrap}?topic_prefix=bench{uuid.uuid4().hex[:8]}"
            return runs_per_second(url, journal)

        def report(rate: float, alone: float, after: float) -> None:
            baseline = (alone + after) / 2
            print(
                f"one-step runs, 1 worker process with {slots} slots: {rate:,.1f} runs/s "
                f"on Valkey + Kafka; "
                f"ValkeyStore alone {alone:,.1f} before and {after:,.1f} after, mean "
                f"{baseline:,.1f} runs/s; ratio {rate / baseline:.4f}"
            )

        ratio = bracketed(composite, lambda: runs_per_second(url, None), REPEATS, report)
        print(f"Valkey + Kafka against Valkey alone: median ratio {ratio:.4f} of {REPEATS}")


if __name__ == "__main__":
    main()
