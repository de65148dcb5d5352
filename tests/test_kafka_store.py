"""KafkaEventLogStore on the suite's real broker: the topic made or checked at start, copies
acknowledged before an append returns and folded by run_seq on read, a run's records in its
shard's partition under its gate key, and reads from another process's store."""

from __future__ import annotations

import asyncio
import gc
import threading
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    ConfigResource,
    ResourceType,
)
from confluent_kafka.cimpl import NewTopic

from lockgate import StoreUnavailable
from lockgate._errors import ConfigurationError, JournalTopicMismatch, JournalTopicUnsafe
from lockgate.journal._events import EPOCH_HEADER, RunEvent
from lockgate.stores._shards import shard_for
from lockgate.stores.kafka import KafkaEventLogStore
from lockgate.stores.kafka._codec import decode, header_map


def _prefix() -> str:
    return f"t{uuid.uuid4().hex[:10]}"


def _journal(run_id: str, gates: dict[str, object], count: int) -> list[RunEvent]:
    init = RunEvent("run:init", {"name": "wf", "params": {}, "gates": gates}, run_id, run_seq=1)
    steps = [
        RunEvent("step:done", {"call_index": i}, run_id, run_seq=i + 2, headers={EPOCH_HEADER: "1"})
        for i in range(count - 1)
    ]
    return [init, *steps]


def _high_watermarks(bootstrap: str, topic: str, partitions: int) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex})
    try:
        return [
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(partitions)
        ]
    finally:
        consumer.close()


def _records(
    bootstrap: str, topic: str, partitions: int
) -> list[tuple[int, bytes, dict[str, str], RunEvent]]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex, "enable.auto.commit": False}
    )
    found = []
    try:
        for partition in range(partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
            if high <= low:
                continue
            consumer.assign([TopicPartition(topic, partition, low)])
            seen = low
            while seen < high:
                for msg in consumer.consume(100, timeout=1):
                    assert msg.error() is None
                    seen = msg.offset() + 1
                    found.append(
                        (partition, msg.key(), dict(header_map(msg.headers())), decode(msg.value()))
                    )
    finally:
        consumer.close()
    return found


def test_the_topic_is_made_with_a_partition_per_shard_and_checked_at_start(
    kafka_bootstrap: str,
) -> None:
    prefix = _prefix()
    store = KafkaEventLogStore(kafka_bootstrap, topic_prefix=prefix, shard_count=3)
    store.close()
    topic = AdminClient({"bootstrap.servers": kafka_bootstrap}).list_topics(timeout=10).topics
    assert len(topic[f"{prefix}.journal"].partitions) == 3
    KafkaEventLogStore(kafka_bootstrap, topic_prefix=prefix, shard_count=3).close()  # same: fine
    with pytest.raises(JournalTopicMismatch, match="has 3 partition") as refused:
        KafkaEventLogStore(kafka_bootstrap, topic_prefix=prefix, shard_count=4)
    assert (refused.value.partitions, refused.value.expected) == (3, 4)
    assert refused.value.code == "configuration"
    topic = AdminClient({"bootstrap.servers": kafka_bootstrap}).list_topics(timeout=10).topics
    assert len(topic[f"{prefix}.journal"].partitions) == 3  # never repartitioned


def test_a_topic_made_elsewhere_with_another_count_is_refused(kafka_bootstrap: str) -> None:
    prefix = _prefix()
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(f"{prefix}.journal", 2, 1)])[f"{prefix}.journal"].result(30)
    with pytest.raises(JournalTopicMismatch):
        KafkaEventLogStore(kafka_bootstrap, topic_prefix=prefix, shard_count=1)


def test_the_topic_is_made_to_keep_every_record_and_never_compact(kafka_bootstrap: str) -> None:
    prefix = _prefix()
    KafkaEventLogStore(kafka_bootstrap, topic_prefix=prefix, shard_count=1).close()
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    resource = ConfigResource(ResourceType.TOPIC, f"{prefix}.journal")
    entries = admin.describe_configs([resource])[resource].result(timeout=30)
    values = {name: entry.value for name, entry in entries.items()}
    assert (values["cleanup.policy"], values["retention.ms"], values["retention.bytes"]) == (
        "delete",
        "-1",
        "-1",
    )


def test_a_compacted_topic_is_refused_and_left_as_it_was(kafka_bootstrap: str) -> None:
    prefix = _prefix()
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    compacted = NewTopic(f"{prefix}.journal", 1, 1, config={"cleanup.policy": "compact"})
    admin.create_topics([compacted])[f"{prefix}.journal"].result(30)
    with pytest.raises(JournalTopicUnsafe, match=r"cleanup\.policy=compact") as refused:
        KafkaEventLogStore(kafka_bootstrap, topic_prefix=prefix)
    assert (refused.value.setting, refused.value.code) == ("cleanup.policy", "configuration")
    assert _high_watermarks(kafka_bootstrap, f"{prefix}.journal", 1) == [0]  # nothing written


def test_a_topic_that_deletes_old_records_is_served_with_a_warning(
    kafka_bootstrap: str, caplog: pytest.LogCaptureFixture
) -> None:
    prefix = _prefix()
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    week = NewTopic(f"{prefix}.journal", 1, 1, config={"retention.ms": "604800000"})
    admin.create_topics([week])[f"{prefix}.journal"].result(30)
    with caplog.at_level("WARNING", logger="lockgate.kafka"):
        KafkaEventLogStore(kafka_bootstrap, topic_prefix=prefix).close()
    assert "retention.ms=604800000" in caplog.text


def test_a_bad_topic_prefix_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="topic_prefix"):
        KafkaEventLogStore("127.0.0.1:1", topic_prefix="no spaces")


def test_copies_land_in_the_gate_keys_partition_with_key_and_headers(kafka_bootstrap: str) -> None:
    prefix = _prefix()
    store = KafkaEventLogStore(kafka_bootstrap, topic_prefix=prefix, shard_count=4)
    gated = _journal("r-gated", {"concurrency": {"key": "acct-7", "max": 1}}, 3)
    plain = _journal("r-plain", {}, 2)
    store.append_copies("wf", "r-gated", gated)
    store.append_copies("wf", "r-plain", plain)
    store.close()
    records = _records(kafka_bootstrap, f"{prefix}.journal", 4)
    by_run = {run: [r for r in records if r[3].run_id == run] for run in ("r-gated", "r-plain")}
    assert {r[0] for r in by_run["r-gated"]} == {shard_for("acct-7", 4)}
    assert {r[1] for r in by_run["r-gated"]} == {b"acct-7"}
    assert {r[0] for r in by_run["r-plain"]} == {shard_for("r-plain", 4)}
    assert {r[1] for r in by_run["r-plain"]} == {b"r-plain"}
    assert [r[3] for r in by_run["r-gated"]] == gated
    assert by_run["r-gated"][1][2] == {
        "lg-workflow": "wf",
        "lg-run-id": "r-gated",
        "lg-run-seq": "2",
        "lg-epoch": "1",
        "lg-schema": "1",
    }


def test_a_second_copy_is_folded_away_and_another_process_reads_the_run(
    kafka_bootstrap: str,
) -> None:
    prefix = _prefix()
    writer = KafkaEventLogStore(kafka_bootstrap, topic_prefix=prefix, shard_count=2)
    journal = _journal("r-1", {}, 4)
    writer.append_copies("wf", "r-1", journal[:3])
    writer.append_copies("wf", "r-1", journal[1:])  # seqs 2 and 3 copied twice
    changed = RunEvent("step:done", {"call_index": 99}, "r-1", run_seq=2)
    writer.append_copies("wf", "r-1", [changed])  # a late copy: the first one stays
    assert writer.load_run("wf", "r-1") == journal
    reader = KafkaEventLogStore(kafka_bootstrap, topic_prefix=prefix, shard_count=2)
    assert reader.load_run("wf", "r-1") == journal
    assert reader.get_last_event("wf", "r-1") == journal[-1]
    assert reader.read_events_from("wf", "r-1", 2) == journal[2:]
    assert reader.load_run("wf", "r-1", max_events=2) == journal[:2]
    assert reader.replay_run("wf", "r-1", cursor=1, count=2) == (journal[1:3], 3)
    assert reader.load_run("wf", "nobody") == []
    assert reader.get_last_event("other-wf", "r-1") is None
    # What the writer copies next is read by the reader, which reads on from where it was.
    tail = RunEvent("run:complete", {"result": 1}, "r-1", run_seq=5)
    writer.append_copies("wf", "r-1", [tail])
    assert reader.load_run("wf", "r-1") == [*journal, tail]
    writer.close()
    reader.close()


def test_concurrent_appends_all_return_acknowledged(kafka_bootstrap: str) -> None:
    prefix = _prefix()
    store = KafkaEventLogStore(kafka_bootstrap, topic_prefix=prefix, shard_count=2)
    failures: list[BaseException] = []

    def copy(run_id: str) -> None:
        try:
            store.append_copies("wf", run_id, _journal(run_id, {}, 5))
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=copy, args=(f"r-{i}",)) for i in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert failures == []
    reader = KafkaEventLogStore(kafka_bootstrap, topic_prefix=prefix, shard_count=2)
    for i in range(16):
        assert reader.load_run("wf", f"r-{i}") == _journal(f"r-{i}", {}, 5)
    reader.close()
    store.close()


def test_an_unreachable_broker_is_store_unavailable() -> None:
    with pytest.raises(StoreUnavailable, match="journal topic"):
        KafkaEventLogStore("127.0.0.1:1", read_timeout=1.0)


def test_an_append_kafka_does_not_acknowledge_is_store_unavailable_and_kept_nowhere(
    kafka_bootstrap: str,
) -> None:
    prefix = _prefix()
    # A locate naming a partition the topic does not have: Kafka cannot keep the records.
    store = KafkaEventLogStore(
        kafka_bootstrap, topic_prefix=prefix, shard_count=1, locate=lambda *_: 5, delivery_timeout=3
    )
    with pytest.raises(StoreUnavailable) as failed:
        store.append_copies("wf", "r-1", _journal("r-1", {}, 2))
    assert isinstance(failed.value.__cause__, KafkaException)
    store.close()
    reader = KafkaEventLogStore(kafka_bootstrap, topic_prefix=prefix, shard_count=1)
    assert reader.load_run("wf", "r-1") == []
    reader.close()


def test_another_process_reads_a_run_from_the_position_the_lifecycle_keeps(
    kafka_bootstrap: str,
) -> None:
    from confluent_kafka import Producer

    from lockgate.stores import CompositeStore, ValkeyLifecycleStore
    from valkey_server import shared_url

    namespace, prefix = f"kp{uuid.uuid4().hex[:10]}", _prefix()

    def composite() -> CompositeStore:
        return CompositeStore(
            lifecycle=ValkeyLifecycleStore(shared_url(), namespace=namespace),
            events=KafkaEventLogStore(kafka_bootstrap, topic_prefix=prefix),
        )

    writer = composite()
    # A record before the run's first one that claims to be the run's but is not a RunEvent:
    # a reader that scanned the partition from its start would trip on it.
    junk = Producer({"bootstrap.servers": kafka_bootstrap})
    junk.produce(
        f"{prefix}.journal",
        b"\x02",
        partition=0,
        headers=[("lg-workflow", b"wf"), ("lg-run-id", b"r-1")],
    )
    assert junk.flush(30) == 0
    writer.submit_run("wf", "r-1", {"a": 1})
    writer.append_events("wf", "r-1", [RunEvent("run:complete", {"result": 2}, "r-1")])
    lifecycle = writer.lifecycle
    assert isinstance(lifecycle, ValkeyLifecycleStore)
    assert lifecycle.journal_position("wf", "r-1") == (0, 1)  # offset 0 is the junk
    lifecycle.keep_journal_position("wf", "r-1", 0, 5)  # a later copy's offset: the lowest stays
    assert lifecycle.journal_position("wf", "r-1") == (0, 1)
    assert lifecycle.journal_position("wf", "nobody") is None
    reader = composite()
    assert [e.kind for e in reader.load_run("wf", "r-1")] == ["run:init", "run:complete"]
    writer.close()
    reader.close()


def test_the_producer_is_let_go_when_the_last_store_using_it_closes(kafka_bootstrap: str) -> None:
    """A process that closed its journal stores keeps no client of that cluster: no producer,
    no thread serving its reports, no reconnect attempts logged for a broker long gone."""
    import threading

    from lockgate.stores.kafka import _producer

    config = {"bootstrap.servers": kafka_bootstrap, "client.id": f"c{uuid.uuid4().hex[:8]}"}
    before = {t.ident for t in threading.enumerate() if t.name == "lockgate-kafka-reports"}
    first = KafkaEventLogStore(kafka_bootstrap, topic_prefix=_prefix(), config=config)
    second = KafkaEventLogStore(kafka_bootstrap, topic_prefix=_prefix(), config=config)
    assert first._producer is second._producer  # one producer per configuration
    serving = [
        t
        for t in threading.enumerate()
        if t.name == "lockgate-kafka-reports" and t.ident not in before
    ]
    assert len(serving) == 1
    first.close()
    first.close()  # a second close gives nothing back twice
    assert any(s.producer is second._producer for s in _producer._producers.values())
    second.close()
    assert all(s.producer is not second._producer for s in _producer._producers.values())
    serving[0].join(timeout=5)
    assert not serving[0].is_alive()


def test_native_appends_leave_nothing_for_the_garbage_collector(kafka_bootstrap: str) -> None:
    # An append's delivery in a reference cycle left every append's delivery, future and lists
    # for the collector to find: on a worker's hot path that cost a fifth of its throughput.
    store = KafkaEventLogStore(kafka_bootstrap, topic_prefix=f"gc{uuid.uuid4().hex[:10]}")
    append = store.coroutine_for(store.append_copies)
    assert append is not None

    async def appends(count: int) -> None:
        for n in range(count):
            run_id = f"gc-{n}"
            await append("wf", run_id, [RunEvent("run:init", {"n": n}, run_id, run_seq=1)])

    asyncio.run(appends(5))  # warm: the producer, the loop's inbox
    gc.collect()
    gc.disable()
    try:
        asyncio.run(appends(300))
        left = gc.collect()  # what only the collector could free
    finally:
        gc.enable()
        store.close()
    assert left < 300, left  # a cycle per append leaves several objects each
