"""Kafka-bound workflows: records into completed one-step runs per second through a binding,
against the same runs submitted with ``client.submit`` on the same store, and against raw
consume of the topic.

Starts a valkey-server on loopback (``LOCKGATE_BENCH_VALKEY_URL`` for an existing one) and uses
the broker of ``_broker.py``. The store is the streaming deployment's: ``open_store(valkey,
journal="kafka://...")`` with SHARDS shards. Each figure comes from one ``lockgate worker``
process with SLOTS slots (``LOCKGATE_BENCH_CONCURRENCY``, 128: the sizing docs/kafka.md gives a
worker on Kafka journals), on a fresh namespace and journal topic:

- through a binding: RUNS JSON records (``{"n": ...}``) produced beforehand to a topic of
  PARTITIONS partitions, served by ``lockgate worker _bound:bound`` (``max_concurrency`` =
  SLOTS), timed from the first run's end to the last's, so the group join is no part of it;
- submitted: RUNS runs of the same body submitted with ``client.submit`` from this process,
  SUBMITTERS at a time (the binding keeps twice ``max_concurrency`` runs ahead), while the
  worker (``_bound:submitted``) runs them, timed the same way. Both figures thus include each
  run's submit, and both worker processes run the same attempts.

The submitted figure is measured just before and just after each bound one and the ratio taken
against their mean, REPEATS times (``LOCKGATE_BENCH_REPEATS``, 3); the median is the figure.
Raw consume (a confluent-kafka Consumer assigned every partition, reading every record, timed
from its assignment, first fetch included: RUNS records are one fetch or two) is measured once
beside them, and so are RUNS runs queued with ``client.submit`` before the worker starts
(``queued``): what the worker does with no submit beside its runs.

Not a test; record the output in docs/performance.md with the command:

    .venv/bin/python bench/kafka_bound.py
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from lockgate import CompositeStore, ValkeyStore, WorkflowClient, open_store

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE))

from _bracket import bracketed  # noqa: E402
from _broker import kafka_bootstrap  # noqa: E402
from _servers import completion_rate, valkey_url  # noqa: E402

RUNS = int(os.environ.get("LOCKGATE_BENCH_RUNS", "3000"))
REPEATS = int(os.environ.get("LOCKGATE_BENCH_REPEATS", "3"))
SLOTS = os.environ.get("LOCKGATE_BENCH_CONCURRENCY", "128")
SHARDS = 4
PARTITIONS = 8
#: Submits in flight at once while the worker runs: as many as the binding keeps ahead.
SUBMITTERS = 2 * int(SLOTS)


def make_topic(bootstrap: str) -> str:
    """A fresh topic of PARTITIONS partitions holding RUNS records."""
    topic = f"bench-bound-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(timeout=30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for n in range(RUNS):
        while True:
            try:
                producer.produce(
                    topic, value=json.dumps({"n": n}).encode(), partition=n % PARTITIONS
                )
                break
            except BufferError:
                producer.poll(0.01)
    assert producer.flush(60) == 0
    return topic


def raw_consume_per_second(bootstrap: str, topic: str) -> float:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex, "enable.auto.commit": False}
    )
    started, seen = time.perf_counter(), 0
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    while seen < RUNS:
        for message in consumer.consume(min(1000, RUNS - seen), timeout=5):
            if message.error() is None:
                seen += 1
    took = time.perf_counter() - started
    consumer.close()
    return RUNS / took


def runs_per_second(url: str, bootstrap: str, served: str, topic: str) -> float:
    """RUNS runs completed by one ``lockgate worker _bound:{served}`` process on a fresh
    namespace and journal, timed from the first run's end to the last's."""
    target = f"{url}?namespace=bench{uuid.uuid4().hex[:8]}&shard_count={SHARDS}"
    journal = f"kafka://{bootstrap}?topic_prefix=bench{uuid.uuid4().hex[:8]}"
    store = open_store(target, journal=journal)
    assert isinstance(store, CompositeStore)
    lifecycle = store.lifecycle
    assert isinstance(lifecycle, ValkeyStore)
    env = {**os.environ, "LOCKGATE_BENCH_TOPIC": topic, "LOCKGATE_BENCH_CONCURRENCY": SLOTS}
    module = "submitted" if served == "queued" else served
    command = [sys.executable, "-m", "lockgate", "worker", f"_bound:{module}"]
    command += ["--store", target, "--journal", journal, "--concurrency", SLOTS]
    proc = subprocess.Popen(command, cwd=HERE, env=env)
    feeding = None
    if served == "queued":
        asyncio.run(submit_all(store))
    if served == "submitted":
        # Fed while the worker runs, as a binding feeds it: SUBMITTERS submits at a time.
        feeding = threading.Thread(target=asyncio.run, args=(submit_all(store),), daemon=True)
        feeding.start()
    try:
        return completion_rate(lifecycle, RUNS, [proc])
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        if feeding is not None:
            feeding.join(timeout=60)
        store.close()


async def submit_all(store: CompositeStore) -> None:
    """RUNS runs of ``bench_submitted``, SUBMITTERS submits in flight at a time."""
    client = WorkflowClient(store)
    queue = iter(range(RUNS))

    async def submitter() -> None:
        for n in queue:
            await client.submit("bench_submitted", {"n": n})

    await asyncio.gather(*(submitter() for _ in range(SUBMITTERS)))


def main() -> None:
    with valkey_url() as url, kafka_bootstrap() as bootstrap:
        rates: list[float] = []

        def bound() -> float:
            # A fresh topic each time: a binding's group commits what it consumed.
            rate = runs_per_second(url, bootstrap, "bound", make_topic(bootstrap))
            rates.append(rate)
            return rate

        def submitted() -> float:
            return runs_per_second(url, bootstrap, "submitted", "unused")

        def report(rate: float, before: float, after: float) -> None:
            baseline = (before + after) / 2
            print(
                f"{RUNS:,} one-step runs, 1 worker process with {SLOTS} slots: "
                f"{rate:,.1f} runs/s from a bound topic of {PARTITIONS} partitions; "
                f"client.submit {before:,.1f} before and {after:,.1f} after, mean "
                f"{baseline:,.1f} runs/s; ratio {rate / baseline:.4f}",
                flush=True,
            )

        ratio = bracketed(bound, submitted, REPEATS, report)
        print(f"bound topic against client.submit: median ratio {ratio:.4f} of {REPEATS}")
        best = max(rates)
        queued = runs_per_second(url, bootstrap, "queued", "unused")
        print(
            f"runs queued with client.submit before the worker starts: {queued:,.1f} "
            f"runs/s; the binding's best run {best:,.1f} runs/s is {best / queued:.4f} of it"
        )
        raw = raw_consume_per_second(bootstrap, make_topic(bootstrap))
        print(
            f"raw consume of the topic: {raw:,.0f} records/s; the binding's best run is "
            f"{best / raw:.4f} of it"
        )


if __name__ == "__main__":
    main()
