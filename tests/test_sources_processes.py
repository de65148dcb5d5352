"""Streams on real components: :class:`KafkaSource` against a real broker, then worker processes
(``tests/procs/source_workflows.py``) consuming an in-memory source and a Kafka topic while
they are killed at fault points and with SIGKILL, and started again.

What is judged, from the run's journal and from the lines the handlers wrote: the run
completes; its finished stream steps cover every record (every offset) exactly once; every
record was handled, and one was handled more than once only by a killed process, in the
batch it had in flight when it died.
"""

from __future__ import annotations

import collections
import contextlib
import json
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from lockgate import Batch, ConfigurationError, EventKind, KafkaSource, RunEvent, StepKind
from lockgate.streams._dead_letters import REASON_HEADER, SOURCE_HEADER
from lockgate.workflow._record import KafkaRecord
from test_worker_processes import DEADLINE, Cluster, wait_for

PARTITIONS = 3


# -- KafkaSource on a broker -----------------------------------------------------------------


def make_topic(bootstrap: str, partitions: int = PARTITIONS) -> str:
    topic = f"src-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(timeout=30)
    deadline = time.monotonic() + 30
    while True:  # listed a moment after it is made
        listed = admin.list_topics(timeout=10).topics.get(topic)
        if listed is not None and listed.error is None and len(listed.partitions) == partitions:
            return topic
        assert time.monotonic() < deadline, f"topic {topic} never listed"
        time.sleep(0.05)


@pytest.fixture
def topic(kafka_bootstrap: str) -> Iterator[str]:
    name = make_topic(kafka_bootstrap)
    yield name
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    for future in admin.delete_topics([name, f"{name}.dlq"]).values():
        with contextlib.suppress(Exception):  # no dead-letter topic was made
            future.result(timeout=30)


def produce(bootstrap: str, topic: str, values: list[tuple[int, bytes]]) -> None:
    """``(partition, value)`` pairs, in order, acknowledged by the broker."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for partition, value in values:
        producer.produce(topic, value=value, key=f"k{partition}".encode(), partition=partition)
    assert producer.flush(30) == 0


def numbered(count: int, start: int = 0) -> list[tuple[int, bytes]]:
    """``count`` JSON records ``{"n": i}``, record ``i`` to partition ``i % 3``."""
    return [(n % PARTITIONS, json.dumps({"n": n}).encode()) for n in range(start, start + count)]


def drain(source: KafkaSource, records: int) -> list[Batch[KafkaRecord[Any]]]:
    """Poll until ``records`` records came (an empty poll in between is a slow start)."""
    batches: list[Batch[KafkaRecord[Any]]] = []
    deadline = time.monotonic() + DEADLINE
    while sum(len(b.records) for b in batches) < records:
        assert time.monotonic() < deadline, f"only {batches} came"
        batch = source.poll(timeout_ms=1000)
        if batch is not None:
            batches.append(batch)
    return batches


def test_batches_hold_one_partition_each_in_offset_order(kafka_bootstrap: str, topic: str) -> None:
    produce(kafka_bootstrap, topic, numbered(90))
    with KafkaSource(topic, bootstrap_servers=kafka_bootstrap, batch_size=8) as source:
        assert source.partitions() == [(topic, 0), (topic, 1), (topic, 2)]
        batches = drain(source, 90)
        assert source.poll(timeout_ms=200) is None
    for batch in batches:
        assert 1 <= len(batch.records) <= 8
        assert batch.source_id == topic
        assert {r.partition for r in batch.records} == {batch.partition}
        offsets = [r.offset for r in batch.records]
        assert offsets == list(range(batch.offset, batch.offset + len(offsets)))
        assert batch.next_offset == batch.end_offset == offsets[-1] + 1
        assert all(r.value["n"] % PARTITIONS == batch.partition for r in batch.records)
        assert all(r.key == f"k{batch.partition}" for r in batch.records)
    by_partition = collections.defaultdict(list)
    for batch in batches:
        by_partition[batch.partition].extend(r.offset for r in batch.records)
    assert {p: sorted(o) for p, o in by_partition.items()} == {p: list(range(30)) for p in range(3)}
    assert {p: o == sorted(o) for p, o in by_partition.items()} == dict.fromkeys(range(3), True)


def test_commits_live_in_kafka_and_a_new_source_starts_there(
    kafka_bootstrap: str, topic: str
) -> None:
    produce(kafka_bootstrap, topic, numbered(30))
    group = f"g-{uuid.uuid4().hex[:8]}"
    with KafkaSource(topic, bootstrap_servers=kafka_bootstrap, group_id=group) as first:
        assert first.get_committed(topic, 0) is None
        first.commit(topic, 0, 4)
        first.commit(topic, 2, 10)  # everything of partition 2
        assert first.get_committed(topic, 0) == 4
    with KafkaSource(
        topic, bootstrap_servers=kafka_bootstrap, group_id=group, batch_size=100
    ) as again:
        assert [again.get_committed(topic, p) for p in range(3)] == [4, None, 10]
        batches = drain(again, 6 + 10)
        assert again.poll(timeout_ms=200) is None
    starts = {b.partition: b.offset for b in batches}
    assert starts == {0: 4, 1: 0}
    # Another group has commits of its own.
    with KafkaSource(topic, bootstrap_servers=kafka_bootstrap) as other:
        assert other.get_committed(topic, 0) is None


def test_seek_before_and_after_reading_starts_there(kafka_bootstrap: str, topic: str) -> None:
    produce(kafka_bootstrap, topic, numbered(60))  # 20 records per partition
    with KafkaSource(
        topic, bootstrap_servers=kafka_bootstrap, partitions=[1], batch_size=5
    ) as source:
        assert source.partitions() == [(topic, 1)]
        source.seek(topic, 1, 12)  # before the partition is assigned
        first = drain(source, 1)[0]
        assert (first.partition, first.offset) == (1, 12)
        source.seek(topic, 1, 3)  # assigned and fetching: what was read ahead is dropped
        batches = drain(source, 17)
        assert [r.offset for b in batches for r in b.records] == list(range(3, 20))
        with pytest.raises(ValueError, match="partitions \\[1\\]"):
            source.seek(topic, 0, 0)
        with pytest.raises(ValueError, match="not 'elsewhere'"):
            source.commit("elsewhere", 1, 0)


def test_an_undecodable_record_goes_to_the_dead_letter_topic_and_is_skipped(
    kafka_bootstrap: str, topic: str
) -> None:
    values = [*numbered(6), (1, b"{not json"), *numbered(6, start=6)]
    produce(kafka_bootstrap, topic, values)
    with KafkaSource(topic, bootstrap_servers=kafka_bootstrap, batch_size=50) as source:
        batches = drain(source, 12)
        assert source.dead_lettered == 1
        covered = {
            p: sorted(
                o for b in batches if b.partition == p for o in range(b.offset, b.next_offset)
            )
            for p in range(3)
        }
        # The offsets of partition 1 are all covered; the bad record (its offset 2) is not
        # in any batch.
        assert covered == {0: [0, 1, 2, 3], 1: [0, 1, 2, 3, 4], 2: [0, 1, 2, 3]}
        held = [r.offset for b in batches if b.partition == 1 for r in b.records]
        assert held == [0, 1, 3, 4]
        source.commit(topic, 1, 5)
    copies = read_all(kafka_bootstrap, f"{topic}.dlq", 1)
    (copy,) = copies
    headers = dict(copy.headers() or [])
    assert copy.value() == b"{not json"
    assert headers[REASON_HEADER] == b"not-json"
    assert headers[SOURCE_HEADER] == f"{topic}/1/2".encode()
    assert copy.partition() == 1


def read_all(
    bootstrap: str,
    topic: str,
    count: int | None = None,
    *,
    until: Callable[[list[Any]], bool] | None = None,
) -> list[Any]:
    """The records of ``topic`` read from its start until ``count`` of them were read, or
    ``until`` says the ones read are enough (or the deadline)."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex, "enable.auto.commit": False}
    )
    listed = consumer.list_topics(timeout=10).topics[topic]
    consumer.assign([TopicPartition(topic, p, 0) for p in listed.partitions])
    found: list[Any] = []
    deadline = time.monotonic() + DEADLINE

    def enough() -> bool:
        return until(found) if until is not None else len(found) >= (count or 0)

    while not enough() and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            found.append(message)
    consumer.close()
    return found


def test_a_missing_topic_is_a_configuration_error(kafka_bootstrap: str) -> None:
    with KafkaSource("no-such-topic-here", bootstrap_servers=kafka_bootstrap) as source:
        with pytest.raises(ConfigurationError, match=r"does not exist.*create it"):
            source.poll(timeout_ms=100)
        with pytest.raises(ConfigurationError, match="does not exist"):
            source.partitions()
    with pytest.raises(ConfigurationError, match="no partition 7"):
        KafkaSource(
            make_topic(kafka_bootstrap, 1), bootstrap_servers=kafka_bootstrap, partitions=[7]
        ).partitions()


# -- worker processes ------------------------------------------------------------------------


class StreamCluster(Cluster):
    """Worker processes on one SQLite file serving ``source_workflows``."""

    def worker(self, failpoint: str | None = None) -> subprocess.Popen[bytes]:
        return self.start("--workflows", "source_workflows", failpoint=failpoint)

    def handled(self, stream: str) -> list[tuple[int, int, int]]:
        """(partition, offset, pid) of every record handled, in the order it was."""
        if not self.record.exists():
            return []
        rows = [line.split() for line in self.record.read_text().splitlines() if line]
        return [(int(p), int(o), int(pid)) for s, p, o, pid in rows if s == stream]

    def kill_when(self, proc: subprocess.Popen[bytes], stream: str, handled: int) -> None:
        """SIGKILL ``proc`` once ``handled`` records were handled in all."""
        wait_for(
            f"{handled} records of {stream} are handled",
            lambda: len(self.handled(stream)) >= handled or proc.poll() is not None,
            self,
            DEADLINE,
        )
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=DEADLINE)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[StreamCluster]:
    procs = StreamCluster(tmp_path)
    try:
        yield procs
    finally:
        procs.close()


def submit(cluster: StreamCluster, name: str, params: dict[str, Any]) -> str:
    store = cluster.store()
    run_id = store.submit_run(
        name, uuid.uuid4().hex, params, version="1", version_behavior="pinned"
    )
    store.close()
    return run_id


def wait_complete(cluster: StreamCluster, name: str, run_id: str) -> list[RunEvent]:
    store = cluster.store()

    def ended() -> bool:
        info = store.get_run(name, run_id)
        return info is not None and info.status.is_terminal

    wait_for(f"run {run_id} ends", ended, cluster, DEADLINE)
    events = store.load_run(name, run_id)
    store.close()
    assert events[-1].kind == EventKind.RUN_COMPLETE, events[-1].payload
    return events


def finished_batches(events: list[RunEvent]) -> list[dict[str, Any]]:
    return [
        e.payload["result"]
        for e in events
        if e.kind == EventKind.STEP_DONE
        and e.payload.get("kind") == StepKind.STREAM
        and not e.payload["result"].get("idle")
    ]


def assert_covered_once(events: list[RunEvent], ends: dict[int, int]) -> None:
    """The finished stream steps tile each partition's offsets, 0 to ``ends[partition]``."""
    covered: dict[int, list[int]] = collections.defaultdict(list)
    for result in finished_batches(events):
        covered[int(result["partition"])].extend(
            range(int(result["offset"]), int(result["next_offset"]))
        )
    assert dict(covered) == {p: list(range(end)) for p, end in ends.items() if end}


def assert_handled_at_least_once(
    handled: list[tuple[int, int, int]],
    expected: set[tuple[int, int]],
    killed: set[int],
    batch_size: int,
) -> None:
    """Every record handled; again only after a killed process handled it, in the last batch
    that process handled (the one in flight when it died)."""
    assert {(p, o) for p, o, _ in handled} == expected
    last = {(p, o): i for i, (p, o, _) in enumerate(handled)}
    by_pid: dict[int, list[tuple[int, int]]] = collections.defaultdict(list)
    redone: dict[int, list[tuple[int, int]]] = collections.defaultdict(list)
    for i, (partition, offset, pid) in enumerate(handled):
        by_pid[pid].append((partition, offset))
        if last[partition, offset] != i:  # handled again later
            redone[pid].append((partition, offset))
    assert set(redone) <= killed, f"records handled again after no kill: {dict(redone)}"
    for pid, places in by_pid.items():
        assert len(places) == len(set(places)), f"process {pid} handled a record twice"
        again = redone.get(pid, [])
        # What a killed process handled that was handled again is its last batch's records.
        assert again == places[len(places) - len(again) :], f"process {pid}: {again}"
        assert len(again) <= batch_size
        assert len({p for p, _ in again}) <= 1


def assert_repeats_only_in_flight(
    events: list[RunEvent], handled: list[tuple[int, int, int]]
) -> None:
    """A record was handled again only in a try that never finished: each try of a batch
    journals step:pending with the batch's place first, and only one try of each finished."""
    tries: collections.Counter[tuple[int, int]] = collections.Counter()
    for event in events:
        if event.kind == EventKind.STEP_PENDING and event.payload["kind"] == StepKind.STREAM:
            partition = int(event.payload["partition"])
            start, end = int(event.payload["offset"]), int(event.payload["next_offset"])
            tries.update((partition, offset) for offset in range(start, end))
    times = collections.Counter((p, o) for p, o, _ in handled)
    over = {place: (n, tries[place]) for place, n in times.items() if n > tries[place]}
    assert not over, f"handled more often than tried (handled, tried): {over}"


def test_a_memory_stream_survives_a_crash_at_a_fault_point_and_a_sigkill(
    cluster: StreamCluster,
) -> None:
    run_id = submit(cluster, "proc_stream_memory", {"records": 100, "batch_size": 7})
    crashing = cluster.worker(failpoint="after_step_effect:crash@3")
    assert crashing.wait(timeout=DEADLINE) == -signal.SIGKILL, cluster.tail()
    assert len(cluster.handled("memory")) == 21  # three batches, the third not journaled
    second = cluster.worker()
    cluster.kill_when(second, "memory", 60)
    last = cluster.worker()
    events = wait_complete(cluster, "proc_stream_memory", run_id)
    assert events[-1].payload["result"] == [15, 100]
    assert_covered_once(events, {0: 100})
    assert_handled_at_least_once(
        cluster.handled("memory"),
        {(0, n) for n in range(100)},
        {crashing.pid, second.pid},
        batch_size=7,
    )
    assert_repeats_only_in_flight(events, cluster.handled("memory"))
    assert {pid for _, _, pid in cluster.handled("memory")} >= {crashing.pid, last.pid}


def test_a_kafka_stream_survives_lost_commits_crashes_and_a_sigkill(
    cluster: StreamCluster, kafka_bootstrap: str
) -> None:
    topic = make_topic(kafka_bootstrap)
    # 300 records, 100 per partition, and one record per partition that does not decode.
    values = numbered(150)
    values += [(p, b"\xff not json") for p in range(PARTITIONS)]
    values += numbered(150, start=150)
    produce(kafka_bootstrap, topic, values)
    params = {"topic": topic, "bootstrap": kafka_bootstrap, "expect": 300}
    run_id = submit(cluster, "proc_stream_kafka", params)

    # Dies after a step's outcome is journaled, before its commit: the restart must seek.
    lost_commit = cluster.worker(failpoint="after_step_append:crash@2")
    assert lost_commit.wait(timeout=DEADLINE) == -signal.SIGKILL, cluster.tail()
    # Dies after handling a batch, before journaling it: that batch is handled again.
    lost_step = cluster.worker(failpoint="after_step_effect:crash@3")
    assert lost_step.wait(timeout=DEADLINE) == -signal.SIGKILL, cluster.tail()
    killed = cluster.worker()
    cluster.kill_when(killed, topic, 200)
    cluster.worker()
    events = wait_complete(cluster, "proc_stream_kafka", run_id)

    assert events[-1].payload["result"]["records"] == 300
    assert_covered_once(events, dict.fromkeys(range(PARTITIONS), 101))
    good = {(p, o) for p in range(PARTITIONS) for o in range(101) if o != 50}
    assert_handled_at_least_once(
        cluster.handled(topic), good, {lost_commit.pid, lost_step.pid, killed.pid}, 25
    )
    assert_repeats_only_in_flight(events, cluster.handled(topic))
    # Each bad record has its copy. A worker killed around a copy may have sent it twice (as
    # docs/kafka.md says), so read until every source is seen, not a count of copies.
    expected = {f"{topic}/{p}/50".encode() for p in range(PARTITIONS)}
    copies = read_all(
        kafka_bootstrap,
        f"{topic}.dlq",
        until=lambda found: {dict(c.headers())[SOURCE_HEADER] for c in found} >= expected,
    )
    assert {dict(c.headers())[SOURCE_HEADER] for c in copies} == expected
