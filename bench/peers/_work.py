"""The work every system is given, and what each hands back.

- bound: RECORDS JSON records ``{"n": n}`` keyed ``r{n}``, on partition ``n % 8`` of a fresh
  topic of 8 partitions, produced before the system starts;
- collect: EVENTS JSON events ``{"k": key, "n": n, "kind": "comment"}`` across KEYS keys
  (``key{n % KEYS}``), keyed by their key, on the partition of lockgate's shard function
  (what its own producer does) of a fresh topic of 4 partitions, produced beforehand.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from lockgate.stores._shards import shard_for

BOUND_PARTITIONS = 8
COLLECT_PARTITIONS = 4
WINDOW = 50


@dataclass(frozen=True)
class Scale:
    records: int = 3_000
    events: int = 200_000
    keys: int = 1_000


@dataclass(frozen=True)
class Outcome:
    """One system's figure in one repeat, and its exactly-once check."""

    rate: float
    #: The rate the bench saw asking every 50 ms (``_timing.wait_completion``).
    polled: float
    #: One line: "3000/3000 records in exactly one completed run", or what went wrong.
    check: str
    exact: bool
    #: Anything more the system's figure needs said.
    note: str = ""


#: The names this run gave its topics, journal prefixes and groups: every topic whose name
#: holds one (the peers' own changelog and dead-letter topics too) is deleted at the end.
MADE: set[str] = set()


def fresh_name(stem: str) -> str:
    name = f"peers-{stem}-{uuid.uuid4().hex[:8]}"
    MADE.add(name)
    return name


def delete_made_topics(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    names = admin.list_topics(timeout=30).topics
    doomed = [t for t in names if any(made in t for made in MADE)]
    if not doomed:
        return
    for topic, deleted in admin.delete_topics(doomed, operation_timeout=30).items():
        try:
            deleted.result(timeout=60)
        except Exception as error:  # a topic left behind is no reason to fail the run
            print(f"could not delete topic {topic}: {error}", flush=True)
    print(f"deleted the {len(doomed)} topics this run made", flush=True)


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(timeout=30)


def _produce(bootstrap: str, topic: str, records: Iterable[tuple[str, bytes, int]]) -> None:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5}
    )
    for key, value, partition in records:
        while True:
            try:
                producer.produce(topic, value=value, key=key.encode(), partition=partition)
                break
            except BufferError:
                producer.poll(0.01)
    assert producer.flush(120) == 0, f"records to {topic} not all acknowledged"


def produce_records(bootstrap: str, topic: str, scale: Scale) -> None:
    """The bound work on ``topic`` (which must exist with BOUND_PARTITIONS partitions)."""
    _produce(
        bootstrap,
        topic,
        (
            (f"r{n}", json.dumps({"n": n}).encode(), n % BOUND_PARTITIONS)
            for n in range(scale.records)
        ),
    )


def event_key(n: int, scale: Scale) -> str:
    return f"key{n % scale.keys}"


def produce_events(bootstrap: str, topic: str, scale: Scale) -> None:
    """The collect work on ``topic`` (which must exist with COLLECT_PARTITIONS partitions)."""

    def events() -> Iterable[tuple[str, bytes, int]]:
        for n in range(scale.events):
            key = event_key(n, scale)
            value = json.dumps({"k": key, "n": n, "kind": "comment"}, separators=(",", ":"))
            yield key, value.encode(), shard_for(key, COLLECT_PARTITIONS)

    _produce(bootstrap, topic, events())
