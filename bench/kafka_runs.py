"""One-step runs per second on the Valkey + Kafka composite, against ValkeyStore alone, and the
requests and acknowledged produces each run costs.

Starts a valkey-server on loopback (as ``valkey_runs.py`` does; ``LOCKGATE_BENCH_VALKEY_URL``
for an existing one) and uses the Kafka broker of ``_broker.py``
(``LOCKGATE_TEST_KAFKA_BOOTSTRAP``, else one started here). Then, from one run, for each slot
count (``max_concurrent_runs``; ``LOCKGATE_BENCH_CONCURRENCY``, a comma-separated list, by
default the worker's default, 50, and 128), with the same worker process (``_one_step.py``),
the same Valkey server and the same workflow:

- ValkeyStore alone: RUNS one-step runs queued before the worker starts, timed from the first
  run's end to the last's, so neither the submits nor the start-up count;
- the composite (``open_store(url, journal="kafka://...")``: Valkey coordinates, the journals
  go to a fresh topic): the same.

128 slots is how docs/kafka.md ("Worker slots") sizes a worker on Kafka journals: each write
of a run waits in its slot for Kafka's acknowledgement. 50 is what a worker gets when nobody
sizes it.

The ValkeyStore figure is measured just before and just after each composite one, and the
ratio is taken against their mean, REPEATS times (``LOCKGATE_BENCH_REPEATS``, 3; RUNS is
``LOCKGATE_BENCH_RUNS``, 2000); the median ratio is the figure.

Then, per store and slot count, what a run costs: COUNTED runs submitted by one client store
and served by an in-process worker on another (its slow loops far apart), every Valkey request
counted where the stores do their I/O (``_io``/``_aio``, as ``valkey_runs.py`` counts: a
script, a command or a pipeline is one) and every acknowledged Kafka append (one delivery
awaited, however many records it holds) and record produced, counted at the journal's
producer; worker side and whole run (the submit included), with each request named.

Not a test; record the output in docs/performance.md with the command:

    .venv/bin/python bench/kafka_runs.py
"""

from __future__ import annotations

import asyncio
import collections
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

from lockgate import (
    CompositeStore,
    KafkaEventLogStore,
    Store,
    ValkeyStore,
    WorkflowClient,
    open_store,
)
from lockgate.worker import WorkerOptions

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE))

from _bracket import bracketed  # noqa: E402
from _broker import kafka_bootstrap  # noqa: E402
from _one_step import one_step  # noqa: E402
from _servers import completion_rate, serve_until_ended, valkey_url  # noqa: E402

RUNS = int(os.environ.get("LOCKGATE_BENCH_RUNS", "2000"))
REPEATS = int(os.environ.get("LOCKGATE_BENCH_REPEATS", "3"))
COUNTED = 1000
JOURNAL_ENV = "LOCKGATE_JOURNAL_URL"
SLOTS_ENV = "LOCKGATE_BENCH_CONCURRENCY"
SLOTS = f"{WorkerOptions().max_concurrent_runs},128"


async def submit_all(store: Store, count: int) -> None:
    client = WorkflowClient(store)
    for n in range(count):
        await client.submit("bench_one_step", {"n": n})


def runs_per_second(url: str, journal: str | None, slots: int) -> float:
    """RUNS runs queued on ``url`` (journals in Kafka at ``journal`` when given) before one
    worker process with ``slots`` slots starts, timed from the first run's end to the last's."""
    target = f"{url}?namespace=bench{uuid.uuid4().hex[:8]}"
    store = open_store(target, journal=journal)
    lifecycle = store.lifecycle if isinstance(store, CompositeStore) else store
    assert isinstance(lifecycle, ValkeyStore)
    asyncio.run(submit_all(store, RUNS))
    env = {**os.environ, "PYTHONPATH": f"{HERE}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    env[SLOTS_ENV] = str(slots)
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


class Tally:
    """What one store does, counted by kind: Valkey requests (by script or command),
    acknowledged Kafka appends and records produced."""

    def __init__(self) -> None:
        self.requests: collections.Counter[str] = collections.Counter()
        self.acknowledged = 0
        self.records = 0
        self._producers: list[tuple[KafkaEventLogStore, Any]] = []

    def watch(self, store: Store) -> None:
        lifecycle = store.lifecycle if isinstance(store, CompositeStore) else store
        assert isinstance(lifecycle, ValkeyStore)
        blocking, native = lifecycle._io, lifecycle._aio
        requests = self.requests

        def counted(call: Any, what: str) -> Any:
            requests[what] += 1
            return blocking(call, what)

        async def counted_natively(call: Any, what: str) -> Any:
            requests[what] += 1
            return await native(call, what)

        lifecycle._io = counted  # type: ignore[method-assign]
        lifecycle._aio = counted_natively  # type: ignore[method-assign]
        if isinstance(store, CompositeStore):
            assert isinstance(store.events, KafkaEventLogStore)
            self._watch_log(store.events)

    def _watch_log(self, log: KafkaEventLogStore) -> None:
        acknowledged, producer = log._acknowledged, log._producer
        tally = self

        def counted_delivery(delivery: Any) -> list[int]:
            tally.acknowledged += 1  # once per append whose records were all reported
            return acknowledged(delivery)

        class CountingProducer:
            def __getattr__(self, name: str) -> Any:
                return getattr(producer, name)

            def produce(self, *args: Any, **kwargs: Any) -> None:
                tally.records += 1
                producer.produce(*args, **kwargs)

        log._acknowledged = counted_delivery  # type: ignore[method-assign]
        log._producer = CountingProducer()  # type: ignore[assignment]
        self._producers.append((log, producer))

    def unwatch(self) -> None:
        """Give each watched log its own producer back: closing a store lets its shared
        producer go by identity, which the counting wrapper would defeat."""
        for log, producer in self._producers:
            log._producer = producer
        self._producers.clear()

    def line(self, runs: int) -> str:
        total = sum(self.requests.values()) / runs
        named = ", ".join(
            f"{what} {count / runs:.2f}"
            for what, count in self.requests.most_common()
            if count / runs >= 0.05
        )
        kafka = (
            f"; Kafka: {self.acknowledged / runs:.2f} acknowledged appends, "
            f"{self.records / runs:.2f} records"
            if self.records
            else ""
        )
        return f"{total:.2f} Valkey requests ({named}){kafka}"


def costs_per_run(url: str, journal: str | None, slots: int) -> tuple[Tally, Tally]:
    """The submit's and the worker's tallies over COUNTED one-step runs: a client store
    submits them, then an in-process worker on a store of its own (slow loops far apart)
    serves them with ``slots`` slots until all ended."""
    target = f"{url}?namespace=bench{uuid.uuid4().hex[:8]}"
    submitter, served = open_store(target, journal=journal), open_store(target, journal=journal)
    submits, worker_side = Tally(), Tally()
    submits.watch(submitter)
    worker_side.watch(served)
    lifecycle = served.lifecycle if isinstance(served, CompositeStore) else served
    assert isinstance(lifecycle, ValkeyStore)
    watcher = ValkeyStore(url, namespace=lifecycle.namespace)
    asyncio.run(submit_all(submitter, COUNTED))
    options = WorkerOptions(
        max_concurrent_runs=slots,
        claim_poll_interval=0.002,
        timer_poll_interval_s=3600,
        orphan_scan_interval=3600,
    )
    serve_until_ended(served, watcher, COUNTED, options, [one_step])
    submits.unwatch()
    worker_side.unwatch()
    for store in (submitter, served, watcher):
        store.close()
    return submits, worker_side


def main() -> None:
    slot_counts = [int(n) for n in os.environ.get(SLOTS_ENV, SLOTS).split(",")]
    with valkey_url() as url, kafka_bootstrap() as bootstrap:

        def topic() -> str:
            return f"kafka://{bootstrap}?topic_prefix=bench{uuid.uuid4().hex[:8]}"

        for slots in slot_counts:

            def report(rate: float, alone: float, after: float, slots: int = slots) -> None:
                baseline = (alone + after) / 2
                print(
                    f"one-step runs, 1 worker process with {slots} slots: {rate:,.1f} runs/s "
                    f"on Valkey + Kafka; "
                    f"ValkeyStore alone {alone:,.1f} before and {after:,.1f} after, mean "
                    f"{baseline:,.1f} runs/s; ratio {rate / baseline:.4f}",
                    flush=True,
                )

            ratio = bracketed(
                lambda slots=slots: runs_per_second(url, topic(), slots),
                lambda slots=slots: runs_per_second(url, None, slots),
                REPEATS,
                report,
            )
            print(
                f"{slots} slots: Valkey + Kafka against Valkey alone: median ratio "
                f"{ratio:.4f} of {REPEATS}",
                flush=True,
            )
        for slots in sorted({1, *slot_counts}):
            for label, journal in (("ValkeyStore alone", None), ("Valkey + Kafka", topic())):
                submits, worker_side = costs_per_run(url, journal, slots)
                whole = Tally()
                whole.requests = submits.requests + worker_side.requests
                whole.acknowledged = submits.acknowledged + worker_side.acknowledged
                whole.records = submits.records + worker_side.records
                print(f"per one-step run, {label}, {slots} slot(s):")
                print(f"  worker side: {worker_side.line(COUNTED)}")
                print(f"  submit: {submits.line(COUNTED)}")
                print(f"  whole run: {whole.line(COUNTED)}", flush=True)


if __name__ == "__main__":
    main()
