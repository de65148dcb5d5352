"""Valkey flushed under load, rebuilt from the Kafka journal: worker processes on a Valkey + Kafka
composite serve a few hundred three-step runs (some behind a Limit); the Valkey server is flushed
(``FLUSHALL``) mid-load and the workers SIGKILLed; ``lockgate store rebuild`` restores the runs
from the journal topic (a second one restores nothing); restarted workers finish every run, and no
step whose completion the topic held before the rebuild runs again.

The Valkey server is one of this test's own (a ``FLUSHALL`` on the suite's shared one would
wipe other tests' namespaces); the broker is the suite's, in a topic of the test's own.
"""

from __future__ import annotations

import asyncio
import collections
import re
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis
from confluent_kafka import Consumer, TopicPartition

from lockgate import RunStatus, WorkflowClient
from lockgate.journal._events import RunEvent
from lockgate.stores import CompositeStore, open_store
from lockgate.stores.kafka._codec import RUN_ID_HEADER, WORKFLOW_HEADER, decode, header_map
from test_worker_processes import DEADLINE, PROCS, Cluster, wait_for
from valkey_server import ValkeyServer

sys.path.insert(0, str(PROCS))
import rebuild_workflows  # the workflows the workers serve, for their specs

STEPS = 3
PLAIN, GATED = 240, 60


@dataclass
class RebuildCluster(Cluster):
    """Workers on the composite: Valkey at ``server_url`` (a namespace of the test's own),
    journals in the topic ``{prefix}.journal`` of the broker at ``bootstrap``."""

    server_url: str = ""
    bootstrap: str = ""
    namespace: str = field(default_factory=lambda: f"rb{uuid.uuid4().hex[:10]}")
    prefix: str = field(default_factory=lambda: f"rbp{uuid.uuid4().hex[:10]}")

    @property
    def target(self) -> str:
        return f"{self.server_url}?namespace={self.namespace}"

    @property
    def journal(self) -> str:
        return f"kafka://{self.bootstrap}?topic_prefix={self.prefix}"

    def worker(self) -> subprocess.Popen[bytes]:
        return self.start("--journal", self.journal, "--workflows", "rebuild_workflows")

    def composite(self) -> CompositeStore:
        store = open_store(self.target, journal=self.journal, lock_ttl=1.5)
        assert isinstance(store, CompositeStore)
        return store

    def step_lines(self) -> list[tuple[str, int]]:
        """(run id, call index) of each step effect the bodies recorded, in order."""
        if not self.record.exists():
            return []
        rows = [line.split() for line in self.record.read_text().splitlines() if line]
        return [(run_id, int(index)) for run_id, index, _pid in rows]

    def rebuild(self) -> str:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "lockgate",
                "store",
                "rebuild",
                "--store",
                self.target,
                "--journal",
                self.journal,
            ],
            capture_output=True,
            text=True,
            timeout=DEADLINE,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout


@pytest.fixture
def cluster(tmp_path: Path, kafka_bootstrap: str) -> Iterator[RebuildCluster]:
    server = ValkeyServer().start()
    running = RebuildCluster(tmp_path, server_url=server.url, bootstrap=kafka_bootstrap)
    yield running
    running.close()
    server.close()


def topic_journals(cluster: RebuildCluster) -> dict[str, list[RunEvent]]:
    """Every run's journal as the topic holds it now, read with a consumer of the test's own:
    each run's records folded by ``run_seq`` (the first copy stays), oldest first."""
    topic = f"{cluster.prefix}.journal"
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": uuid.uuid4().hex,
            "enable.auto.commit": False,
        }
    )
    runs: dict[str, dict[int, RunEvent]] = collections.defaultdict(dict)
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        consumer.assign([TopicPartition(topic, 0, low)])
        seen = low
        while seen < high:
            for msg in consumer.consume(500, timeout=1):
                assert msg.error() is None
                seen = msg.offset() + 1
                headers = header_map(msg.headers())
                assert headers[WORKFLOW_HEADER].startswith("rebuild_")
                event = decode(msg.value())
                runs[headers[RUN_ID_HEADER]].setdefault(event.run_seq or 0, event)
    finally:
        consumer.close()
    return {run_id: [got[s] for s in sorted(got)] for run_id, got in runs.items()}


def acknowledged_steps(journals: dict[str, list[RunEvent]]) -> set[tuple[str, int]]:
    return {
        (run_id, int(e.payload["call_index"]))
        for run_id, events in journals.items()
        for e in events
        if e.kind == "step:done"
    }


async def submit_all(store: CompositeStore) -> dict[str, str]:
    """Queue the load; run id -> workflow."""
    client = WorkflowClient(store)
    runs = {}
    for n in range(PLAIN):
        handle = await client.submit("rebuild_steps", {"n": n, "steps": STEPS})
        runs[handle.run_id] = handle.name
    for n in range(GATED):
        params = {"tenant": f"t{n % 3}", "n": n, "steps": STEPS}
        handle = await client.submit("rebuild_gated", params)
        runs[handle.run_id] = handle.name
    return runs


def test_valkey_flushed_mid_load_is_rebuilt_and_no_acknowledged_step_runs_again(
    cluster: RebuildCluster,
) -> None:
    assert rebuild_workflows.WORKFLOWS  # the specs the submits stamp their gates from
    store = cluster.composite()
    runs = asyncio.run(submit_all(store))
    total_steps = len(runs) * STEPS
    # The gated runs' last steps wait for this file: the load outlasts the flush.
    release = cluster.tmp / "release"
    cluster.env[rebuild_workflows.HOLD_ENV] = str(release)
    cluster.worker()
    cluster.worker()
    wait_for(
        "a third of the steps ran",
        lambda: len(cluster.step_lines()) >= total_steps // 3,
        cluster,
        DEADLINE,
    )

    # Valkey loses everything under the live workers; they go on calling it for a while.
    server = redis.Redis.from_url(cluster.server_url)
    calls = server.info("stats")["total_commands_processed"]
    server.flushall()
    wait_for(
        "the workers called the emptied server",
        lambda: server.info("stats")["total_commands_processed"] > calls + 200,
        cluster,
        DEADLINE,
    )
    # No script made a run again over the missing keys (a rebuild would take it as present).
    assert not list(server.scan_iter(match=f"lg:{{{cluster.namespace}}}:r:*"))
    for proc in cluster.procs:
        proc.send_signal(signal.SIGKILL)
    for proc in cluster.procs:
        proc.wait(timeout=DEADLINE)
    before = cluster.step_lines()
    acknowledged = acknowledged_steps(topic_journals(cluster))
    assert acknowledged, "no step completion reached the topic before the flush"
    assert len(acknowledged) < total_steps, "the load ended before the flush"

    restored = cluster.rebuild()
    assert re.search(rf"^restored {len(runs)} runs: \d+ queued", restored, re.M), restored
    assert "already in the store, left as they are: 0 runs" in restored
    assert f"journal positions kept: {len(runs)}" in restored
    assert "Rate token buckets" in restored
    again = cluster.rebuild()
    assert "restored nothing" in again, again
    assert f"already in the store, left as they are: {len(runs)} runs" in again
    # What the rebuild read is the topic: every run, none with a half-made record.
    store.close()
    store = cluster.composite()
    for run_id, name in runs.items():
        info = store.get_run(name, run_id)
        assert info is not None, run_id
        assert info.status in (RunStatus.PENDING, RunStatus.COMPLETE), info

    release.touch()
    cluster.worker()
    cluster.worker()

    def all_complete() -> bool:
        return all(
            (info := store.get_run(name, run_id)) is not None and info.status.is_terminal
            for run_id, name in runs.items()
        )

    wait_for("every run ended", all_complete, cluster, DEADLINE * 2)
    for run_id, name in runs.items():
        assert store.get_run(name, run_id).status == RunStatus.COMPLETE, run_id
    after = cluster.step_lines()[len(before) :]
    again_run = [line for line in after if line in acknowledged]
    assert again_run == [], f"steps acknowledged before the rebuild ran again: {again_run[:5]}"
    journals = topic_journals(cluster)
    assert set(journals) == set(runs)
    for run_id, events in journals.items():
        terminals = [e for e in events if e.is_terminal]
        assert [e.kind for e in terminals] == ["run:complete"], run_id
        assert events[-1].is_terminal, run_id
        done = sorted(int(e.payload["call_index"]) for e in events if e.kind == "step:done")
        assert done == list(range(STEPS)), run_id
    store.close()
