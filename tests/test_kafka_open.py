"""open_store(..., journal="kafka://...") and the CLI's --journal: a Valkey store's journals
kept in Kafka, and a journal URL refused (exit 2, one line) with any other store."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from lockgate import ConfigurationError, open_store
from lockgate.cli import main
from lockgate.stores import CompositeStore, KafkaEventLogStore, ValkeyLifecycleStore
from test_cli import _module, _one_error_line, enter_home
from valkey_server import shared_url


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.delenv("LOCKGATE_JOURNAL_URL", raising=False)
    yield from enter_home(tmp_path, monkeypatch)


def _valkey() -> str:
    return f"{shared_url()}?namespace=kj{uuid.uuid4().hex[:10]}"


def test_a_kafka_journal_url_makes_a_composite_partitioned_as_the_store_is_sharded(
    kafka_bootstrap: str, home: Path
) -> None:
    prefix = f"o{uuid.uuid4().hex[:10]}"
    store = open_store(
        f"{_valkey()}&shard_count=3", journal=f"kafka://{kafka_bootstrap}?topic_prefix={prefix}"
    )
    try:
        assert isinstance(store, CompositeStore)
        assert isinstance(store.lifecycle, ValkeyLifecycleStore)
        assert isinstance(store.events, KafkaEventLogStore)
        assert store.events.topic == f"{prefix}.journal"
        topics = AdminClient({"bootstrap.servers": kafka_bootstrap}).list_topics(timeout=10)
        assert len(topics.topics[f"{prefix}.journal"].partitions) == 3
    finally:
        store.close()


def test_the_cli_keeps_a_submitted_runs_journal_in_kafka(
    kafka_bootstrap: str, home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    prefix = f"c{uuid.uuid4().hex[:10]}"
    flags = ["--store", _valkey(), "--journal", f"kafka://{kafka_bootstrap}?topic_prefix={prefix}"]
    module = _module()
    name = f"{module}_adder"
    submit = ["submit", name, "--params", '{"a": 1, "b": 2}', "--app", module]
    assert main([*submit, *flags]) == 0
    run_id = capsys.readouterr().out.strip().splitlines()[-1].split()[-1]
    assert main(["runs", "show", name, run_id, "--json", *flags]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["run"]["run_id"] == run_id
    # Another store on the topic alone reads the run's journal from Kafka.
    log = KafkaEventLogStore(kafka_bootstrap, topic_prefix=prefix)
    assert [event.kind for event in log.load_run(name, run_id)] == ["run:init"]
    log.close()


def test_the_environment_names_the_journal(
    kafka_bootstrap: str, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    prefix = f"e{uuid.uuid4().hex[:10]}"
    monkeypatch.setenv("LOCKGATE_JOURNAL_URL", f"kafka://{kafka_bootstrap}?topic_prefix={prefix}")
    store = open_store(_valkey())
    try:
        assert isinstance(store, CompositeStore)
        assert isinstance(store.events, KafkaEventLogStore)
        assert store.events.topic == f"{prefix}.journal"
    finally:
        store.close()


@pytest.mark.parametrize("url", ["sqlite:///j.db", "memory://"])
def test_a_journal_url_with_a_sqlite_or_memory_store_is_refused(home: Path, url: str) -> None:
    with pytest.raises(ConfigurationError, match="keeps the journals of a Valkey store"):
        open_store(url, journal="kafka://127.0.0.1:9092", allow_memory=True)
    assert not (home / "j.db").exists()


@pytest.mark.parametrize(
    "journal",
    ["sqlite:///x.db", "kafka://", "kafka://127.0.0.1:9092/topic", "127.0.0.1:9092"],
)
def test_a_journal_url_that_is_not_kafka_host_port_is_refused(home: Path, journal: str) -> None:
    with pytest.raises(ConfigurationError, match=r"journal URL|no scheme"):
        open_store(_valkey(), journal=journal)


def test_a_journal_url_option_the_log_does_not_take_is_refused(
    kafka_bootstrap: str, home: Path
) -> None:
    with pytest.raises(ConfigurationError, match="kafka store takes no option 'topic'"):
        open_store(_valkey(), journal=f"kafka://{kafka_bootstrap}?topic=x")


@pytest.mark.parametrize(
    "argv",
    [
        ["runs", "list", "wf"],
        ["runs", "show", "wf", "r1"],
        ["submit", "wf"],
        ["store", "info"],
        ["worker", "MODULE"],
    ],
)
def test_the_cli_refuses_a_journal_with_an_sqlite_store_exit_2(
    home: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    argv = [_module() if arg == "MODULE" else arg for arg in argv]
    code = main([*argv, "--store", "sqlite:///other.db", "--journal", "kafka://127.0.0.1:9092"])
    assert code == 2
    assert "keeps the journals of a Valkey store" in _one_error_line(capsys.readouterr().err)
    assert not (home / "other.db").exists()  # refused before any store is opened or made
