"""One record never stops a bound topic, shown with real ``lockgate worker`` processes on
Valkey and a Kafka journal: a record of 100,000 nested arrays, or one holding a lone surrogate
escape, between good records, goes to ``{topic}.dlq`` as ``not-json`` while both workers live,
every good record runs once and later records flow on; and a consumer that dies of a bug (a
validator raising what no record explains) makes its worker log one error and exit 70."""

from __future__ import annotations

import collections
import json
import re
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Message, Producer

from lockgate import RunStatus
from lockgate.streams._dead_letters import DETAIL_HEADER, REASON_HEADER, SOURCE_HEADER
from lockgate.streams.bound import bound_run_id
from test_kafka_bound_processes import BoundCluster, assigned, make_topic
from test_kafka_triggers import every_run
from test_worker_processes import wait_for
from valkey_server import shared_url

PARTITIONS = 2
BAD = {
    "deep": b"[" * 100_000 + b"]" * 100_000,
    "surrogate": b'{"n": -1, "name": "\\ud800"}',
}


@pytest.fixture
def cluster(tmp_path: Path, kafka_bootstrap: str) -> Iterator[BoundCluster]:
    running = BoundCluster(
        tmp_path,
        server_url=shared_url(),
        bootstrap=kafka_bootstrap,
        bound_topic=f"poison-{uuid.uuid4().hex[:8]}",
    )
    yield running
    running.close()


def produce(bootstrap: str, topic: str, records: list[tuple[int, bytes]]) -> list[int]:
    """(partition, value) records, acknowledged; the offset each was written at."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    offsets: list[int] = [-1] * len(records)

    def reporter(index: int) -> object:
        def report(err: object, msg: Message) -> None:
            assert err is None, err
            offsets[index] = msg.offset() or 0

        return report

    for index, (partition, value) in enumerate(records):
        producer.produce(topic, value=value, partition=partition, on_delivery=reporter(index))
    assert producer.flush(30) == 0
    return offsets


def good(first: int, count: int) -> list[tuple[int, bytes]]:
    return [(n % PARTITIONS, json.dumps({"n": n}).encode()) for n in range(first, first + count)]


def dead_letters(bootstrap: str, topic: str) -> list[Message]:
    """Every record of ``topic`` there is now."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": uuid.uuid4().hex,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": True,
        }
    )
    consumer.subscribe([topic])
    found: list[Message] = []
    ends: set[int] = set()
    try:
        for _ in range(400):
            message = consumer.poll(0.25)
            if message is None:
                continue
            if message.error() is not None:
                ends.add(message.partition() or 0)
                if len(ends) == PARTITIONS:
                    break
                continue
            found.append(message)
    finally:
        consumer.close()
    return found


def steps(cluster: BoundCluster) -> collections.Counter[tuple[int, int]]:
    """How often each (partition, offset)'s step ran."""
    if not cluster.record.exists():
        return collections.Counter()
    lines = [line.split() for line in cluster.record.read_text().splitlines() if line]
    return collections.Counter((int(p), int(o)) for p, o, _, what in lines if what == "step")


def logs(cluster: BoundCluster) -> str:
    return "\n".join(
        (cluster.tmp / f"worker-{i}.log").read_text(errors="replace")
        for i in range(len(cluster.procs))
    )


@pytest.mark.parametrize("bad", sorted(BAD))
def test_a_poison_record_is_dead_lettered_as_not_json_and_both_workers_serve_on(
    cluster: BoundCluster, bad: str
) -> None:
    make_topic(cluster, PARTITIONS)
    store = cluster.store()
    cluster.worker("noted")
    cluster.worker("noted")
    wait_for("the group owns both partitions", lambda: assigned(cluster, PARTITIONS), cluster, 60)
    # The bad record on each partition, between good ones: whoever owns either reads one.
    before = [*good(0, 20), (0, BAD[bad]), (1, BAD[bad]), *good(20, 20)]
    offsets = produce(cluster.bootstrap, cluster.bound_topic, before)
    poisoned = {(p, offsets[i]) for i, (p, value) in enumerate(before) if value == BAD[bad]}

    def complete(count: int) -> bool:
        runs = every_run(store, "bound_noted")
        return sum(1 for r in runs if r.status == RunStatus.COMPLETE) >= count

    wait_for("the 40 good records' runs completed", lambda: complete(40), cluster, 120)
    # Later records flow on, on both partitions, past the poisoned offsets.
    after = good(40, 20)
    offsets += produce(cluster.bootstrap, cluster.bound_topic, after)
    wait_for("the 20 later records' runs completed", lambda: complete(60), cluster, 120)
    assert all(proc.poll() is None for proc in cluster.procs), cluster.tail()

    runs = every_run(store, "bound_noted")
    assert len(runs) == 60, f"{len(runs)} runs for 60 good records"
    assert all(r.status == RunStatus.COMPLETE for r in runs)
    places = {
        (r.metadata["lockgate.record"]["partition"], r.metadata["lockgate.record"]["offset"])
        for r in runs
    }
    assert not places & poisoned  # no run for a poison record
    for run in runs:
        meta = run.metadata["lockgate.record"]
        assert run.run_id == bound_run_id(cluster.bound_topic, meta["partition"], meta["offset"])
    assert sorted(r.params["value"]["n"] for r in runs) == list(range(60))
    ran = steps(cluster)
    assert set(ran) == places
    assert set(ran.values()) == {1}, ran  # each good record's step ran exactly once

    copies = dead_letters(cluster.bootstrap, f"{cluster.bound_topic}.dlq")
    assert len(copies) == 2, [m.headers() for m in copies]
    for copy in copies:
        headers = {k: v.decode() for k, v in copy.headers() or []}
        assert headers[REASON_HEADER] == "not-json"
        assert headers[DETAIL_HEADER]
        source = headers[SOURCE_HEADER]
        topic, partition, offset = source.rsplit("/", 2)
        assert (topic, (int(partition), int(offset))) in {
            (cluster.bound_topic, place) for place in poisoned
        }
        assert copy.value() == BAD[bad]  # the record as it was, for a fix and a replay
    text = logs(cluster)
    assert "Traceback" not in text
    assert not [line for line in text.splitlines() if " ERROR " in line], text
    store.close()


def test_a_consumer_that_dies_of_a_bug_stops_its_worker_with_one_error_and_exit_70(
    cluster: BoundCluster,
) -> None:
    make_topic(cluster, 1)
    proc = cluster.worker("broken")
    wait_for("the group owns the partition", lambda: assigned(cluster, 1), cluster, 60)
    produce(cluster.bootstrap, cluster.bound_topic, [(0, b'{"n": 1, "break": true}')])
    try:
        code = proc.wait(timeout=60)
    except subprocess.TimeoutExpired as serving:
        message = f"the worker serves on without its consumer\n{cluster.tail()}"
        raise AssertionError(message) from serving
    text = logs(cluster)
    assert code == 70, text
    errors = [line for line in text.splitlines() if " ERROR " in line]
    assert len(errors) == 1, text
    assert re.search(r"bound topic consumer of '[^']+' died of ValidatorBroke", errors[0]), text
    assert "the validator of value broke" in errors[0]
    assert "Traceback" not in text
    last = text.splitlines()[-1]
    assert last.startswith("lockgate: error: "), text
    assert "ValidatorBroke" in last, text
