"""``lockgate topics create|list|describe`` as a user runs them, against the real broker: a topic
made with partitions and a retention setting is listed and described as made (its leaders, end
offsets and retention), in text and in JSON; each mistake (a topic there already, a missing
one, a bad name or setting, more replicas than brokers) exits 2 with one line, and a broker
that does not answer exits 1 with one line."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import uuid

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient


def lockgate(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("LOCKGATE_")}
    clean.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "lockgate", *args],
        env=clean,
        capture_output=True,
        text=True,
        timeout=120,
    )


def one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    """The one line a failed command printed, checked to be one, on stderr only."""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("lockgate: error: "), done.stderr
    assert "Traceback" not in done.stderr
    return lines[0]


@pytest.fixture
def journal(kafka_bootstrap: str) -> str:
    return f"kafka://{kafka_bootstrap}"


@pytest.fixture
def topic() -> str:
    return f"topics-{uuid.uuid4().hex[:8]}"


def test_a_topic_created_is_listed_and_described_as_made(
    journal: str, topic: str, kafka_bootstrap: str
) -> None:
    made = lockgate(
        *("topics", "create", topic, "--partitions", "3", "--replication-factor", "1"),
        *("--config", "retention.ms=3600000", "--config", "cleanup.policy=delete"),
        *("--journal", journal),
    )
    assert made.returncode == 0, made.stderr
    assert made.stdout.strip() == f"created topic {topic} with 3 partition(s) on {kafka_bootstrap}"

    # The journal URL from the environment, as every other command takes it.
    listed = lockgate("topics", "list", env={"LOCKGATE_JOURNAL_URL": journal})
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines()[0].split() == ["TOPIC", "PARTITIONS", "REPLICATION"]
    assert [topic, "3", "1"] in [line.split() for line in listed.stdout.splitlines()]
    assert "__consumer_offsets" not in listed.stdout
    as_json = lockgate("topics", "list", "--json", "--journal", journal)
    rows = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert {"topic": topic, "partitions": 3, "replication_factor": 1} in rows

    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for partition, count in ((0, 2), (2, 5)):
        for n in range(count):
            producer.produce(topic, value=b'{"n": %d}' % n, partition=partition)
    assert producer.flush(30) == 0

    described = lockgate("topics", "describe", topic, "--journal", journal)
    assert described.returncode == 0, described.stderr
    text = described.stdout
    assert f"topic        {topic}" in text
    assert "partitions   3" in text
    assert "retention.ms=3600000 (1 hour)" in text
    assert "settings     cleanup.policy=delete retention.ms=3600000" in text
    assert "records      7" in text
    table = [line.split() for line in text.split("\n\n", 1)[1].splitlines()]
    assert table[0] == ["PARTITION", "LEADER", "REPLICAS", "IN", "SYNC", "START", "END"]
    ends = {int(row[0]): int(row[-1]) for row in table[1:]}
    assert ends == {0: 2, 1: 0, 2: 5}
    assert all(row[1].isdigit() for row in table[1:])  # each has a leader

    shape = json.loads(lockgate("topics", "describe", topic, "--json", "--journal", journal).stdout)
    assert shape["topic"] == topic
    assert shape["replication_factor"] == 1
    assert shape["retention"]["retention.ms"] == "3600000"
    assert shape["retention"]["cleanup.policy"] == "delete"
    assert shape["config"] == {"cleanup.policy": "delete", "retention.ms": "3600000"}
    assert [p["partition"] for p in shape["partitions"]] == [0, 1, 2]
    assert [p["end"] for p in shape["partitions"]] == [2, 0, 5]
    for p in shape["partitions"]:
        assert set(p) == {"partition", "leader", "replicas", "isr", "start", "end"}
        assert isinstance(p["leader"], int)
        assert p["leader"] in p["replicas"]
        assert p["start"] == 0


def test_a_topic_there_already_exits_2_unless_if_not_exists_and_its_count_matches(
    journal: str, topic: str
) -> None:
    assert (
        lockgate("topics", "create", topic, "--partitions", "2", "--journal", journal).returncode
        == 0
    )
    again = lockgate("topics", "create", topic, "--partitions", "2", "--journal", journal)
    assert again.returncode == 2
    assert f"topic {topic!r} exists already (2 partition(s))" in one_error_line(again)
    accepted = lockgate(
        "topics", "create", topic, "--partitions", "2", "--if-not-exists", "--journal", journal
    )
    assert accepted.returncode == 0, accepted.stderr
    assert accepted.stdout.strip() == f"topic {topic} exists already with 2 partition(s)"
    other = lockgate(
        "topics", "create", topic, "--partitions", "4", "--if-not-exists", "--journal", journal
    )
    assert other.returncode == 2
    assert "with 2 partition(s), not 4" in one_error_line(other)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("create", "no such/name", "--partitions", "1"), "is not one Kafka takes"),
        (("create", "x" * 246, "--partitions", "1"), "is not one Kafka takes"),
        (("create", "{topic}", "--partitions", "0"), "--partitions must be 1 or more"),
        (("create", "{topic}", "--partitions", "1", "--config", "nosuch.setting=1"), "nosuch"),
        (("create", "{topic}", "--partitions", "1", "--config", "retention.ms=soon"), "soon"),
        (("create", "{topic}", "--partitions", "1", "--config", "retention.ms"), "KEY=VALUE"),
        (("create", "{topic}", "--partitions", "1", "--replication-factor", "9"), "replicat"),
        (("describe", "{topic}"), "does not exist"),
    ],
)
def test_a_mistake_exits_2_with_one_line_and_makes_nothing(
    journal: str, topic: str, args: tuple[str, ...], says: str
) -> None:
    done = lockgate("topics", *(a.format(topic=topic) for a in args), "--journal", journal)
    assert done.returncode == 2, done.stderr
    assert says in one_error_line(done)
    assert done.stdout == ""
    admin = AdminClient({"bootstrap.servers": journal.removeprefix("kafka://")})
    assert topic not in admin.list_topics(timeout=30).topics


def test_a_broker_that_does_not_answer_exits_1_with_one_line() -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"kafka://127.0.0.1:{port}?read_timeout=1"
    for args in (
        ("list",),
        ("describe", "orders"),
        ("create", "orders", "--partitions", "1"),
    ):
        done = lockgate("topics", *args, "--journal", url)
        assert done.returncode == 1, (args, done.stderr)
        assert f"Kafka at 127.0.0.1:{port} did not answer" in one_error_line(done)


def test_no_journal_url_exits_2_naming_both_ways_to_give_one() -> None:
    done = lockgate("topics", "list")
    assert done.returncode == 2
    line = one_error_line(done)
    assert "--journal" in line
    assert "LOCKGATE_JOURNAL_URL" in line
