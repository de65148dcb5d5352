"""``lockgate trigger`` and ``lockgate triggers status`` on a store with a Kafka journal, run in
process (``main``) against the real broker and Valkey."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from lockgate.cli._main import main
from lockgate.stores import CompositeStore
from test_kafka_triggers import SHARDS, kt_collect, kt_status, runs_of, serving, stop, until
from valkey_server import shared_url


@pytest.fixture
def urls(kafka_bootstrap: str) -> tuple[str, str]:
    store = f"{shared_url()}?namespace=kc{uuid.uuid4().hex[:8]}&shard_count={SHARDS}"
    journal = f"kafka://{kafka_bootstrap}?topic_prefix=kc{uuid.uuid4().hex[:8]}"
    return store, journal


def records_in(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex})
    try:
        return sum(
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(SHARDS)
        )
    finally:
        consumer.close()


def open_composite(urls: tuple[str, str]) -> CompositeStore:
    from lockgate import open_store

    store = open_store(urls[0], journal=urls[1])
    assert isinstance(store, CompositeStore)
    return store


def served_until(store: CompositeStore, runs: int) -> list[dict[str, Any]]:
    """Serve ``kt_collect`` in a worker here until it completed ``runs`` runs; their params."""

    async def fire() -> list[dict[str, Any]]:
        worker = await serving(store, kt_collect, worker_id=f"kc-{uuid.uuid4().hex[:6]}")
        try:
            await until(f"{runs} fired runs", lambda: len(runs_of(store, "kt_collect")) == runs)
        finally:
            await stop(worker)
        return runs_of(store, "kt_collect")

    return asyncio.run(fire())


def test_trigger_file_sends_every_event_and_a_worker_fires_them(
    urls: tuple[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    events = tmp_path / "events.jsonl"
    events.write_text("\n".join(json.dumps({"k": f"u{n % 2}", "n": n}) for n in range(10)) + "\n\n")
    argv = ["trigger", "kt_collect", "--file", str(events), "--store", urls[0]]
    assert main([*argv, "--journal", urls[1]]) == 0
    out = capsys.readouterr().out
    prefix = urls[1].rsplit("=", 1)[1]
    assert out.strip() == f"sent 10 event(s) to {prefix}.trigger.kt_collect"

    store = open_composite(urls)
    runs = served_until(store, 2)
    assert sorted((p["key"], [e["n"] for e in p["events"]]) for p in runs) == [
        ("u0", [0, 2, 4, 6, 8]),
        ("u1", [1, 3, 5, 7, 9]),
    ]
    store.close()


def test_a_bad_line_sends_nothing_and_exits_2_with_one_line(
    urls: tuple[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str], kafka_bootstrap: str
) -> None:
    events = tmp_path / "events.jsonl"
    events.write_text('{"k": "a", "n": 1}\n{"k": "a", "n": 2}\n[1, 2]\n')
    argv = ["trigger", "kt_collect", "--file", str(events), "--store", urls[0]]
    assert main([*argv, "--journal", urls[1]]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "line 3" in err[0]
    assert "nothing was sent" in err[0]
    prefix = urls[1].rsplit("=", 1)[1]
    topic = f"{prefix}.trigger.kt_collect"
    store = open_composite(urls)  # the topic may not exist yet: make it, then count
    from lockgate.streams.triggers._produce import producer_for

    producer_for(store.events).prepare(topic)  # type: ignore[arg-type]
    assert records_in(kafka_bootstrap, topic) == 0
    store.close()


def test_a_key_less_event_is_named_by_its_line_in_the_file(
    urls: tuple[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Blank lines hold no event: the second event of this file is on its line 4."""
    events = tmp_path / "events.jsonl"
    events.write_text('\n{"k": "a", "n": 1}\n\n{"n": 2}\n')
    argv = ["trigger", "kt_collect", "--file", str(events), "--store", urls[0]]
    assert main([*argv, "--journal", urls[1]]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert f"--file {events} line 4: " in line
    assert "needs its key field 'k'" in line
    assert "event 2" not in line
    assert "nothing was sent" in line


def test_a_send_cut_short_says_from_which_line_to_send_the_rest(
    urls: tuple[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str], kafka_bootstrap: str
) -> None:
    """The trigger topic takes records of 100 kB at most: the first batch (1,000 events) is
    acknowledged, the next holds one too big, which the broker refuses. Blank lines hold no
    event, so the first event not sent is on line 1003, not the 1001st line."""
    from confluent_kafka.admin import AdminClient, NewTopic

    prefix = urls[1].rsplit("=", 1)[1]
    topic = f"{prefix}.trigger.kt_collect"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    small = NewTopic(topic, SHARDS, 1, config={"max.message.bytes": "100000"})
    admin.create_topics([small])[topic].result(timeout=30)
    lines = ["", *(json.dumps({"k": "a", "n": n}) for n in range(1000)), ""]
    lines += [json.dumps({"k": "a", "big": "x" * 200_000}), json.dumps({"k": "a", "n": -1})]
    events = tmp_path / "events.jsonl"
    events.write_text("\n".join(lines) + "\n")
    argv = ["trigger", "kt_collect", "--file", str(events), "--store", urls[0]]
    assert main([*argv, "--journal", urls[1]]) == 1
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.endswith(
        f"; 1000 of 1002 event(s) were sent before it: send the rest, from line 1003 of {events} on"
    ), line
    assert records_in(kafka_bootstrap, topic) >= 1000


def test_trigger_key_overrides_the_resolved_key(
    urls: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["trigger", "kt_collect", "--event", '{"n": 1}', "--key", "chosen"]
    assert main([*argv, "--store", urls[0], "--journal", urls[1]]) == 0
    assert capsys.readouterr().out.strip() == "sent"
    store = open_composite(urls)
    [params] = served_until(store, 1)
    assert params["key"] == "chosen"
    assert params["events"] == [{"n": 1}]
    store.close()


def test_triggers_status_prints_each_partition_and_its_open_windows(
    urls: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    store = open_composite(urls)

    async def status() -> tuple[int, str]:
        worker = await serving(store, kt_status, worker_id="kc-owner")
        try:
            from lockgate import WorkflowClient

            await WorkflowClient(store).trigger_many(
                "kt_status", [{"k": "x", "n": 1}, {"k": "x", "n": 2}]
            )
            argv = ["triggers", "status", "kt_status", "--store", urls[0], "--journal", urls[1]]
            deadline = time.monotonic() + 30
            while True:  # the command as a shell runs it: outside this loop, on a thread
                code = await asyncio.to_thread(main, argv)
                text = capsys.readouterr().out
                if code == 0 and "x: 2 event(s)" in text and "owner kc-owner" in text:
                    return code, text
                assert time.monotonic() < deadline, f"the window not in the status: {text}"
                await asyncio.sleep(0.2)
        finally:
            await stop(worker)

    code, text = asyncio.run(status())
    assert code == 0
    lines = text.splitlines()
    assert [line.split(":")[0] for line in lines if line.startswith("partition")] == [
        f"partition {p}" for p in range(SHARDS)
    ]
    assert "1 open window(s)" in text
    store.close()


def test_triggers_status_without_a_journal_exits_2_with_one_line(
    urls: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["triggers", "status", "kt_status", "--store", urls[0]]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "needs a Kafka journal" in err[0]
