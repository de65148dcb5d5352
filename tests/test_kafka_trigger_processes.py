"""Trigger topics served by real worker processes: events produced with kcat (a producer with
its own partitioner) become Collect runs, every event in exactly one completed run, while one
of two workers is killed with SIGKILL twice and started again, while a second worker joins
mid-stream, and while the broker is killed and started again."""

from __future__ import annotations

import asyncio
import collections
import json
import re
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from lockgate import WorkflowClient
from lockgate.stores import CompositeStore
from lockgate.stores._shards import shard_for
from lockgate.streams._dead_letters import REASON_HEADER, SOURCE_HEADER
from test_kafka_processes import KafkaCluster
from test_kafka_triggers import every_run, runs_of
from test_worker_processes import wait_for
from valkey_server import shared_url

SHARDS = 4
NAME = "proc_collect50"


class TriggerCluster(KafkaCluster):
    """Worker processes serving ``trigger_workflows`` on a sharded namespace."""

    @property
    def target(self) -> str:
        return f"{super().target}&shard_count={SHARDS}"

    @property
    def trigger_topic(self) -> str:
        return f"{self.topic_prefix}.trigger.{NAME}"

    def worker(self, worker_id: str) -> subprocess.Popen[bytes]:
        return self.start(
            "--workflows", "trigger_workflows", "--worker-id", worker_id, "--concurrency", "16"
        )


@pytest.fixture
def cluster(tmp_path: Path, kafka_bootstrap: str) -> Iterator[TriggerCluster]:
    running = TriggerCluster(tmp_path, server_url=shared_url(), bootstrap=kafka_bootstrap)
    yield running
    running.close()


def completed(store: CompositeStore) -> list[dict[str, Any]]:
    return runs_of(store, NAME)


def topic_ready(bootstrap: str, topic: str) -> bool:
    listed = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics
    found = listed.get(topic)
    return found is not None and found.error is None and len(found.partitions) == SHARDS


def kcat_produce(bootstrap: str, topic: str, lines: list[str]) -> None:
    """``key<TAB>value`` lines produced by kcat, keyed, with its own (librdkafka's)
    partitioner, acknowledged by all in-sync replicas."""
    done = subprocess.run(
        ["kcat", "-P", "-b", bootstrap, "-t", topic, "-K", "\t", "-X", "enable.idempotence=true"],
        input="\n".join(lines) + "\n",
        text=True,
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr


def produce_chunk(
    cluster: TriggerCluster, sent: dict[str, list[int]], chunk: int, keys: int = 500
) -> None:
    """Events ``chunk * 500`` to ``chunk * 500 + 499``, across ``keys`` keys, sent by kcat."""
    lines = []
    for n in range(chunk * 500, (chunk + 1) * 500):
        key = f"key{n % keys:03d}"
        sent[key].append(n)
        lines.append(f"{key}\t{json.dumps({'k': key, 'n': n})}")
    kcat_produce(cluster.bootstrap, cluster.trigger_topic, lines)


def assert_each_event_once(
    cluster: TriggerCluster, store: CompositeStore, sent: dict[str, list[int]]
) -> None:
    """Every event sent is in exactly one completed run, and every run has at most 50."""
    total = sum(len(ns) for ns in sent.values())
    wait_for(
        f"all {total:,} events are in completed runs",
        lambda: sum(p["count"] for p in completed(store)) >= total,
        cluster,
        180,
    )
    time.sleep(1.5)  # a window fired twice would be in a run by now
    got: dict[str, list[int]] = collections.defaultdict(list)
    for params in completed(store):
        assert 1 <= params["count"] <= 50
        assert params["count"] == len(params["events"])
        for event in params["events"]:
            assert event["k"] == params["key"]
            got[params["key"]].append(event["n"])
    doubled = {k: v for k, v in got.items() if len(v) != len(set(v))}
    assert not doubled, f"events in two runs: {list(doubled)[:5]}"
    assert {k: sorted(v) for k, v in got.items()} == sent


def started(cluster: TriggerCluster, *worker_ids: str) -> list[subprocess.Popen[bytes]]:
    if shutil.which("kcat") is None:
        pytest.fail("kcat is not installed: `make kcat` installs it (apt-get, as root)")
    workers = [cluster.worker(worker_id) for worker_id in worker_ids]
    wait_for(
        "the trigger topic exists",
        lambda: topic_ready(cluster.bootstrap, cluster.trigger_topic),
        cluster,
        60,
    )
    return workers


def test_kcat_events_across_500_keys_fire_each_once_while_a_worker_is_killed_twice(
    cluster: TriggerCluster,
) -> None:
    store = cluster.store()
    victim, _ = started(cluster, "victim-1", "steady")
    sent: dict[str, list[int]] = collections.defaultdict(list)
    restarts = iter(["victim-2", "victim-3"])
    for chunk in range(20):
        produce_chunk(cluster, sent, chunk)
        if chunk in (6, 13):  # mid-stream, with windows open and runs in flight
            victim.send_signal(signal.SIGKILL)
            victim.wait(10)
            victim = cluster.worker(next(restarts))
        time.sleep(0.15)
    assert_each_event_once(cluster, store, sent)
    store.close()


def test_a_second_worker_joining_mid_stream_loses_and_doubles_nothing(
    cluster: TriggerCluster,
) -> None:
    store = cluster.store()
    started(cluster, "first")
    sent: dict[str, list[int]] = collections.defaultdict(list)
    for chunk in range(12):
        produce_chunk(cluster, sent, chunk, keys=100)
        if chunk == 4:
            cluster.worker("joiner")  # the group rebalances: partitions move to it
        time.sleep(0.15)
    assert_each_event_once(cluster, store, sent)
    joined = (cluster.tmp / "worker-1.log").read_text(errors="replace")
    assert re.search(r"partition\(s\) \[[0-9, ]+\] assigned to joiner", joined), cluster.tail()
    store.close()


def test_a_broker_killed_and_restarted_mid_stream_loses_and_doubles_nothing(
    tmp_path: Path, restartable_broker: Any
) -> None:
    cluster = TriggerCluster(
        tmp_path, server_url=shared_url(), bootstrap=restartable_broker.bootstrap
    )
    try:
        store = cluster.store()
        started(cluster, "w1", "w2")
        sent: dict[str, list[int]] = collections.defaultdict(list)
        for chunk in range(5):
            produce_chunk(cluster, sent, chunk, keys=200)
        restartable_broker.stop(kill=True)
        restartable_broker.start()  # same port, same data directory
        for chunk in range(5, 10):
            produce_chunk(cluster, sent, chunk, keys=200)
        assert_each_event_once(cluster, store, sent)
        assert all(proc.poll() is None for proc in cluster.procs), cluster.tail()
        store.close()
    finally:
        cluster.close()
        if restartable_broker.process is None or restartable_broker.process.poll() is not None:
            restartable_broker.start()  # up again for the session's other tests


# -- Debounce timing and the dead-letter topic ----------------------------------------------------


def runs_by_time(store: CompositeStore, name: str) -> list[tuple[float, dict[str, Any]]]:
    """(submitted_at, params) of every run of ``name``, the earliest first."""
    found = [(info.submitted_at, info.params) for info in every_run(store, name)]
    return sorted(found, key=lambda pair: pair[0])


def alone_on_partitions(count: int) -> list[str]:
    """``count`` keys, each the only one of them on its partition."""
    keys: dict[int, str] = {}
    n = 0
    while len(keys) < count:
        keys.setdefault(shard_for(f"key-{n}", SHARDS), f"key-{n}")
        n += 1
    return list(keys.values())


def test_a_quiet_debounce_key_fires_on_time_and_a_busy_one_at_max_wait(
    cluster: TriggerCluster,
) -> None:
    """``Debounce(window_seconds=1, max_wait_seconds=2.5)``: a key that goes quiet fires within
    1.2 s of its last event though nothing else arrives on its partition; a key that never
    goes quiet for a second fires 2.5 s after its first."""
    store = cluster.store()
    started(cluster, "debouncer")
    client = WorkflowClient(store)
    quiet, busy = alone_on_partitions(2)
    for n in range(3):
        asyncio.run(client.trigger("proc_debounce", {"k": quiet, "n": n}))
    last_sent = time.time()
    wait_for(
        "the quiet key's fire", lambda: len(runs_by_time(store, "proc_debounce")) == 1, cluster, 30
    )
    [(at, params)] = runs_by_time(store, "proc_debounce")
    assert params["key"] == quiet
    assert [e["n"] for e in params["events"]] == [0, 1, 2]
    assert 1.0 <= at - last_sent <= 1.2, f"fired {at - last_sent:.3f} s after the last event"

    first_sent = time.time()
    n = 0
    while time.time() - first_sent < 3.5:  # never quiet for a second
        asyncio.run(client.trigger("proc_debounce", {"k": busy, "n": n}))
        n += 1
        time.sleep(0.2)
    wait_for(
        "the busy key's fires",
        lambda: sum(p["count"] for _, p in runs_by_time(store, "proc_debounce")) == 3 + n,
        cluster,
        30,
    )
    fires = [(at, p) for at, p in runs_by_time(store, "proc_debounce") if p["key"] == busy]
    assert 2.5 <= fires[0][0] - first_sent <= 2.8, f"fired {fires[0][0] - first_sent:.3f} s in"
    assert [e["n"] for _, p in fires for e in p["events"]] == list(range(n))
    store.close()


def test_bad_records_go_to_the_dead_letter_topic_and_the_good_ones_around_them_fire(
    cluster: TriggerCluster,
) -> None:
    store = cluster.store()
    topic = f"{cluster.topic_prefix}.trigger.proc_capped"
    started(cluster, "dead-letterer")
    wait_for("its topic exists", lambda: topic_ready(cluster.bootstrap, topic), cluster, 60)
    good = [json.dumps({"k": "a", "n": n}).encode() for n in range(3)]
    records = [
        good[0],
        b"not json {",
        b"[1, 2]",
        good[1],
        json.dumps({"k": "a", "pad": "x" * 300}).encode(),  # over the cap of 200 bytes
        good[2],
    ]
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True})
    for value in records:  # all keyed "a", on a's partition
        producer.produce(topic, value=value, key=b"a", partition=shard_for("a", SHARDS))
    assert producer.flush(30) == 0
    wait_for("the good records' run", lambda: len(runs_of(store, "proc_capped")) == 1, cluster, 60)
    [params] = runs_of(store, "proc_capped")
    assert [e["n"] for e in params["events"]] == [0, 1, 2]
    dead = read_records(cluster.bootstrap, f"{topic}.dlq", 3)
    assert [dict(m.headers())[REASON_HEADER] for m in dead] == [
        b"not-json",
        b"not-an-object",
        b"over-cap",
    ]
    assert [m.value() for m in dead[:2]] == [b"not json {", b"[1, 2]"]
    partition = shard_for("a", SHARDS)
    assert [dict(m.headers())[SOURCE_HEADER] for m in dead] == [
        f"{topic}/{partition}/{offset}".encode() for offset in (1, 2, 4)
    ]
    log = "".join(p.read_text(errors="replace") for p in cluster.tmp.glob("worker-*.log"))
    assert log.count("is no event") == 3, cluster.tail()  # each logged once
    store.close()


def read_records(bootstrap: str, topic: str, count: int) -> list[Any]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex, "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(SHARDS)])
    found: list[Any] = []
    deadline = time.monotonic() + 30
    while len(found) < count and time.monotonic() < deadline:
        found.extend(
            m for m in consumer.consume(count - len(found), timeout=0.5) if m.error() is None
        )
    consumer.close()
    return found
