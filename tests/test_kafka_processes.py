"""Worker processes on the Valkey + Kafka composite: many processes, real signals, a broker
killed under load.

The clusters of ``test_valkey_processes`` with a Kafka journal: every worker (and the second
view its step bodies read journals through) opens ``open_store(url, journal=...)``, with a
Valkey namespace and a topic prefix of the test's own. Besides what the store answers, each
test reads the topic itself (:func:`topic_records`) and folds it by ``run_seq``
(:func:`folded`), so what it judges is what Kafka keeps, not what Valkey still holds.
"""

from __future__ import annotations

import collections
import itertools
import re
import signal
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from lockgate import EventKind, RunEvent, open_store
from lockgate.stores import CompositeStore
from lockgate.stores.kafka._codec import RUN_ID_HEADER, WORKFLOW_HEADER, decode, header_map
from test_flow_processes import completed_once, max_overlap, recorded_bodies
from test_valkey_processes import (
    STEPS,
    ValkeyCluster,
    all_ended,
    assert_all_completed_once,
    submit_steps,
)
from test_worker_processes import DEADLINE, HEARTBEAT, LOCK_TTL, wait_for
from valkey_server import shared_url


@dataclass
class KafkaCluster(ValkeyCluster):
    """Worker processes on a Valkey namespace and a journal topic of their own."""

    bootstrap: str = ""
    topic_prefix: str = field(default_factory=lambda: f"kp{uuid.uuid4().hex[:10]}")
    #: Added to the journal URL's query (``&delivery_timeout=...``).
    journal_options: str = ""

    def __post_init__(self) -> None:
        self.env["LOCKGATE_JOURNAL_URL"] = self.journal

    @property
    def journal(self) -> str:
        return f"kafka://{self.bootstrap}?topic_prefix={self.topic_prefix}{self.journal_options}"

    @property
    def topic(self) -> str:
        return f"{self.topic_prefix}.journal"

    def store(self, **options: Any) -> CompositeStore:  # type: ignore[override]
        """A fresh composite: its journal reads go to Kafka, never to another's memory."""
        store = open_store(
            self.target,
            journal=self.journal,
            lock_ttl=LOCK_TTL,
            heartbeat_interval=HEARTBEAT,
            **options,
        )
        assert isinstance(store, CompositeStore)
        return store


@pytest.fixture
def cluster(tmp_path: Path, restartable_broker: Any) -> Iterator[KafkaCluster]:
    running = KafkaCluster(
        tmp_path, server_url=shared_url(), bootstrap=restartable_broker.bootstrap
    )
    yield running
    running.close()


# -- the topic, read and folded by the test ------------------------------------------------------


@dataclass(frozen=True)
class Record:
    """One record of the journal topic, as a plain consumer reads it."""

    partition: int
    offset: int
    key: bytes | None
    headers: dict[str, str]
    value: bytes


def topic_records(bootstrap: str, topic: str, partitions: int = 1) -> list[Record]:
    """Every record of ``topic``, partition by partition, in offset order."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex, "enable.auto.commit": False}
    )
    found: list[Record] = []
    try:
        for partition in range(partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)
            if high <= low:
                continue
            consumer.assign([TopicPartition(topic, partition, low)])
            deadline = time.monotonic() + 60
            at = low
            while at < high:
                assert time.monotonic() < deadline, f"{topic}[{partition}] not read up to {high}"
                batch = consumer.consume(min(500, high - at), timeout=0.5)
                for msg in batch:
                    assert msg.error() is None, msg.error()
                    value = msg.value()
                    assert value is not None
                    headers = dict(header_map(msg.headers()))
                    found.append(Record(partition, msg.offset(), msg.key(), headers, value))
                    at = msg.offset() + 1
                if not batch:  # offsets with no record (transaction markers) show as the position
                    at = max(at, consumer.position([TopicPartition(topic, partition)])[0].offset)
    finally:
        consumer.close()
    return found


def folded(records: list[Record]) -> dict[str, list[RunEvent]]:
    """Each run's journal from the raw records: the first copy of each ``run_seq`` kept, every
    later copy checked to be the same event. Also checks that a run's records are all in one
    partition and that its ``run_seq`` numbers run 1..N with no gap (a lost record leaves one)."""
    runs: dict[str, dict[int, RunEvent]] = collections.defaultdict(dict)
    homes: dict[str, set[int]] = collections.defaultdict(set)
    for record in records:
        event = decode(record.value)
        run_id = record.headers[RUN_ID_HEADER]
        assert event.run_id == run_id, record
        assert event.run_seq is not None
        assert record.headers["lg-run-seq"] == str(event.run_seq)
        homes[run_id].add(record.partition)
        first = runs[run_id].setdefault(event.run_seq, event)
        assert first == event, f"run {run_id}: two different events for run_seq {event.run_seq}"
    journals = {}
    for run_id, by_seq in runs.items():
        assert len(homes[run_id]) == 1, f"run {run_id} in partitions {homes[run_id]}"
        assert sorted(by_seq) == list(range(1, len(by_seq) + 1)), f"run {run_id}: {sorted(by_seq)}"
        journals[run_id] = [by_seq[seq] for seq in sorted(by_seq)]
    return journals


def check_topic(cluster: KafkaCluster, store: CompositeStore, name: str, runs: Any) -> None:
    """The topic holds, for each of ``runs``, the journal the store reads, with one terminal,
    and nothing of any other run."""
    records = topic_records(cluster.bootstrap, cluster.topic, store.shard_count)
    assert {r.headers[WORKFLOW_HEADER] for r in records} == {name}
    journals = folded(records)
    assert set(journals) == set(runs)
    for run_id in runs:
        assert journals[run_id] == store.load_run(name, run_id), run_id
        assert sum(e.is_terminal for e in journals[run_id]) == 1, run_id


def reran_after_ack(cluster: KafkaCluster) -> list[Any]:
    """Step executions that came after a later step of the same run had started: the body
    only reaches step k once step k-1's completion was acknowledged (step-boundary
    durability), so one of these is an acknowledged completion the run lost."""
    reached: dict[str, int] = {}
    again = []
    for execution in cluster.executions():
        if execution.call_index < reached.get(execution.run_id, -1):
            again.append(execution)
        reached[execution.run_id] = max(reached.get(execution.run_id, -1), execution.call_index)
    return again


# -- load, Limit, and a worker killed or frozen ------------------------------------------------


def test_three_workers_finish_300_runs_across_10_keys_with_a_limit_of_three(
    cluster: KafkaCluster,
) -> None:
    store = cluster.store()
    record = cluster.tmp / "bodies.txt"
    # A lease of 6 s, not 1.5: every body is to run once, so no lease may lapse, even on a
    # machine whose cores are all busy (a lapsed lease rightly lets another worker run it).
    lease = ["--lock-ttl", "6", "--heartbeat", "1"]
    workers = [
        cluster.start(
            "--worker-id", f"w{i}", "--concurrency", "20", "--poll", "0.005", *lease, ready=False
        )
        for i in range(3)
    ]
    cluster.wait_ready()
    runs: dict[str, int] = {}
    for n in range(300):
        tenant = f"t{n % 10}"
        run_id = store.submit_run(
            "proc_limited3",
            uuid.uuid4().hex,
            {"tenant_id": tenant, "n": n, "record": str(record), "pause": 0.3},
            version="1",
            version_behavior="pinned",
            concurrency_key=tenant,
            concurrency_max=3,
        )
        runs[run_id] = n
    # 3 x 20 slots against 10 keys x 3: the gates, not the workers, bound each key.
    wait_for("all 300 runs end", all_ended(store, "proc_limited3", list(runs)), cluster, DEADLINE)
    assert all(proc.poll() is None for proc in workers), cluster.tail()
    for run_id, n in runs.items():
        _, end = completed_once(store, "proc_limited3", run_id)
        assert end.payload["result"] == n
    check_topic(cluster, store, "proc_limited3", runs)
    bodies, _ = recorded_bodies(record)
    assert sorted(body.run_id for body in bodies) == sorted(runs)  # each body ran once
    by_key: dict[str, list[Any]] = collections.defaultdict(list)
    for body in bodies:
        by_key[body.key].append(body)
    peaks = {key: max_overlap(found) for key, found in by_key.items()}
    assert max(peaks.values()) == 3, peaks  # held, and used
    shared = [
        (a, b)
        for found in by_key.values()
        for a, b in itertools.combinations(found, 2)
        if a.pid != b.pid and a.start < b.end and b.start < a.end
    ]
    assert shared, "no key's bodies ever ran in two processes at once"
    assert len({body.pid for body in bodies}) == 3  # every worker took part
    store.close()


def test_a_worker_killed_mid_step_loses_nothing_and_reruns_no_journaled_step(
    cluster: KafkaCluster,
) -> None:
    store = cluster.store()
    runs = submit_steps(store, 20, steps=3, pause=0.2)
    doomed = cluster.start("--worker-id", "doomed", "--concurrency", "4")
    wait_for(
        "the doomed worker is inside a step",
        lambda: any(e.pid == doomed.pid for e in cluster.executions()),
        cluster,
        DEADLINE,
    )
    cluster.start("--worker-id", "survivor", "--concurrency", "4")
    doomed.send_signal(signal.SIGKILL)
    wait_for("all runs end", all_ended(store, STEPS, list(runs)), cluster, DEADLINE)
    # The journals read through a fresh store (and the step bodies' done_already checks,
    # made through a second store in each worker) come from Kafka.
    assert_all_completed_once(store, cluster, runs)
    assert reran_after_ack(cluster) == []
    check_topic(cluster, store, STEPS, runs)
    requeued = [
        run_id
        for run_id in runs
        if any(e.kind == EventKind.RUN_REQUEUED for e in store.load_run(STEPS, run_id))
    ]
    assert requeued, "the killed worker held runs that had to be recovered"
    store.close()


def test_a_frozen_worker_past_its_lease_gets_none_of_its_later_writes_into_kafka(
    cluster: KafkaCluster,
) -> None:
    store = cluster.store()
    runs = submit_steps(store, 3, steps=2, pause=1.0)
    frozen = cluster.start("--worker-id", "frozen", "--concurrency", "3")
    wait_for(
        "the worker is inside the first step of every run",
        lambda: {e.run_id for e in cluster.executions() if e.pid == frozen.pid} == set(runs),
        cluster,
        DEADLINE,
    )
    frozen.send_signal(signal.SIGSTOP)
    try:
        cluster.start("--worker-id", "rescuer", "--concurrency", "3")
        wait_for("the runs end", all_ended(store, STEPS, list(runs)), cluster, DEADLINE)
    finally:
        frozen.send_signal(signal.SIGCONT)
    # Each thawed attempt finishes its step, finds its lease gone, and ends: its worker logs
    # how. By then it has tried every write it would make.
    frozen_log = cluster.tmp / "worker-0.log"
    wait_for(
        "every thawed attempt ended",
        lambda: all(
            f"run {run_id} of {STEPS}: " in frozen_log.read_text(errors="replace")
            for run_id in runs
        ),
        cluster,
        DEADLINE,
    )
    assert frozen.poll() is None, cluster.tail()
    # Read through a store that never saw the runs, and from the raw topic: the same
    # journals, one terminal each, and every step result from the rescuing claim.
    fresh = cluster.store()
    records = topic_records(cluster.bootstrap, cluster.topic, fresh.shard_count)
    journals = folded(records)
    assert set(journals) == set(runs)
    for run_id in runs:
        completed_once(fresh, STEPS, run_id)
        journal = fresh.load_run(STEPS, run_id)
        assert journals[run_id] == journal
        epochs = {e.headers.get("lg-epoch") for e in journal if e.kind == EventKind.STEP_DONE}
        assert epochs == {"2"}, f"step results from more than the rescuing claim: {journal}"
        # No record of the frozen claim's epoch came after the rescuer's first one.
        fenced = [
            int(r.headers["lg-epoch"])
            for r in records
            if r.headers[RUN_ID_HEADER] == run_id and "lg-epoch" in r.headers
        ]
        assert fenced == sorted(fenced), (run_id, fenced)
    ran = {(e.run_id, e.pid, e.call_index) for e in cluster.executions()}
    assert {(run_id, frozen.pid, 0) for run_id in runs} <= ran  # the frozen attempts ran
    assert not [e for e in cluster.executions() if e.done_already]
    store.close()
    fresh.close()


# -- the broker killed under load ----------------------------------------------------------------


#: The workers' lease in the broker tests: 8 s, so that only the broker's absence, not a
#: machine too busy to heartbeat in time (both cores loaded, the broker's JVM starting), ends
#: attempts; the outage below is longer.
BROKER_LEASE = ("--lock-ttl", "8", "--heartbeat", "1")
#: Longer than BROKER_LEASE's lease: an outage the attempts cannot wait out.
OUTAGE_S = 12.0
#: A worker's own lines (not librdkafka's) telling of a journal read or write that failed.
JOURNAL_AWAY = r"lockgate\.(worker|executor)[^\n]*Kafka (did not|failed)"


def broker_cluster(tmp_path: Path, broker: Any, journal_options: str = "") -> KafkaCluster:
    return KafkaCluster(
        tmp_path,
        server_url=shared_url(),
        bootstrap=broker.bootstrap,
        journal_options=journal_options,
    )


def assert_nothing_acknowledged_lost(
    cluster: KafkaCluster, store: CompositeStore, runs: dict[str, int]
) -> None:
    assert_all_completed_once(store, cluster, runs)  # and no step ran again once journaled
    assert reran_after_ack(cluster) == [], cluster.tail()
    check_topic(cluster, store, STEPS, runs)  # run_seq 1..N for each run: no record lost
    for run_id in runs:
        done = [
            e.payload["call_index"]
            for e in store.load_run(STEPS, run_id)
            if e.kind == EventKind.STEP_DONE
        ]
        assert sorted(done) == [0, 1], (run_id, done)


def test_a_broker_killed_and_restarted_mid_load_loses_no_acknowledged_append(
    tmp_path: Path, restartable_broker: Any
) -> None:
    cluster = broker_cluster(tmp_path, restartable_broker)
    try:
        store = cluster.store()
        runs = submit_steps(store, 60, steps=2, pause=0.05)
        for i in range(2):
            cluster.start("--worker-id", f"w{i}", "--concurrency", "4", *BROKER_LEASE, ready=False)
        cluster.wait_ready()
        wait_for("runs are under way", lambda: len(cluster.executions()) >= 10, cluster, DEADLINE)
        restartable_broker.stop(kill=True)
        restartable_broker.start()  # same port, same data directory
        wait_for("all runs end", all_ended(store, STEPS, list(runs)), cluster, DEADLINE)
        assert all(proc.poll() is None for proc in cluster.procs), cluster.tail()
        assert_nothing_acknowledged_lost(cluster, store, runs)
        store.close()
    finally:
        cluster.close()
        if restartable_broker.process is None or restartable_broker.process.poll() is not None:
            restartable_broker.start()  # up again for the module's other tests


def test_a_broker_away_longer_than_an_append_waits_puts_runs_back_and_they_complete(
    tmp_path: Path, restartable_broker: Any
) -> None:
    # Appends and reads give up after 2 s (not 30): an outage longer than that, and than a
    # lease, is an outage the attempts cannot wait out.
    cluster = broker_cluster(tmp_path, restartable_broker, "&delivery_timeout=2&read_timeout=2")
    try:
        store = cluster.store()
        runs = submit_steps(store, 40, steps=2, pause=0.05)
        for i in range(2):
            cluster.start("--worker-id", f"w{i}", "--concurrency", "4", *BROKER_LEASE, ready=False)
        cluster.wait_ready()
        wait_for("runs are under way", lambda: len(cluster.executions()) >= 10, cluster, DEADLINE)
        restartable_broker.stop(kill=True)
        logs = [cluster.tmp / f"worker-{i}.log" for i in range(2)]
        wait_for(
            "both workers found the journal away",
            # What each says as its attempts or claims meet the broker's absence (a worker
            # whose heartbeats still reach Valkey need not call the store unreachable).
            lambda: all(re.search(JOURNAL_AWAY, log.read_text(errors="replace")) for log in logs),
            cluster,
            DEADLINE,
        )
        during = len(cluster.executions())
        # Away for longer than a lease: runs must neither be claimed only to lapse nor be put
        # back again and again meanwhile.
        time.sleep(OUTAGE_S)
        restartable_broker.start()
        wait_for("all runs end", all_ended(store, STEPS, list(runs)), cluster, DEADLINE)
        assert len(cluster.executions()) > during  # the runs went on after the outage
        assert all(proc.poll() is None for proc in cluster.procs), cluster.tail()
        assert_nothing_acknowledged_lost(cluster, store, runs)
        # The attempts the outage cut short put their runs back as store_unavailable; no run
        # was claimed again while the journal was away, so no run came near
        # its budget (max_store_requeues, 20) however long the outage.
        reasons = {
            run_id: [
                e.payload["reason"]
                for e in store.load_run(STEPS, run_id)
                if e.kind == EventKind.RUN_REQUEUED
            ]
            for run_id in runs
        }
        spent = {run_id: said.count("store_unavailable") for run_id, said in reasons.items()}
        assert sum(spent.values()) >= 1, (
            {run_id: said for run_id, said in reasons.items() if said},
            cluster.tail(),
        )
        assert max(spent.values()) <= 3, spent
        # Valkey stayed up and no worker died: no lease lapsed (a claim that read the journal
        # for longer than a lease would have), so nothing was requeued as owner_gone.
        lapsed = [
            run_id
            for run_id in runs
            for e in store.load_run(STEPS, run_id)
            if e.kind == EventKind.RUN_REQUEUED and e.payload["reason"] == "owner_gone"
        ]
        assert lapsed == [], (lapsed, cluster.tail())
        store.close()
    finally:
        cluster.close()
        if restartable_broker.process is None or restartable_broker.process.poll() is not None:
            restartable_broker.start()  # up again for the module's other tests
