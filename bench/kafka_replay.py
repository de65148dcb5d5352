"""Journal events folded per second by ``lockgate journal replay``, against raw consume of the
same topic.

Uses the broker at ``LOCKGATE_BENCH_KAFKA_BOOTSTRAP`` (or ``LOCKGATE_TEST_KAFKA_BOOTSTRAP``), or
starts one (``tools/kafka_broker.py``). Fills a fresh journal topic of PARTITIONS partitions with
EVENTS events (RUNS runs of ten events each: ``run:init``, four steps' ``step:pending`` and
``step:done`` with results of 60 to 400 bytes, ``run:complete``), written as the store writes
them (its Avro encoding, key and headers) by one producer, then, in one run:

- raw consume: a confluent-kafka Consumer assigned every partition from its low watermark,
  consuming batches until the high watermarks, decoding nothing; measured before and after,
  with the fetch settings the replay's consumer uses (the baseline of the ratios), and once
  with librdkafka's defaults (printed beside them: the same loop reads half as fast);
- ``lockgate journal replay --json`` as a subprocess, stdout to /dev/null, timed from its start
  to its exit (interpreter start-up and imports included);
- the API: iterating ``replay_journal(...)`` for its :class:`JournalRecord` s, in process.

Each is printed in events/s with its ratio to the mean of the raw figures; each is measured
REPEATS times and the median ratio is the figure. Not a test; record the output in
docs/performance.md with the command:

    .venv/bin/python bench/kafka_replay.py
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from lockgate import RunEvent, replay_journal
from lockgate.journal._events import EPOCH_HEADER
from lockgate.stores.kafka._codec import encode, record_headers

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _broker import kafka_bootstrap  # noqa: E402

RUNS = 100_000
EVENTS = RUNS * 10
PARTITIONS = 4
REPEATS = 3


def journal(n: int) -> list[RunEvent]:
    """One run's ten events, with payloads of realistic sizes."""
    run_id = uuid.uuid4().hex
    fenced = {EPOCH_HEADER: "1"}
    params = {"order_id": f"A{n}", "customer": f"c-{n % 977}", "lines": list(range(n % 12))}
    events = [RunEvent("run:init", {"name": "bench_replay", "params": params}, run_id, run_seq=1)]
    for i in range(4):
        step = {"call_index": i, "step_id": f"bench_step_{i}", "kind": "named", "attempt": 1}
        result = {"id": f"{run_id}-{i}", "note": "x" * (60 + (n * 37 + i * 91) % 340)}
        events.append(RunEvent("step:pending", step, run_id, run_seq=2 * i + 2, headers=fenced))
        events.append(
            RunEvent(
                "step:done", {**step, "result": result}, run_id, run_seq=2 * i + 3, headers=fenced
            )
        )
    events.append(
        RunEvent("run:complete", {"result": {"ok": n}}, run_id, run_seq=10, headers=fenced)
    )
    return events


def fill(bootstrap: str, topic: str) -> int:
    """RUNS runs' journals in ``topic``, as the store writes them; the bytes of values."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(60)
    producer = Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 20}
    )
    size = 0
    for n in range(RUNS):
        events = journal(n)
        for event in events:
            value = encode(event)
            size += len(value)
            while True:
                try:
                    producer.produce(
                        topic,
                        value=value,
                        key=event.run_id.encode(),
                        partition=n % PARTITIONS,
                        headers=record_headers("bench_replay", event),
                    )
                    break
                except BufferError:
                    producer.poll(0.05)
        producer.poll(0)
    if producer.flush(120) != 0:
        raise RuntimeError("the topic was not filled")
    return size


#: The fetch settings the replay's own consumer uses: the tuned raw baseline uses them too.
TUNED = {"queued.min.messages": 200_000, "fetch.wait.max.ms": 10}


def raw_consume(bootstrap: str, topic: str, tuned: bool = True) -> float:
    """Records per second of a plain consumer reading the whole topic, decoding nothing: with
    the replay's fetch settings (``tuned``), or librdkafka's defaults."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": uuid.uuid4().hex,
            "enable.auto.commit": False,
            **(TUNED if tuned else {}),
        }
    )
    highs, assigned = {}, []
    for partition in range(PARTITIONS):
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        highs[partition] = high
        assigned.append(TopicPartition(topic, partition, low))
    started = time.perf_counter()
    consumer.assign(assigned)
    count, left = 0, {p for p, high in highs.items() if high > 0}
    while left:
        for msg in consumer.consume(10_000, timeout=0.1):
            count += 1
            if msg.offset() + 1 >= highs[msg.partition()]:
                left.discard(msg.partition())
    took = time.perf_counter() - started
    consumer.close()
    return count / took


def cli_replay(bootstrap: str, prefix: str) -> float:
    """Events per second of ``lockgate journal replay --json``, start-up included."""
    url = f"kafka://{bootstrap}?topic_prefix={prefix}"
    command = [sys.executable, "-m", "lockgate", "journal", "replay", "--journal", url, "--json"]
    started = time.perf_counter()
    with open(os.devnull, "wb") as sink:
        subprocess.run(command, stdout=sink, check=True)
    return EVENTS / (time.perf_counter() - started)


def api_replay(bootstrap: str, prefix: str) -> float:
    """Events per second of iterating ``replay_journal`` for JournalRecords, in process."""
    started = time.perf_counter()
    with replay_journal(f"kafka://{bootstrap}?topic_prefix={prefix}") as replay:
        count = sum(1 for _record in replay)
    took = time.perf_counter() - started
    if count != EVENTS:
        raise RuntimeError(f"the API replayed {count} events of {EVENTS}")
    return count / took


def main() -> None:
    with kafka_bootstrap() as bootstrap:
        prefix = f"bench{uuid.uuid4().hex[:8]}"
        started = time.perf_counter()
        size = fill(bootstrap, f"{prefix}.journal")
        print(
            f"filled {prefix}.journal: {EVENTS:,} events of {RUNS:,} runs in {PARTITIONS} "
            f"partitions, values {size / EVENTS:.0f} bytes on average, in "
            f"{time.perf_counter() - started:.1f} s"
        )
        ratios: dict[str, list[float]] = {"journal replay --json (CLI)": [], "API iterator": []}
        raw = raw_consume(bootstrap, f"{prefix}.journal")
        for _ in range(REPEATS):
            cli = cli_replay(bootstrap, prefix)
            api = api_replay(bootstrap, prefix)
            after = raw_consume(bootstrap, f"{prefix}.journal")
            baseline = (raw + after) / 2
            for label, rate in (("journal replay --json (CLI)", cli), ("API iterator", api)):
                ratios[label].append(rate / baseline)
                print(
                    f"{label}: {rate:,.0f} events/s; raw consume {raw:,.0f} before and "
                    f"{after:,.0f} after, mean {baseline:,.0f} records/s; ratio "
                    f"{rate / baseline:.3f}"
                )
            raw = after
        default = raw_consume(bootstrap, f"{prefix}.journal", tuned=False)
        print(f"raw consume with librdkafka's default fetch settings: {default:,.0f} records/s")
        for label, values in ratios.items():
            print(f"{label}: median ratio {statistics.median(values):.3f} of {REPEATS}")


if __name__ == "__main__":
    main()
