"""A bound workflow's topic seen from a shell, with real ``lockgate worker`` processes on Valkey
and a Kafka journal: a worker serving a workflow bound to a topic that does not exist exits 2
at once with one line naming the ``lockgate topics create`` command, and serves once that
command made it; ``lockgate bound status`` shows each partition's owner while the worker runs,
its runs in flight and waiting, the records dead-lettered (a value that is not JSON), and a lag
of 0 once the records are read."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from test_kafka_bound_poison_processes import produce
from test_kafka_bound_processes import BoundCluster, assigned
from test_worker_processes import PROCS, wait_for
from valkey_server import shared_url

PARTITIONS = 2
WORKER_ID = re.compile(r"worker (\S+) serving bound_held")


@pytest.fixture
def cluster(tmp_path: Path, kafka_bootstrap: str) -> Iterator[BoundCluster]:
    running = BoundCluster(
        tmp_path,
        server_url=shared_url(),
        bootstrap=kafka_bootstrap,
        bound_topic=f"status-{uuid.uuid4().hex[:8]}",
    )
    yield running
    running.close()


def lockgate(cluster: BoundCluster, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOCKGATE_")}
    env["LOCKGATE_TEST_BOUND_TOPIC"] = cluster.bound_topic
    return subprocess.run(
        [sys.executable, "-m", "lockgate", *args],
        cwd=PROCS,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def status(cluster: BoundCluster, *extra: str) -> list[dict[str, Any]]:
    done = lockgate(
        cluster,
        *("bound", "status", "bound_held", "--json"),
        *("--store", cluster.target, "--journal", cluster.journal, *extra),
    )
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_a_worker_bound_to_a_missing_topic_exits_2_naming_the_command_that_creates_it(
    cluster: BoundCluster,
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOCKGATE_")}
    env.update(LOCKGATE_TEST_BOUND_TOPIC=cluster.bound_topic, LOCKGATE_TEST_RECORD="unused")
    command = [
        *(sys.executable, "-m", "lockgate", "worker", "bound_workflows:held"),
        *("--store", cluster.worker_store, "--journal", cluster.journal, "--health-port", "0"),
    ]
    worker = subprocess.Popen(
        command, cwd=PROCS, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        _, stderr = worker.communicate(timeout=90)  # it does not wait for the topic
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(10)
    assert worker.returncode == 2, stderr
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    topic = cluster.bound_topic
    create = f"lockgate topics create {topic} --partitions N --journal kafka://{cluster.bootstrap}"
    assert lines[0].startswith(
        f"lockgate: error: topic {topic!r} does not exist: create it with `{create}`"
    ), lines[0]
    assert "bound_held" in lines[0]

    # The command it names, with N filled in, makes a topic the worker serves.
    made = lockgate(cluster, *create.replace(" N ", f" {PARTITIONS} ").split()[1:])
    assert made.returncode == 0, made.stderr
    cluster.worker("held")
    wait_for("both partitions assigned", lambda: assigned(cluster, PARTITIONS), cluster, 60)


def test_bound_status_shows_owners_runs_in_flight_and_waiting_dead_letters_and_lag(
    cluster: BoundCluster,
) -> None:
    made = lockgate(
        cluster,
        *("topics", "create", cluster.bound_topic, "--partitions", str(PARTITIONS)),
        *("--journal", cluster.journal),
    )
    assert made.returncode == 0, made.stderr
    cluster.worker("held")
    wait_for("both partitions assigned", lambda: assigned(cluster, PARTITIONS), cluster, 60)
    found = WORKER_ID.search((cluster.tmp / "worker-0.log").read_text())
    assert found is not None
    worker_id = found.group(1)

    records = [
        (0, json.dumps({"n": 0}).encode()),
        (0, json.dumps({"hold": True}).encode()),  # in flight until released
        (1, json.dumps({"n": 1}).encode()),
        (1, json.dumps({"nap": 600}).encode()),  # waiting, asleep
        (1, b"this is not JSON"),  # dead-lettered
        (1, json.dumps({"n": 2}).encode()),
    ]
    produce(cluster.bootstrap, cluster.bound_topic, records)

    def settled() -> bool:
        rows = {r["partition"]: r for r in status(cluster)}
        return (
            rows[0]["in_flight"] == 1
            and rows[1]["waiting"] == 1
            and rows[1]["dead_lettered"] == 1
            and rows[0]["lag"] == rows[1]["lag"] == 0
        )

    wait_for("a run in flight, one waiting, one dead letter", settled, cluster, 90)
    rows = status(cluster)
    assert [r["partition"] for r in rows] == [0, 1]
    for row in rows:
        assert set(row) == {
            *("partition", "owner", "committed", "end", "lag", "in_flight", "waiting"),
            *("dead_lettered", "runs_cut", "dead_lettered_cut"),
        }
        assert row["owner"] == worker_id  # owned while the worker runs
        assert row["runs_cut"] is False
        assert row["dead_lettered_cut"] is False
    zero, one = rows
    assert (zero["end"], zero["committed"], zero["lag"]) == (2, 2, 0)
    assert (one["end"], one["committed"], one["lag"]) == (4, 4, 0)
    assert (zero["in_flight"], zero["waiting"], zero["dead_lettered"]) == (1, 0, 0)
    assert (one["in_flight"], one["waiting"], one["dead_lettered"]) == (0, 1, 1)

    # The text form, by name alone (the worker recorded the topic), says the same.
    text = lockgate(
        cluster,
        *("bound", "status", "bound_held", "--store", cluster.target, "--journal", cluster.journal),
    )
    assert text.returncode == 0, text.stderr
    assert text.stdout.splitlines() == [
        f"partition 0: owner {worker_id}, committed 2, end 2, lag 0, 1 in flight, 0 waiting, "
        "0 dead-lettered",
        f"partition 1: owner {worker_id}, committed 4, end 4, lag 0, 0 in flight, 1 waiting, "
        "1 dead-lettered",
    ]

    # A bound on the runs read says so when it is hit.
    cut = lockgate(
        cluster,
        *("bound", "status", "bound_held", "--store", cluster.target, "--journal", cluster.journal),
        "--most-runs",
        "1",
    )
    assert cut.returncode == 0, cut.stderr
    assert "counted among the newest 1 runs of bound_held only" in cut.stdout
    assert all(r["runs_cut"] for r in status(cluster, "--most-runs", "1"))

    (cluster.record.parent / f"{cluster.record.name}.release").touch()

    def released() -> bool:
        rows = {r["partition"]: r for r in status(cluster)}
        return rows[0]["in_flight"] == 0 and rows[0]["waiting"] == 0

    wait_for("the held run finished", released, cluster, 60)
    zero, one = status(cluster)
    assert (zero["lag"], one["lag"]) == (0, 0)
    assert one["waiting"] == 1  # still asleep
    assert one["dead_lettered"] == 1

    # Once the worker is gone (its session lapsed), nobody owns the partitions.
    cluster.kill(cluster.procs[0])
    deadline = time.monotonic() + 90
    while any(r["owner"] is not None for r in status(cluster)):
        assert time.monotonic() < deadline, "the killed worker still owns a partition"
        time.sleep(0.5)


def test_bound_status_of_a_workflow_bound_to_no_topic_or_without_a_journal_exits_2(
    cluster: BoundCluster,
) -> None:
    done = lockgate(
        cluster,
        *("bound", "status", "bound_held", "--app", "bound_workflows", "--store", cluster.target),
    )
    assert done.returncode == 2
    assert done.stderr.startswith("lockgate: error: bound status needs a Kafka journal")
    missing = lockgate(
        cluster,
        *("bound", "status", "bound_held", "--app", "bound_workflows"),
        *("--store", cluster.target, "--journal", cluster.journal),
    )
    assert missing.returncode == 2
    lines = missing.stderr.splitlines()
    assert len(lines) == 1, missing.stderr
    assert (
        f"topic {cluster.bound_topic!r} does not exist: create it with `lockgate topics" in lines[0]
    )
