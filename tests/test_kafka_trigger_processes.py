"""Trigger topics served by real worker processes: events produced with kcat (a producer with
its own partitioner) become Collect runs, every event in exactly one completed run, while one
of two workers is killed with SIGKILL twice and started again."""

from __future__ import annotations

import collections
import json
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from lockgate import RunStatus
from lockgate.stores import CompositeStore
from test_kafka_processes import KafkaCluster
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
    found, cursor = [], None
    while True:
        page, cursor = store.list_runs(NAME, limit=500, cursor=cursor)
        found.extend(info.params for info in page if info.status == RunStatus.COMPLETE)
        if not cursor:
            return found


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


def test_kcat_events_across_500_keys_fire_each_once_while_a_worker_is_killed_twice(
    cluster: TriggerCluster,
) -> None:
    if shutil.which("kcat") is None:
        pytest.fail("kcat is not installed: `make kcat` installs it (apt-get, as root)")
    store = cluster.store()
    victim = cluster.worker("victim-1")
    cluster.worker("steady")
    wait_for(
        "the trigger topic exists",
        lambda: topic_ready(cluster.bootstrap, cluster.trigger_topic),
        cluster,
        60,
    )
    sent: dict[str, list[int]] = collections.defaultdict(list)
    restarts = iter(["victim-2", "victim-3"])
    for chunk in range(20):
        lines = []
        for n in range(chunk * 500, (chunk + 1) * 500):
            key = f"key{n % 500:03d}"
            sent[key].append(n)
            lines.append(f"{key}\t{json.dumps({'k': key, 'n': n})}")
        kcat_produce(cluster.bootstrap, cluster.trigger_topic, lines)
        if chunk in (6, 13):  # mid-stream, with windows open and runs in flight
            victim.send_signal(signal.SIGKILL)
            victim.wait(10)
            victim = cluster.worker(next(restarts))
        time.sleep(0.15)
    wait_for(
        "all 10,000 events are in completed runs",
        lambda: sum(p["count"] for p in completed(store)) >= 10_000,
        cluster,
        180,
    )
    time.sleep(1.5)  # a window fired twice would be in a run by now
    runs = completed(store)
    got: dict[str, list[int]] = collections.defaultdict(list)
    for params in runs:
        assert 1 <= params["count"] <= 50
        assert params["count"] == len(params["events"])
        for event in params["events"]:
            assert event["k"] == params["key"]
            got[params["key"]].append(event["n"])
    doubled = {k: v for k, v in got.items() if len(v) != len(set(v))}
    assert not doubled, f"events in two runs: {list(doubled)[:5]}"
    assert {k: sorted(v) for k, v in got.items()} == sent
    store.close()
