"""Trigger topics: events consumed into fired runs and into completed runs per second, against
raw consume of the same topic; the fire delay after a window ends with 10,000 windows open; and
the fire delay of 100 windows that fall due at the same instant.

Starts a valkey-server on loopback (``LOCKGATE_BENCH_VALKEY_URL`` for an existing one) and uses
the broker of ``_broker.py``. The store is the streaming deployment's: ``open_store(valkey,
journal="kafka://...")`` with SHARDS shards, so each fire is a Valkey script and a journal copy
acknowledged by Kafka. The workflows are ``_triggers.py``'s. In one run:

- throughput: EVENTS events across KEYS keys (JSON objects of about 45 bytes, keyed, each on
  its key's partition) are produced beforehand to the trigger topic of a ``Collect(max_events=
  50)`` workflow with a window longer than the run, so every run fires full. Raw: a
  confluent-kafka Consumer with the trigger consumer's fetch settings assigned every partition,
  consuming until it has every record, timed from its first record. Fired: a ``TriggerConsumer``
  in this process given every partition, timed from the step that read its first records until
  every event is in a fired run. Completed (end to end): one ``lockgate worker _triggers:collect``
  process, its trigger consumer in the topic's consumer group and its claim loop running the
  fired runs, on a fresh topic of the same events, timed from the first run's end to the last's
  (events of the runs ended in between, per second). Raw is measured just before and just after
  each, the ratio taken against their mean, REPEATS times, and the median ratio is the figure.
  Then a floor: raw consume that also loads each value as JSON (what any consumer of these
  events does first), beside one more raw run.
- fire delay: a ``Debounce(window_seconds=WINDOW)`` workflow's consumer in its consumer group
  while KEYS_OPEN keys each get one event, RATE keys a second, so about RATE * WINDOW windows are
  open at once. Each event carries ``sent_at``, the producer's clock just before its send; a
  fire's delay is its run's ``submitted_at`` (Valkey's clock, the same machine) less the
  window's end, ``sent_at + WINDOW``: from the record's send to the fired run's submit, less the
  window, so reading the record is part of it. Median and p99 over the fires of the middle of
  the run, when the windows open are at their most.
- at once: AT_ONCE keys of a ``Debounce(window_seconds=SHORT_WINDOW)`` each get one event, all
  with one ``sent_at`` and sent in one produce batch, so their windows fall due at one instant.
  A first round of as many keys, not measured, warms the producer, the consumer and the
  store's connections. Each fire's delay as above; the median and max of the AT_ONCE delays,
  and how many submit times they have (one per store script). Baseline, measured just before
  and just after, REPEATS times: the same consumer firing each batch with a store call of its
  own (``fire_batch``), as before ``fire_batches``; the median ratio of the median delays.

Not a test; record the output in docs/performance.md with the command:

    .venv/bin/python bench/kafka_triggers.py

Name parts to run only those (``throughput``, ``completed``: the end-to-end figure once, with no
baseline, ``delay``, ``at-once``). ``LOCKGATE_BENCH_REPEATS`` (3) sets the repeats,
``LOCKGATE_BENCH_AT_ONCE`` (100) the windows due at once.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from lockgate import CompositeStore, ValkeyStore, open_store
from lockgate.stores._shards import shard_for
from lockgate.stores.kafka import KafkaEventLogStore
from lockgate.streams import TriggerConsumer
from lockgate.streams._topics import trigger_topic
from lockgate.streams.triggers._consumer import CONSUMER_FETCH
from lockgate.streams.triggers._produce import prepare_trigger_topics
from lockgate.workflow._spec import WorkflowSpec, spec_of

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE))

from _bracket import bracketed  # noqa: E402
from _broker import kafka_bootstrap  # noqa: E402
from _servers import completion_rate, valkey_url  # noqa: E402
from _triggers import (  # noqa: E402
    SHORT_WINDOW,
    WINDOW,
    bench_at_once,
    bench_collect,
    bench_debounce,
)

SHARDS = 4
EVENTS = 200_000
KEYS = 1_000
PER_RUN = 50
REPEATS = int(os.environ.get("LOCKGATE_BENCH_REPEATS", "3"))
RATE = 500
KEYS_OPEN = 15_000
AT_ONCE = int(os.environ.get("LOCKGATE_BENCH_AT_ONCE", "100"))

COLLECT = spec_of(bench_collect)
DEBOUNCE = spec_of(bench_debounce)
AT_ONCE_SPEC = spec_of(bench_at_once)


def fresh() -> tuple[str, str]:
    """A fresh namespace and journal topic prefix."""
    return f"bench{uuid.uuid4().hex[:8]}", f"bench{uuid.uuid4().hex[:8]}"


def composite(
    url: str, bootstrap: str, prefix: str, namespace: str | None = None
) -> CompositeStore:
    """The streaming deployment's store on a fresh Valkey namespace (or ``namespace``),
    journals (and trigger topics) under ``prefix``."""
    namespace = namespace or f"bench{uuid.uuid4().hex[:8]}"
    store = open_store(
        f"{url}?namespace={namespace}&shard_count={SHARDS}",
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


def collect_topic(url: str, bootstrap: str, prefix: str) -> str:
    """The Collect workflow's trigger topic under ``prefix``, made and holding EVENTS events."""
    store = composite(url, bootstrap, prefix)
    topic = trigger_topic(prefix, COLLECT)
    prepare_trigger_topics(journal_of(store), topic)
    store.close()
    keys = [f"key{n % KEYS}" for n in range(EVENTS)]
    produce(
        bootstrap, topic, [(k, {"k": k, "n": n, "kind": "comment"}) for n, k in enumerate(keys)]
    )
    return topic


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
    while consumer.fires < EVENTS // PER_RUN:
        consumer.step()
    took = time.perf_counter() - started
    consumer.close()
    store.close()
    return EVENTS / took


def completed_per_second(url: str, bootstrap: str) -> float:
    """Events into completed runs per second through one ``lockgate worker`` process serving
    the Collect workflow's fresh trigger topic (its consumer and its runs), timed from the
    first run's end to the last's."""
    namespace, prefix = fresh()
    collect_topic(url, bootstrap, prefix)
    target = f"{url}?namespace={namespace}&shard_count={SHARDS}"
    journal = f"kafka://{bootstrap}?topic_prefix={prefix}"
    store = composite(url, bootstrap, prefix, namespace)
    lifecycle = store.lifecycle
    assert isinstance(lifecycle, ValkeyStore)
    command = [sys.executable, "-m", "lockgate", "worker", "_triggers:collect"]
    command += ["--store", target, "--journal", journal]
    proc = subprocess.Popen(command, cwd=HERE)
    try:
        return completion_rate(lifecycle, EVENTS // PER_RUN, [proc]) * PER_RUN
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        store.close()


def throughput(url: str, bootstrap: str) -> None:
    prefix = f"bench{uuid.uuid4().hex[:8]}"
    topic = collect_topic(url, bootstrap, prefix)

    def report(what: str) -> Any:
        def line(rate: float, raw: float, after: float) -> None:
            baseline = (raw + after) / 2
            print(
                f"events into {what}: {rate:,.0f}/s (Collect max_events=50, {SHARDS} "
                f"partitions, Valkey + Kafka); raw consume {raw:,.0f} before and {after:,.0f} "
                f"after, mean {baseline:,.0f}/s; ratio {rate / baseline:.4f}",
                flush=True,
            )

        return line

    fired = bracketed(
        lambda: fired_per_second(url, bootstrap, prefix),
        lambda: raw_consume_per_second(bootstrap, topic),
        REPEATS,
        report("fired runs, a TriggerConsumer in this process"),
    )
    print(f"events into fired runs against raw consume: median ratio {fired:.4f} of {REPEATS}")
    completed = bracketed(
        lambda: completed_per_second(url, bootstrap),
        lambda: raw_consume_per_second(bootstrap, topic),
        REPEATS,
        report("completed runs, one lockgate worker process"),
    )
    print(
        f"events into completed runs against raw consume: median ratio {completed:.4f} of {REPEATS}"
    )
    parsed = raw_consume_per_second(bootstrap, topic, parse=True)
    raw = raw_consume_per_second(bootstrap, topic)
    print(
        f"the floor, no lockgate: raw consume loading each value as JSON {parsed:,.0f}/s, raw "
        f"consume {raw:,.0f}/s just after; ratio {parsed / raw:.4f}",
        flush=True,
    )


def delays_of(
    store: CompositeStore, spec: WorkflowSpec, window: float, keep: Any = lambda sent: True
) -> list[tuple[float, float]]:
    """(delay, submitted_at) of each fired run of ``spec`` whose first event's ``sent_at``
    ``keep`` takes: the delay from the record's send to its run's submit, less ``window``."""
    found = []
    cursor = None
    while True:
        page, cursor = store.list_runs(spec.name, limit=1000, cursor=cursor)
        for info in page:
            sent = info.params["events"][0]["sent_at"]
            if keep(sent):
                found.append((info.submitted_at - (sent + window), info.submitted_at))
        if not cursor:
            break
    return sorted(found)


class OneByOne(TriggerConsumer):
    """The baseline of the windows due at once: every batch fired with a store call of its
    own (``fire_batch``), the keys side by side on the consumer's loop, as before
    ``fire_batches``."""

    async def _fire_keys(self, keys: list[list[Any]]) -> list[Any]:
        left = await asyncio.gather(*(self._fire_in_order(batches) for batches in keys))
        return [batch for unfired in left for batch in unfired]


def serving(
    store: CompositeStore, spec: WorkflowSpec, kind: type[TriggerConsumer] = TriggerConsumer
) -> tuple[TriggerConsumer, Any]:
    """``spec``'s consumer serving in its group on a thread; a call that stops it."""
    consumer = kind(store, journal_of(store), spec, worker_id="bench")
    stop = threading.Event()
    thread = threading.Thread(target=consumer.serve, args=(stop,))
    thread.start()
    assert consumer.assigned.wait(60), "the consumer was given no partitions"

    def stopped() -> None:
        stop.set()
        thread.join()

    return consumer, stopped


def fire_delays(url: str, bootstrap: str) -> list[float]:
    """Seconds from each window's end to its run's submit, for the fires of the middle of the
    run (about RATE * WINDOW windows open)."""
    prefix = f"bench{uuid.uuid4().hex[:8]}"
    store = composite(url, bootstrap, prefix)
    topic = trigger_topic(prefix, DEBOUNCE)
    prepare_trigger_topics(journal_of(store), topic)
    consumer, stopped = serving(store, DEBOUNCE)
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
    stopped()
    middle = delays_of(
        store, DEBOUNCE, WINDOW, lambda sent: began + WINDOW <= sent <= began + KEYS_OPEN / RATE
    )
    store.close()
    print(
        f"fires: {consumer.fires:,} of {KEYS_OPEN:,} keys; {len(middle):,} of them with about "
        f"{RATE * WINDOW:,.0f} windows open"
    )
    return [delay for delay, _ in middle]


def send_at_once(producer: Producer, topic: str, keys: list[str], sent: float) -> None:
    """One event for each of ``keys``, each with ``sent_at`` = ``sent``, in one produce batch."""
    for key in keys:
        value = json.dumps({"k": key, "sent_at": sent}).encode()
        producer.produce(topic, value=value, key=key.encode(), partition=shard_for(key, SHARDS))
    assert producer.flush(60) == 0


def at_once(url: str, bootstrap: str, kind: type[TriggerConsumer]) -> list[float]:
    """AT_ONCE windows falling due at one instant: each one's delay, sorted; the submits'
    times printed. A first round of as many windows, not measured, warms the producer, the
    consumer and the store's connections up, as a consumer that has been serving is."""
    prefix = f"bench{uuid.uuid4().hex[:8]}"
    store = composite(url, bootstrap, prefix)
    topic = trigger_topic(prefix, AT_ONCE_SPEC)
    prepare_trigger_topics(journal_of(store), topic)
    consumer, stopped = serving(store, AT_ONCE_SPEC, kind)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    send_at_once(producer, topic, [f"warm{n}" for n in range(AT_ONCE)], 0.0)
    deadline = time.monotonic() + SHORT_WINDOW + 30
    while consumer.fires < AT_ONCE and time.monotonic() < deadline:
        time.sleep(0.05)
    sent = time.time()
    send_at_once(producer, topic, [f"now{n}" for n in range(AT_ONCE)], sent)
    deadline = time.monotonic() + SHORT_WINDOW + 30
    while consumer.fires < 2 * AT_ONCE and time.monotonic() < deadline:
        time.sleep(0.05)
    stopped()
    found = delays_of(store, AT_ONCE_SPEC, SHORT_WINDOW, lambda at: at == sent)
    store.close()
    delays = [delay for delay, _ in found]
    submits = sorted({at for _, at in found})
    what = "fired together" if kind is TriggerConsumer else "one store call per batch"
    print(
        f"{AT_ONCE:,} Debounce(window_seconds={SHORT_WINDOW:g}) windows due at one instant, "
        f"{what}: {len(found):,} fired; delay after their end median "
        f"{statistics.median(delays) * 1000:.1f} ms, max {delays[-1] * 1000:.1f} ms; "
        f"{len(submits)} submit times, the first {(submits[0] - sent - SHORT_WINDOW) * 1000:.1f}"
        f" ms after the end",
        flush=True,
    )
    return delays


def at_once_against_one_by_one(url: str, bootstrap: str) -> None:
    """The windows due at once fired together, against the one-by-one baseline measured just
    before and just after; REPEATS times, the median ratio of the median delays."""

    def line(delay: float, before: float, after: float) -> None:
        print(
            f"median delay {delay * 1000:.1f} ms fired together; one by one {before * 1000:.1f} "
            f"before, {after * 1000:.1f} after; ratio {delay / ((before + after) / 2):.4f}",
            flush=True,
        )

    ratio = bracketed(
        lambda: statistics.median(at_once(url, bootstrap, TriggerConsumer)),
        lambda: statistics.median(at_once(url, bootstrap, OneByOne)),
        REPEATS,
        line,
    )
    print(f"windows due at once, fired together against one by one: median ratio {ratio:.4f}")


def main() -> None:
    with valkey_url() as url, kafka_bootstrap() as bootstrap:
        what = sys.argv[1:] or ["throughput", "delay", "at-once"]
        if "throughput" in what:
            throughput(url, bootstrap)
        if "completed" in what:  # the end-to-end figure alone, once
            print(f"events into completed runs: {completed_per_second(url, bootstrap):,.0f}/s")
        if "delay" in what:
            delays = fire_delays(url, bootstrap)
            median = statistics.median(delays)
            p99 = delays[int(len(delays) * 0.99)]
            print(
                f"fire delay after a window ends (Debounce window_seconds={WINDOW:g}, {RATE:,} "
                f"keys/s): median {median * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms, max "
                f"{delays[-1] * 1000:.1f} ms over {len(delays):,} fires"
            )
        if "at-once" in what:
            at_once_against_one_by_one(url, bootstrap)


if __name__ == "__main__":
    main()
