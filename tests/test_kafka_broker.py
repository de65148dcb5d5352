"""The suite's Kafka broker is a real one: topics through the admin API, idempotent produce with
acks=all, and a client outside Python (kcat) reads what was produced."""

from __future__ import annotations

import shutil
import subprocess
import uuid

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic


def _topic(bootstrap: str, partitions: int) -> str:
    name = f"probe-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        future.result(timeout=30)
    return name


def _produce(bootstrap: str, topic: str, values: list[bytes], partitions: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all"})
    failures: list[object] = []
    for i, value in enumerate(values):
        producer.produce(
            topic,
            value,
            key=f"k{i}".encode(),
            partition=i % partitions,
            on_delivery=lambda err, _msg: failures.append(err) if err else None,
        )
    assert producer.flush(30) == 0
    assert failures == []


def test_the_broker_takes_topics_and_idempotent_produce_and_gives_them_back(
    kafka_bootstrap: str,
) -> None:
    topic = _topic(kafka_bootstrap, 3)
    values = [f"v{i}".encode() for i in range(9)]
    _produce(kafka_bootstrap, topic, values, 3)
    consumer = Consumer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "group.id": f"g-{topic}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.subscribe([topic])
        seen: dict[int, list[bytes]] = {}
        for _ in range(300):
            if sum(len(v) for v in seen.values()) == len(values):
                break
            message = consumer.poll(0.2)
            if message is None or message.error():
                continue
            seen.setdefault(message.partition(), []).append(message.value())
    finally:
        consumer.close()
    assert seen == {p: values[p::3] for p in range(3)}


def test_kcat_reads_what_was_produced(kafka_bootstrap: str) -> None:
    kcat = shutil.which("kcat")
    if kcat is None:
        pytest.fail("kcat is not installed: make test installs it (apt-get install kcat, as root)")
    topic = _topic(kafka_bootstrap, 2)
    _produce(kafka_bootstrap, topic, [b"a", b"b", b"c", b"d"], 2)
    done = subprocess.run(
        [kcat, "-b", kafka_bootstrap, "-t", topic, "-C", "-e", "-q", "-f", "%p %o %k %s\n"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert sorted(done.stdout.splitlines()) == ["0 0 k0 a", "0 1 k2 c", "1 0 k1 b", "1 1 k3 d"]
