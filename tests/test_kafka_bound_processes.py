"""Bound topics served by real ``lockgate worker MODULE --store URL --journal URL`` processes:
records produced with kcat (a producer with its own partitioner) become one completed run
each while one of two workers is killed with SIGKILL twice and started again, and while the
broker is killed and started again; with ``ordered``, each partition's runs start in offset
order, one after another, across a worker kill."""

from __future__ import annotations

import collections
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from lockgate import RunStatus
from lockgate.streams.bound import bound_run_id
from test_kafka_processes import KafkaCluster
from test_kafka_trigger_processes import kcat_produce
from test_kafka_triggers import every_run
from test_worker_processes import HEARTBEAT, LOCK_TTL, PROCS, readyz, wait_for
from valkey_server import shared_url

SHARDS = 4
HEALTH = re.compile(rb"health (?:endpoint )?on http://127\.0\.0\.1:(\d+)")


@dataclass
class BoundCluster(KafkaCluster):
    """``lockgate worker`` processes serving one of ``procs/bound_workflows``' workflows."""

    bound_topic: str = ""

    @property
    def target(self) -> str:
        return f"{super().target}&shard_count={SHARDS}"

    @property
    def worker_store(self) -> str:
        """The workers' ``--store``: short leases, so a killed worker's runs move on soon."""
        return f"{self.target}&lock_ttl={LOCK_TTL}&heartbeat_interval={HEARTBEAT}"

    def worker(self, served: str) -> subprocess.Popen[bytes]:
        """A worker process serving ``bound_workflows:{served}``, once it is ready."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("LOCKGATE_")}
        env.update(
            LOCKGATE_TEST_BOUND_TOPIC=self.bound_topic, LOCKGATE_TEST_RECORD=str(self.record)
        )
        log_path = self.tmp / f"worker-{len(self.procs)}.log"
        log = log_path.open("wb")
        self.logs.append(log)
        command = [
            *("worker", f"bound_workflows:{served}", "--store", self.worker_store),
            *("--journal", self.journal, "--health-port", "0", "--concurrency", "32"),
            *("--poll-interval", "0.02", "--orphan-scan-interval", "0.25"),
            *("--log-level", "info"),
        ]
        proc = subprocess.Popen(
            [sys.executable, "-m", "lockgate", *command],
            cwd=PROCS,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        self.procs.append(proc)

        def ready() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"worker {proc.pid} exited\n{self.tail()}")
            found = HEALTH.search(log_path.read_bytes())
            return found is not None and readyz(int(found.group(1))) == 200

        wait_for(f"worker {proc.pid} is ready", ready, self, 60)
        return proc

    def kill(self, proc: subprocess.Popen[bytes]) -> None:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)


@pytest.fixture
def cluster(tmp_path: Path, kafka_bootstrap: str) -> Iterator[BoundCluster]:
    running = BoundCluster(
        tmp_path,
        server_url=shared_url(),
        bootstrap=kafka_bootstrap,
        bound_topic=f"bound-{uuid.uuid4().hex[:8]}",
    )
    yield running
    running.close()


def make_topic(cluster: BoundCluster, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(cluster.bound_topic, partitions, 1)])[cluster.bound_topic].result(
        timeout=30
    )


def assigned(cluster: BoundCluster, count: int) -> bool:
    """Whether the workers' logs say, between them, that every partition was assigned."""
    text = "\n".join(
        (cluster.tmp / f"worker-{i}.log").read_text(errors="replace")
        for i in range(len(cluster.procs))
    )
    found = re.findall(
        rf"bound topic {cluster.bound_topic}: partition\(s\) \[([0-9, ]+)\] assigned", text
    )
    return {int(p) for group in found for p in group.split(",")} == set(range(count))


def test_kcat_records_on_8_partitions_complete_one_run_each_while_a_worker_is_killed_twice(
    cluster: BoundCluster,
) -> None:
    make_topic(cluster, 8)
    store = cluster.store()
    victim = cluster.worker("plain")
    cluster.worker("plain")
    wait_for("the group owns all 8 partitions", lambda: assigned(cluster, 8), cluster, 60)
    restarts = 0
    for chunk in range(10):
        lines = [
            f"k{n % 97}\t{json.dumps({'n': n})}" for n in range(chunk * 500, (chunk + 1) * 500)
        ]
        kcat_produce(cluster.bootstrap, cluster.bound_topic, lines)
        if chunk in (3, 6):  # mid-stream, with runs in flight and commits behind them
            cluster.kill(victim)
            victim = cluster.worker("plain")
            restarts += 1
        time.sleep(0.1)
    assert restarts == 2

    def complete() -> int:
        return sum(1 for r in every_run(store, "bound_plain") if r.status == RunStatus.COMPLETE)

    wait_for("5,000 runs completed", lambda: complete() >= 5000, cluster, 300)
    time.sleep(1.0)  # a second run of a record read again would be made by now
    runs = every_run(store, "bound_plain")
    assert len(runs) == 5000, f"{len(runs)} runs for 5,000 records"
    assert all(r.status == RunStatus.COMPLETE for r in runs)
    ns = sorted(r.params["value"]["n"] for r in runs)
    assert ns == list(range(5000))
    for run in runs:
        meta = run.metadata["lockgate.record"]
        assert run.run_id == bound_run_id(cluster.bound_topic, meta["partition"], meta["offset"])
    partitions = collections.Counter(r.metadata["lockgate.record"]["partition"] for r in runs)
    assert set(partitions) == set(range(8))  # kcat's partitioner spread the keys
    store.close()


def timeline(cluster: BoundCluster) -> list[tuple[int, int, str]]:
    """(partition, offset, "start" or "end") of each attempt's start and end, in order."""
    if not cluster.record.exists():
        return []
    lines = cluster.record.read_text().splitlines()
    return [(int(p), int(o), what) for p, o, _, what in (line.split() for line in lines if line)]


def test_ordered_partitions_start_their_runs_in_offset_order_across_a_worker_kill(
    cluster: BoundCluster,
) -> None:
    make_topic(cluster, 4)
    store = cluster.store()
    victim = cluster.worker("ordered")
    cluster.worker("ordered")
    wait_for("the group owns all 4 partitions", lambda: assigned(cluster, 4), cluster, 60)
    lines = [f"k{n % 13}\t{json.dumps({'n': n})}" for n in range(400)]
    kcat_produce(cluster.bootstrap, cluster.bound_topic, lines)
    wait_for("100 runs started", lambda: len(timeline(cluster)) >= 200, cluster, 120)
    cluster.kill(victim)
    cluster.worker("ordered")

    def complete() -> int:
        return sum(1 for r in every_run(store, "bound_ordered") if r.status == RunStatus.COMPLETE)

    wait_for("400 runs completed", lambda: complete() >= 400, cluster, 300)
    runs = every_run(store, "bound_ordered")
    assert len(runs) == 400
    expected: dict[int, list[int]] = collections.defaultdict(list)
    for run in runs:
        meta = run.metadata["lockgate.record"]
        expected[meta["partition"]].append(meta["offset"])
    by_partition: dict[int, list[tuple[int, str]]] = collections.defaultdict(list)
    for partition, offset, what in timeline(cluster):
        by_partition[partition].append((offset, what))
    for partition, events in by_partition.items():
        first_starts: list[int] = []
        ended: set[int] = set()
        for offset, what in events:
            if what == "end":
                ended.add(offset)
            elif offset not in first_starts:
                # A run starts only once the one before it in the partition has ended (an
                # attempt killed mid-run starts again, and the next waits for its end).
                assert not first_starts or first_starts[-1] in ended, (partition, offset)
                first_starts.append(offset)
        assert first_starts == sorted(expected[partition]), f"partition {partition} out of order"
    store.close()


def test_a_broker_killed_and_restarted_mid_stream_loses_and_doubles_no_run(
    tmp_path: Path, restartable_broker: Any
) -> None:
    cluster = BoundCluster(
        tmp_path,
        server_url=shared_url(),
        bootstrap=restartable_broker.bootstrap,
        bound_topic=f"bound-{uuid.uuid4().hex[:8]}",
    )
    try:
        make_topic(cluster, 4)
        store = cluster.store()
        cluster.worker("plain")
        cluster.worker("plain")
        wait_for("the group owns all 4 partitions", lambda: assigned(cluster, 4), cluster, 60)
        lines = [f"k{n % 31}\t{json.dumps({'n': n})}" for n in range(1000)]
        kcat_produce(cluster.bootstrap, cluster.bound_topic, lines)
        restartable_broker.stop(kill=True)
        restartable_broker.start()  # same port, same data directory
        lines = [f"k{n % 31}\t{json.dumps({'n': n})}" for n in range(1000, 2000)]
        kcat_produce(cluster.bootstrap, cluster.bound_topic, lines)

        def complete() -> int:
            runs = every_run(store, "bound_plain")
            return sum(1 for r in runs if r.status == RunStatus.COMPLETE)

        wait_for("2,000 runs completed", lambda: complete() >= 2000, cluster, 300)
        time.sleep(1.0)  # a second run of a record read again would be made by now
        runs = every_run(store, "bound_plain")
        assert sorted(r.params["value"]["n"] for r in runs) == list(range(2000))
        assert all(proc.poll() is None for proc in cluster.procs), cluster.tail()
        store.close()
    finally:
        cluster.close()
        if restartable_broker.process is None or restartable_broker.process.poll() is not None:
            restartable_broker.start()  # up again for the session's other tests
