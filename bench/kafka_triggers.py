"""Trigger topics: events consumed into fired runs per second against raw consume of the same
topic, and the fire delay after a window ends with 10,000 windows open.

Starts a valkey-server on loopback (``LOCKGATE_BENCH_VALKEY_URL`` for an existing one) and uses
the broker of ``_broker.py``. The store is the streaming deployment's: ``open_store(valkey,
journal="kafka://...")`` with SHARDS shards, so each fire is a Valkey script and a journal copy
acknowledged by Kafka. In one run:

- throughput: EVENTS events across KEYS keys (JSON objects of about 60 bytes, keyed, each on
  its key's partition) are produced beforehand to the trigger topic of a ``Collect(max_events=
  50)`` workflow with a window longer than the run, so every run fires full. Raw: a
  confluent-kafka Consumer with the trigger consumer's fetch settings assigned every partition,
  consuming until it has every record, timed from its first record. Through lockgate: a
  ``TriggerConsumer`` given every partition, timed from the step that read its first records
  until every event is in a fired run. Raw is measured just before and just after, the ratio
  taken against their mean, REPEATS times, and the median ratio is the figure. Then a floor:
  raw consume that also loads each value as JSON (what any consumer of these events does
  first), beside one more raw run.
- fire delay: a ``Debounce(window_seconds=WINDOW)`` workflow's consumer in its consumer group
  while KEYS_OPEN keys each get one event, RATE keys a second, so about RATE * WINDOW windows are
  open at once. A fire's delay is its run's ``submitted_at`` (Valkey's clock) less its window's
  end (the record's timestamp, from the producer's clock on the same machine, plus WINDOW): the
  delay includes reading the record. Median and p99 over the fires of the middle of the run,
  when the windows open are at their most.

Not a test; record the output in docs/performance.md with the command:

    .venv/bin/python bench/kafka_triggers.py
"""

from __future__ import annotations

import json
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from lockgate import Collect, CompositeStore, Debounce, WorkflowContext, open_store, workflow
from lockgate.stores._shards import shard_for
from lockgate.stores.kafka import KafkaEventLogStore
from lockgate.streams import TriggerConsumer
from lockgate.streams._topics import trigger_topic
from lockgate.streams.triggers._consumer import CONSUMER_FETCH
from lockgate.streams.triggers._produce import prepare_trigger_topics
from lockgate.workflow._spec import spec_of

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE))

from _bracket import bracketed  # noqa: E402
from _broker import kafka_bootstrap  # noqa: E402
from _servers import valkey_url  # noqa: E402

SHARDS = 4
EVENTS = 200_000
KEYS = 1_000
REPEATS = 3
WINDOW = 20.0
RATE = 500
KEYS_OPEN = 15_000


@workflow(name="bench_collect", trigger=Collect(key="k", max_events=50, window_seconds=3600))
async def bench_collect(ctx: WorkflowContext, key: str, events: list[Any], count: int) -> None:
    return None


@workflow(name="bench_debounce", trigger=Debounce(key="k", window_seconds=WINDOW))
async def bench_debounce(ctx: WorkflowContext, key: str, events: list[Any], count: int) -> None:
    return None


COLLECT = spec_of(bench_collect)
DEBOUNCE = spec_of(bench_debounce)


def composite(url: str, bootstrap: str, prefix: str) -> CompositeStore:
    """The streaming deployment's store on a fresh Valkey namespace, journals (and trigger
    topics) under ``prefix``."""
    store = open_store(
        f"{url}?namespace=bench{uuid.uuid4().hex[:8]}&shard_count={SHARDS}",
        journal=f"kafka://{bootstrap}?topic_prefix={prefix}",
    )
    assert isinstance(store, CompositeStore)
    return store


def journal_of(store: CompositeStore) -> KafkaEventLogStore:
    assert isinstance(store.events, KafkaEventLogStore)
    return store.events


def produce(bootstrap: str, topic: str, events: list[tuple[str, dict[str, Any]]]) -> None:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5}
    )
    for key, event in events:
        value = json.dumps(event, separators=(",", ":")).encode()
        while True:
            try:
                producer.produce(
                    topic, value=value, key=key.encode(), partition=shard_for(key, SHARDS)
                )
                break
            except BufferError:
                producer.poll(0.01)
    assert producer.flush(60) == 0


def raw_consume_per_second(bootstrap: str, topic: str, parse: bool = False) -> float:
    """A plain consumer reading every record (``parse``: and loading each value as JSON),
    timed from its first record to its last (the first fetch's set-up is no part of it)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"raw{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            **CONSUMER_FETCH,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(SHARDS)])
    started, seen = 0.0, 0
    while seen < EVENTS:
        for message in consumer.consume(min(2000, EVENTS - seen), timeout=5):
            if message.error() is None:
                if not seen:
                    started = time.perf_counter()
                value = message.value()
                if parse:
                    json.loads(value)
                seen += 1
    took = time.perf_counter() - started
    consumer.close()
    return (EVENTS - 1) / took


def fired_per_second(url: str, bootstrap: str, prefix: str) -> float:
    """A consumer reading the whole topic into fired runs, on a fresh namespace (no marks) in
    a fresh consumer group (no commits)."""
    store = composite(url, bootstrap, prefix)
    consumer = TriggerConsumer(store, journal_of(store), COLLECT, worker_id="bench")
    consumer.group = f"bench{uuid.uuid4().hex}"
    consumer.open(partitions=list(range(SHARDS)))
    while all(at == 0 for at in consumer.positions().values()):
        consumer.step()  # until the first records came: from then on, as the raw figure
    started = time.perf_counter()
    while consumer.fires < EVENTS // 50:
        consumer.step()
    took = time.perf_counter() - started
    consumer.close()
    store.close()
    return EVENTS / took


def throughput(url: str, bootstrap: str) -> float:
    prefix = f"bench{uuid.uuid4().hex[:8]}"
    store = composite(url, bootstrap, prefix)
    topic = trigger_topic(prefix, COLLECT)
    prepare_trigger_topics(journal_of(store), topic)
    store.close()
    keys = [f"key{n % KEYS}" for n in range(EVENTS)]
    produce(
        bootstrap, topic, [(k, {"k": k, "n": n, "kind": "comment"}) for n, k in enumerate(keys)]
    )

    def report(rate: float, raw: float, after: float) -> None:
        baseline = (raw + after) / 2
        print(
            f"events consumed into fired runs: {rate:,.0f}/s through a TriggerConsumer "
            f"(Collect max_events=50, {SHARDS} partitions, Valkey + Kafka); raw consume "
            f"{raw:,.0f} before and {after:,.0f} after, mean {baseline:,.0f}/s; ratio "
            f"{rate / baseline:.4f}",
            flush=True,
        )

    ratio = bracketed(
        lambda: fired_per_second(url, bootstrap, prefix),
        lambda: raw_consume_per_second(bootstrap, topic),
        REPEATS,
        report,
    )
    parsed = raw_consume_per_second(bootstrap, topic, parse=True)
    raw = raw_consume_per_second(bootstrap, topic)
    print(
        f"the floor, no lockgate: raw consume loading each value as JSON {parsed:,.0f}/s, raw "
        f"consume {raw:,.0f}/s just after; ratio {parsed / raw:.4f}",
        flush=True,
    )
    return ratio


def fire_delays(url: str, bootstrap: str) -> list[float]:
    """Seconds from each window's end to its run's submit, for the fires of the middle of the
    run (about RATE * WINDOW windows open)."""
    prefix = f"bench{uuid.uuid4().hex[:8]}"
    store = composite(url, bootstrap, prefix)
    journal = journal_of(store)
    topic = trigger_topic(prefix, DEBOUNCE)
    prepare_trigger_topics(journal, topic)
    consumer = TriggerConsumer(store, journal, DEBOUNCE, worker_id="bench")
    stop = threading.Event()
    serving = threading.Thread(target=consumer.serve, args=(stop,))
    serving.start()
    assert consumer.assigned.wait(60), "the consumer was given no partitions"
    producer = Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 1}
    )
    began = time.time()
    for n in range(KEYS_OPEN):
        due = began + n / RATE
        if due > time.time():
            time.sleep(due - time.time())
        key = f"open{n}"
        value = json.dumps({"k": key, "sent_at": time.time()}).encode()
        producer.produce(topic, value=value, key=key.encode(), partition=shard_for(key, SHARDS))
        producer.poll(0)
    assert producer.flush(60) == 0
    deadline = time.monotonic() + WINDOW + 60
    while consumer.fires < KEYS_OPEN and time.monotonic() < deadline:
        time.sleep(0.2)
    stop.set()
    serving.join()
    delays = []
    cursor = None
    while True:
        page, cursor = store.list_runs(DEBOUNCE.name, limit=1000, cursor=cursor)
        for info in page:
            sent = info.params["events"][0]["sent_at"]
            if began + WINDOW <= sent <= began + KEYS_OPEN / RATE:
                delays.append(info.submitted_at - (sent + WINDOW))
        if not cursor:
            break
    store.close()
    print(
        f"fires: {consumer.fires:,} of {KEYS_OPEN:,} keys; {len(delays):,} of them with about "
        f"{RATE * WINDOW:,.0f} windows open"
    )
    return sorted(delays)


def main() -> None:
    with valkey_url() as url, kafka_bootstrap() as bootstrap:
        ratio = throughput(url, bootstrap)
        print(f"events into fired runs against raw consume: median ratio {ratio:.4f} of {REPEATS}")
        delays = fire_delays(url, bootstrap)
        median = statistics.median(delays)
        p99 = delays[int(len(delays) * 0.99)]
        print(
            f"fire delay after a window ends (Debounce window_seconds={WINDOW:g}, {RATE:,} "
            f"keys/s): median {median * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms, max "
            f"{delays[-1] * 1000:.1f} ms over {len(delays):,} fires"
        )


if __name__ == "__main__":
    main()
