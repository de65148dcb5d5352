"""Replaying the Kafka journal topic (``replay_journal``, ``KafkaEventLogStore.replay`` and
``lockgate journal replay``) on the suite's real broker: runs driven through a Valkey + Kafka
composite come back as ``load_run`` returns them; positions and filters select; copies of the
same records fold once; bad positions, bad records and an unreachable broker are typed errors
(the CLI: one line, exit 2, or 1 for a broker that does not answer)."""

from __future__ import annotations

import asyncio
import json
import os
import random
import subprocess
import sys
import uuid
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic, TopicPartition
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lockgate import (
    InlineWorkflowRunner,
    JournalPositionError,
    JournalRecord,
    JournalRecordUndecodable,
    JournalReplay,
    ManualClock,
    RunEvent,
    SchemaVersionMismatch,
    StoreProtocolError,
    StoreUnavailable,
    WorkflowContext,
    replay_journal,
    step,
    workflow,
)
from lockgate.journal._events import EPOCH_HEADER
from lockgate.stores import CompositeStore, KafkaEventLogStore, ValkeyLifecycleStore
from lockgate.stores.kafka._codec import encode, record_headers
from valkey_server import shared_url

SHARDS = 3
SRC = Path(__file__).resolve().parents[1] / "src"


@step(name="kr_add")
async def add(a: int, b: int) -> int:
    return a + b


@workflow(name="kr_sum")
async def summed(ctx: WorkflowContext, n: int) -> int:
    total = 0
    for i in range(n):
        total = await add(total, i)
    return total


@workflow(name="kr_nap")
async def nap(ctx: WorkflowContext, n: int) -> int:
    first = await add(n, 1)
    await ctx.sleep(3600)
    return first


@workflow(name="kr_wait")
async def waiting(ctx: WorkflowContext, n: int) -> object:
    return await ctx.wait_for_signal("go")


@dataclass
class Topic:
    store: CompositeStore
    bootstrap: str
    prefix: str
    runs: dict[str, list[tuple[str, str]]]  # workflow -> [(workflow, run_id)]

    @property
    def url(self) -> str:
        return f"kafka://{self.bootstrap}?topic_prefix={self.prefix}&read_timeout=5"

    @property
    def events(self) -> KafkaEventLogStore:
        log = self.store.events
        assert isinstance(log, KafkaEventLogStore)
        return log

    def journal(self, workflow: str, run_id: str) -> list[RunEvent]:
        return self.store.load_run(workflow, run_id)


def _composite(bootstrap: str, clock: ManualClock, prefix: str) -> CompositeStore:
    lifecycle = ValkeyLifecycleStore(
        shared_url(), namespace=f"kr{uuid.uuid4().hex[:10]}", clock=clock, shard_count=SHARDS
    )
    events = KafkaEventLogStore(bootstrap, topic_prefix=prefix, shard_count=SHARDS)
    return CompositeStore(lifecycle=lifecycle, events=events)


@pytest.fixture(scope="module")
def topic(kafka_bootstrap: str) -> Iterator[Topic]:
    """Runs of three workflows driven on a composite: six complete, two sleeping, one waiting
    for a signal."""
    clock = ManualClock()
    prefix = f"kr{uuid.uuid4().hex[:10]}"
    store = _composite(kafka_bootstrap, clock, prefix)
    runs = asyncio.run(_drive(store, clock))
    yield Topic(store, kafka_bootstrap, prefix, runs)
    store.close()


async def _drive(store: CompositeStore, clock: ManualClock) -> dict[str, list[tuple[str, str]]]:
    runner = InlineWorkflowRunner(store=store, clock=clock)
    await runner.start()
    runs: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for name, n, count in (("kr_sum", 3, 6), ("kr_nap", 1, 2), ("kr_wait", 0, 1)):
        for i in range(count):
            handle = await runner.client.submit(name, {"n": n + i})
            runs[name].append((name, handle.run_id))
    for name, run_ids in runs.items():
        for _name, run_id in run_ids:
            await runner.run(name, run_id)
    await runner.aclose()
    return dict(runs)


def _by_run(records: list[JournalRecord]) -> dict[tuple[str, str], list[RunEvent]]:
    grouped: dict[tuple[str, str], list[RunEvent]] = defaultdict(list)
    for record in records:
        grouped[(record.workflow, record.run_id)].append(record.event)
    return dict(grouped)


def _all_runs(topic: Topic) -> list[tuple[str, str]]:
    return [run for runs in topic.runs.values() for run in runs]


def test_replay_yields_every_runs_journal_as_load_run_returns_it(topic: Topic) -> None:
    with replay_journal(topic.url) as replay:
        records = list(replay)
    assert _by_run(records) == {run: topic.journal(*run) for run in _all_runs(topic)}
    for record in records:
        assert record.kind == record.event.kind
        assert record.run_seq == record.event.run_seq
        assert record.payload == record.event.payload
        assert record.epoch == (
            int(record.event.headers[EPOCH_HEADER])
            if EPOCH_HEADER in record.event.headers
            else None
        )
        assert record.timestamp is not None
        assert record.timestamp.tzinfo is not None
    # Each partition's records in offset order; every run in one partition.
    for partition in range(SHARDS):
        offsets = [r.offset for r in records if r.partition == partition]
        assert offsets == sorted(offsets)
    assert all(
        len({r.partition for r in records if r.run_id == run}) == 1 for _, run in _all_runs(topic)
    )
    summary = replay.summary
    assert summary.runs == {"complete": 6, "sleeping": 2, "signal_waiting": 1}
    assert summary.events == len(records) == summary.records
    assert (summary.duplicates, summary.stale, summary.filtered) == (0, 0, 0)
    assert summary.line().startswith(
        f"replayed {len(records)} events of 9 runs (folded 0 duplicates)"
    )


def test_the_store_replays_its_own_topic(topic: Topic) -> None:
    wanted = topic.runs["kr_sum"][0]
    with topic.events.replay(run_id=wanted[1]) as replay:
        assert [r.event for r in replay] == topic.journal(*wanted)
    assert replay.summary.filtered > 0
    assert replay.summary.run_count == 1


def _by_partition(records: list[JournalRecord]) -> dict[int, list[JournalRecord]]:
    grouped: dict[int, list[JournalRecord]] = defaultdict(list)
    for record in records:
        grouped[record.partition].append(record)
    return dict(grouped)


def test_partition_and_offsets_select_what_is_read(topic: Topic) -> None:
    with replay_journal(topic.url) as replay:
        everything = list(replay)
    busiest = max(range(SHARDS), key=lambda p: sum(r.partition == p for r in everything))
    own = [r for r in everything if r.partition == busiest]
    with replay_journal(topic.url, partition=busiest) as replay:
        assert list(replay) == own
    low, high = own[1].offset, own[-2].offset
    with replay_journal(topic.url, partition=busiest, from_offset=low, until_offset=high) as replay:
        got = list(replay)
    # until_offset is the end offset, exclusive.
    assert got == [r for r in own if low <= r.offset < high]
    with replay_journal(topic.url, from_offset=1) as replay:
        # In offset order within each partition; partitions interleave as Kafka hands them.
        assert _by_partition(list(replay)) == _by_partition(
            [r for r in everything if r.offset >= 1]
        )
    with replay_journal(topic.url, partition=busiest, until_offset=10**9) as replay:
        assert list(replay) == own  # never beyond the high watermark: it ends
    with replay_journal(
        topic.url, partition=busiest, from_offset=high, until_offset=high
    ) as replay:
        assert list(replay) == []


def test_workflow_and_run_filters(topic: Topic) -> None:
    with replay_journal(topic.url, workflow="kr_nap") as replay:
        got = _by_run(list(replay))
    assert got == {run: topic.journal(*run) for run in topic.runs["kr_nap"]}
    assert replay.summary.runs == {"sleeping": 2}
    assert replay.summary.filtered == replay.summary.records - replay.summary.events > 0
    run = topic.runs["kr_sum"][2]
    with replay_journal(topic.url, workflow="kr_sum", run_id=run[1]) as replay:
        assert _by_run(list(replay)) == {run: topic.journal(*run)}
    with replay_journal(topic.url, workflow="kr_nap", run_id=run[1]) as replay:
        assert list(replay) == []


# -- copies made by hand: duplicates, stale epochs, times, bad records ----------------------------


def _fresh_topic(bootstrap: str, partitions: int = 1) -> str:
    prefix = f"krh{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(f"{prefix}.journal", partitions, 1)])[f"{prefix}.journal"].result(
        30
    )
    return prefix


def _produce(
    bootstrap: str,
    prefix: str,
    records: list[tuple[str, RunEvent]],
    *,
    partition: int = 0,
    timestamp: int | None = None,
) -> None:
    """The records as a retrying producer or a second copier would write them: the store's
    encoding and headers, with a plain producer."""
    producer = Producer({"bootstrap.servers": bootstrap})
    for name, event in records:
        extra = {"timestamp": timestamp} if timestamp is not None else {}
        producer.produce(
            f"{prefix}.journal",
            value=encode(event),
            key=event.run_id.encode(),
            partition=partition,
            headers=record_headers(name, event),
            **extra,
        )
    assert producer.flush(30) == 0


def _journal(run_id: str, steps: int, epoch: int = 1) -> list[RunEvent]:
    init = RunEvent("run:init", {"name": "wf", "params": {"n": steps}}, run_id, run_seq=1)
    fenced = {EPOCH_HEADER: str(epoch)}
    body = [
        RunEvent(
            "step:done", {"call_index": i, "result": i * i}, run_id, run_seq=i + 2, headers=fenced
        )
        for i in range(steps)
    ]
    end = RunEvent("run:complete", {"result": steps}, run_id, run_seq=steps + 2, headers=fenced)
    return [init, *body, end]


def test_records_produced_twice_fold_once(kafka_bootstrap: str) -> None:
    prefix = _fresh_topic(kafka_bootstrap)
    journal = _journal("r-dup", 3)
    copies = [("wf", e) for e in journal]
    _produce(kafka_bootstrap, prefix, copies)
    _produce(kafka_bootstrap, prefix, copies)  # the whole journal again, as a retry would
    with replay_journal(f"kafka://{kafka_bootstrap}?topic_prefix={prefix}") as replay:
        assert [r.event for r in replay] == journal
    assert replay.summary.duplicates == len(journal)
    assert replay.summary.runs == {"complete": 1}


def test_ended_runs_are_forgotten_past_forget_after_and_still_counted(
    kafka_bootstrap: str,
) -> None:
    prefix = _fresh_topic(kafka_bootstrap, partitions=2)
    journals = [_journal(f"r-f{i}", 2) for i in range(6)]
    for i, journal in enumerate(journals):
        _produce(kafka_bootstrap, prefix, [("wf", e) for e in journal], partition=i % 2)
    open_run = _journal("r-open", 1)[:-1]  # never ends: kept for the whole replay
    _produce(kafka_bootstrap, prefix, [("wf", e) for e in open_run], partition=1)
    with JournalReplay(
        kafka_bootstrap, f"{prefix}.journal", read_timeout=5, forget_after=0
    ) as replay:
        got = list(replay)
    assert len(got) == sum(map(len, journals)) + len(open_run)
    # A run that ended before its partition's last offset read is gone, and still counted:
    # partition 0 ends with r-f4's terminal, partition 1 with the open run's records.
    assert {run_id.decode() for _wf, run_id in replay.summary._live} == {"r-f4", "r-open"}
    assert replay.summary.runs == {"complete": 6, "in_progress": 1}
    assert replay.summary.run_count == 7


def test_stale_epochs_and_events_after_a_terminal_are_dropped(kafka_bootstrap: str) -> None:
    prefix = _fresh_topic(kafka_bootstrap)
    r = "r-stale"
    init = RunEvent("run:init", {"name": "wf", "params": {}}, r, run_seq=1)
    new = RunEvent("step:done", {"call_index": 0}, r, run_seq=2, headers={EPOCH_HEADER: "2"})
    old = RunEvent("step:done", {"call_index": 0}, r, run_seq=3, headers={EPOCH_HEADER: "1"})
    end = RunEvent("run:error", {"code": "cancelled"}, r, run_seq=4, headers={EPOCH_HEADER: "2"})
    late = RunEvent("run:complete", {}, r, run_seq=5, headers={EPOCH_HEADER: "2"})
    _produce(kafka_bootstrap, prefix, [("wf", e) for e in (init, new, old, end, late)])
    with replay_journal(f"kafka://{kafka_bootstrap}?topic_prefix={prefix}") as replay:
        assert [r.event for r in replay] == [init, new, end]
    summary = replay.summary
    assert (summary.stale, summary.after_terminal, summary.runs) == (1, 1, {"cancelled": 1})


@pytest.fixture(scope="module")
def shared_prefix(kafka_bootstrap: str) -> str:
    """One topic for many examples: each replays from where the topic ended before it."""
    return _fresh_topic(kafka_bootstrap)


def _end(bootstrap: str, prefix: str) -> int:
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex})
    try:
        _low, high = consumer.get_watermark_offsets(
            TopicPartition(f"{prefix}.journal", 0), timeout=10, cached=False
        )
    finally:
        consumer.close()
    return int(high)


@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
@given(lengths=st.lists(st.integers(0, 4), min_size=1, max_size=3), rng=st.randoms())
def test_any_duplication_and_interleaving_of_copies_folds_to_the_journals(
    kafka_bootstrap: str, shared_prefix: str, lengths: list[int], rng: random.Random
) -> None:
    prefix, start_at = shared_prefix, _end(kafka_bootstrap, shared_prefix)
    journals = {f"r{i}": _journal(f"r{i}-{start_at}", n) for i, n in enumerate(lengths)}
    # Each run copied one to three times, each copy a suffix or all of its journal, in order;
    # the copies of all runs interleaved at random (what concurrent copiers and retries make).
    streams: list[list[RunEvent]] = []
    for journal in journals.values():
        streams.append(list(journal))
        for _ in range(rng.randint(0, 2)):
            streams.append(journal[rng.randint(0, len(journal) - 1) :])
    merged: list[RunEvent] = []
    while any(streams):
        merged.append(rng.choice([s for s in streams if s]).pop(0))
    _produce(kafka_bootstrap, prefix, [("wf", e) for e in merged])
    url = f"kafka://{kafka_bootstrap}?topic_prefix={prefix}"
    with replay_journal(url, from_offset=start_at) as replay:
        got = _by_run(list(replay))
    by_run = {run: sorted(events, key=lambda e: e.run_seq or 0) for (_, run), events in got.items()}
    assert by_run == {journal[0].run_id: journal for journal in journals.values()}
    assert replay.summary.duplicates == len(merged) - sum(map(len, journals.values()))


def test_from_time_starts_at_the_first_record_that_late(kafka_bootstrap: str) -> None:
    prefix = _fresh_topic(kafka_bootstrap, partitions=2)
    early, late = _journal("r-early", 1), _journal("r-late", 1)
    _produce(kafka_bootstrap, prefix, [("wf", e) for e in early], timestamp=1_000_000)
    _produce(kafka_bootstrap, prefix, [("wf", e) for e in late], timestamp=2_000_000)
    _produce(kafka_bootstrap, prefix, [("wf", e) for e in early], partition=1, timestamp=1_000_000)
    url = f"kafka://{kafka_bootstrap}?topic_prefix={prefix}"
    with replay_journal(url, from_time=datetime.fromtimestamp(1500, UTC)) as replay:
        records = list(replay)
    assert [r.event for r in records] == late
    assert {r.timestamp for r in records} == {datetime.fromtimestamp(2000, UTC)}
    with replay_journal(url, from_time=1000.0, partition=1) as replay:
        assert [r.event for r in replay] == early


def test_a_record_that_does_not_decode_is_a_typed_error_naming_it(kafka_bootstrap: str) -> None:
    prefix = _fresh_topic(kafka_bootstrap)
    good = _journal("r-ok", 0)
    _produce(kafka_bootstrap, prefix, [("wf", good[0])])
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    producer.produce(
        f"{prefix}.journal", b"\x02", partition=0, headers=record_headers("wf", good[1])
    )
    assert producer.flush(30) == 0
    _produce(kafka_bootstrap, prefix, [("wf", _journal("r-after", 0)[0])])
    url = f"kafka://{kafka_bootstrap}?topic_prefix={prefix}"
    with (
        replay_journal(url, strict=True) as replay,
        pytest.raises(JournalRecordUndecodable) as failed,
    ):
        list(replay)
    assert (failed.value.partition, failed.value.offset) == (0, 1)
    assert failed.value.code == "journal_record_undecodable"
    assert isinstance(failed.value, StoreProtocolError)  # not an outage
    assert f"{prefix}.journal" in str(failed.value)
    with replay_journal(url, until_offset=1) as replay:  # the records before it replay
        assert [r.event for r in replay] == good[:1]
    # Without strict, the record is skipped and named, and the replay goes on past it.
    with replay_journal(url) as replay:
        assert [r.run_id for r in replay] == ["r-ok", "r-after"]
    ((partition, offset, why),) = replay.summary.skipped
    assert (partition, offset) == (0, 1)
    assert "its value" in why
    assert "skipped 1 bad record" in replay.summary.line()


@pytest.mark.parametrize("lie", ["run_seq", "run_id", "truncated"])
def test_a_value_that_disagrees_with_its_headers_mid_run_is_refused(
    kafka_bootstrap: str, lie: str
) -> None:
    # Several good records of the run first, so the fold has met its layout (the fast path).
    prefix = _fresh_topic(kafka_bootstrap)
    good = _journal("r-lie", 4)
    _produce(kafka_bootstrap, prefix, [("wf", e) for e in good[:-1]])
    end = good[-1]
    if lie == "run_seq":
        value = encode(RunEvent(end.kind, end.payload, end.run_id, run_seq=3, headers=end.headers))
    elif lie == "run_id":
        value = encode(
            RunEvent(end.kind, end.payload, "r-lix", run_seq=end.run_seq, headers=end.headers)
        )
    else:
        value = encode(end)[:-1]
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    producer.produce(f"{prefix}.journal", value, partition=0, headers=record_headers("wf", end))
    assert producer.flush(30) == 0
    url = f"kafka://{kafka_bootstrap}?topic_prefix={prefix}"
    with (
        replay_journal(url, strict=True) as replay,
        pytest.raises(JournalRecordUndecodable) as failed,
    ):
        list(replay)
    assert (failed.value.partition, failed.value.offset) == (0, len(good) - 1)
    with replay_journal(url) as replay:
        assert [r.event for r in replay] == good[:-1]
    assert [(p, o) for p, o, _ in replay.summary.skipped] == [(0, len(good) - 1)]


def test_a_record_of_a_newer_schema_major_is_refused_by_replay_and_by_reads(
    kafka_bootstrap: str,
) -> None:
    prefix = _fresh_topic(kafka_bootstrap)
    event = _journal("r-new", 0)[0]
    newer = [(k, b"2.0" if k == "lg-schema" else v) for k, v in record_headers("wf", event)]
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    producer.produce(f"{prefix}.journal", encode(event), partition=0, headers=newer)
    assert producer.flush(30) == 0
    url = f"kafka://{kafka_bootstrap}?topic_prefix={prefix}"
    with replay_journal(url) as replay, pytest.raises(SchemaVersionMismatch, match="upgrade"):
        list(replay)
    store = KafkaEventLogStore(kafka_bootstrap, topic_prefix=prefix)
    try:
        with pytest.raises(SchemaVersionMismatch):
            store.load_run("wf", "r-new")
    finally:
        store.close()


def test_bad_positions_are_typed_errors(kafka_bootstrap: str) -> None:
    prefix = _fresh_topic(kafka_bootstrap, partitions=2)
    _produce(kafka_bootstrap, prefix, [("wf", e) for e in _journal("r-gone", 3)])
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    done = admin.delete_records([TopicPartition(f"{prefix}.journal", 0, 2)])
    for future in done.values():
        future.result(30)
    url = f"kafka://{kafka_bootstrap}?topic_prefix={prefix}"
    with pytest.raises(JournalPositionError, match=r"low watermark .* is 2") as gone:
        replay_journal(url, from_offset=1)
    assert (gone.value.partition, gone.value.offset, gone.value.low) == (0, 1, 2)
    assert gone.value.code == "journal_position"
    with replay_journal(url) as replay:  # from the low watermark by default
        assert [r.run_seq for r in replay] == [3, 4, 5]
    with pytest.raises(JournalPositionError, match=r"no partition 2 .*0-1"):
        replay_journal(url, partition=2)
    with pytest.raises(JournalPositionError, match="no journal topic"):
        replay_journal(f"kafka://{kafka_bootstrap}?topic_prefix=nothing{uuid.uuid4().hex[:8]}")
    with pytest.raises(StoreUnavailable, match="did not answer"):
        replay_journal("kafka://127.0.0.1:1?read_timeout=1")


# -- the command line -----------------------------------------------------------------------------


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k != "LOCKGATE_JOURNAL_URL"}
    environ["PYTHONPATH"] = str(SRC)
    return subprocess.run(
        [sys.executable, "-m", "lockgate", "journal", "replay", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**environ, **(env or {})},
    )


def _json_lines(out: str) -> tuple[list[dict[str, object]], dict[str, object]]:
    lines = [json.loads(line) for line in out.splitlines()]
    summary = lines.pop()
    assert set(summary) == {"summary"}
    return lines, summary["summary"]  # type: ignore[return-value]


def test_the_cli_prints_each_folded_event_as_json_then_a_summary(topic: Topic) -> None:
    done = _cli("--journal", topic.url, "--json")
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # no progress when stderr is not a terminal
    lines, summary = _json_lines(done.stdout)
    got: dict[tuple[str, str], list[RunEvent]] = defaultdict(list)
    for line in lines:
        assert {
            "workflow",
            "run_id",
            "run_seq",
            "kind",
            "partition",
            "offset",
            "payload",
            "timestamp",
            "epoch",
        } <= set(line)
        assert isinstance(line["payload"], dict)
        run = (str(line["workflow"]), str(line["run_id"]))
        got[run].append(
            RunEvent(str(line["kind"]), line["payload"], run[1], run_seq=line["run_seq"])
        )  # type: ignore[arg-type]
    assert {
        run: [(e.kind, e.payload, e.run_seq) for e in events] for run, events in got.items()
    } == {
        run: [(e.kind, e.payload, e.run_seq) for e in topic.journal(*run)]
        for run in _all_runs(topic)
    }
    assert summary["by_status"] == {"complete": 6, "sleeping": 2, "signal_waiting": 1}
    assert summary["events"] == len(lines)
    assert summary["runs"] == 9


def test_the_cli_prints_text_lines_and_a_summary_sentence(topic: Topic) -> None:
    run = topic.runs["kr_sum"][0]
    done = _cli("--run", run[1], env={"LOCKGATE_JOURNAL_URL": topic.url})
    assert done.returncode == 0, done.stderr
    *lines, summary = done.stdout.splitlines()
    journal = topic.journal(*run)
    assert len(lines) == len(journal)
    for line, event in zip(lines, journal, strict=True):
        assert f"kr_sum  {run[1]}  #{event.run_seq}  {event.kind}" in line
    assert summary.startswith(f"replayed {len(journal)} events of 1 run (folded 0 duplicates, ")
    assert summary.endswith(": 1 complete")


def test_the_cli_positions_and_filters(topic: Topic) -> None:
    with replay_journal(topic.url) as replay:
        everything = list(replay)
    # The runs' partitions follow their random ids: take the partition holding the most.
    busiest = max(range(SHARDS), key=lambda p: sum(r.partition == p for r in everything))
    wanted = [
        (r.workflow, r.run_id, r.run_seq, r.offset)
        for r in everything
        if r.partition == busiest and 1 <= r.offset < 4 and r.workflow == "kr_sum"
    ]
    flags = ["--partition", str(busiest), "--from-offset", "1", "--until-offset", "4"]
    done = _cli("--journal", topic.url, "--json", *flags, "--workflow", "kr_sum")
    assert done.returncode == 0, done.stderr
    lines, summary = _json_lines(done.stdout)
    assert [(x["workflow"], x["run_id"], x["run_seq"], x["offset"]) for x in lines] == wanted
    assert all(line["partition"] == busiest for line in lines)
    assert summary["records"] == 3  # the busiest of 3 partitions holds at least 4 of 50 records


def test_the_cli_ends_quietly_when_its_reader_goes(topic: Topic) -> None:
    done = subprocess.run(
        f"{sys.executable} -m lockgate journal replay --journal '{topic.url}' | head -1",
        shell=True,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(SRC)},
    )
    assert len(done.stdout.splitlines()) == 1
    assert done.stderr == ""


@pytest.fixture(scope="module")
def small_topic(kafka_bootstrap: str) -> Iterator[str]:
    prefix = _fresh_topic(kafka_bootstrap, partitions=2)
    _produce(kafka_bootstrap, prefix, [("wf", e) for e in _journal("r-1", 1)])
    return f"kafka://{kafka_bootstrap}?topic_prefix={prefix}&read_timeout=5"


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (["--journal", "http://localhost:9092"], "is not kafka://"),
        (["--journal", "kafka://h:1?nope=1"], "no option 'nope'"),
        (["--journal", "kafka://h:1?journal_key=short"], "at least 16 characters"),
        (["--from-time", "yesterday"], "not an ISO 8601 time"),
        (["--from-offset", "-1"], "--from-offset must be 0 or more"),
        (["--until-offset", "-3"], "--until-offset must be 0 or more"),
        (["--from-offset", "5", "--until-offset", "2"], "is before --from-offset"),
        (["--partition", "7"], "no partition 7"),
        (["--run", "bad\nid"], "run id"),
    ],
)
def test_cli_usage_errors_exit_2_with_one_line(
    small_topic: str, args: list[str], match: str
) -> None:
    given = args if args[0] == "--journal" else ["--journal", small_topic, *args]
    done = _cli(*given)
    assert done.returncode == 2, done
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith("lockgate: error: ")
    assert match in line


def test_cli_missing_topic_and_no_journal_exit_2(kafka_bootstrap: str) -> None:
    done = _cli("--journal", f"kafka://{kafka_bootstrap}?topic_prefix=none{uuid.uuid4().hex[:8]}")
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    assert "no journal topic" in line
    done = _cli()
    assert done.returncode == 2
    assert "no journal given" in done.stderr.strip()


def test_cli_from_offset_with_from_time_is_refused_by_the_parser(small_topic: str) -> None:
    done = _cli("--journal", small_topic, "--from-offset", "0", "--from-time", "2026-01-01")
    assert done.returncode == 2
    assert "not allowed with argument" in done.stderr.splitlines()[-1]


def test_cli_an_unreachable_broker_is_one_line_and_exit_1() -> None:
    done = _cli("--journal", "kafka://127.0.0.1:1?read_timeout=1")
    assert done.returncode == 1
    (line,) = done.stderr.splitlines()
    assert line.startswith("lockgate: error: ")
    assert "did not answer" in line


def test_a_payload_that_is_not_utf8_does_not_stop_a_replay(kafka_bootstrap: str) -> None:
    """A value laid out as the run's own (so the fold's fast path takes it) whose payload
    bytes are not UTF-8: the replay goes on past it, and its ``event`` is the typed error."""
    prefix = _fresh_topic(kafka_bootstrap)
    good = _journal("r-bytes", 4)
    _produce(kafka_bootstrap, prefix, [("wf", e) for e in good[:-1]])
    end = good[-1]
    forged = RunEvent(
        end.kind, {"result": "ab"}, end.run_id, run_seq=end.run_seq, headers=end.headers
    )
    value = encode(forged).replace(b'"ab"', b'"\xff\xfe"')
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    producer.produce(f"{prefix}.journal", value, partition=0, headers=record_headers("wf", end))
    assert producer.flush(30) == 0
    with replay_journal(f"kafka://{kafka_bootstrap}?topic_prefix={prefix}") as replay:
        records = list(replay)
    assert [r.event for r in records[:-1]] == good[:-1]
    assert records[-1].offset == len(good) - 1
    assert records[-1].payload == {"result": "\ufffd\ufffd"}  # as text, the bytes replaced
    with pytest.raises(JournalRecordUndecodable):
        _ = records[-1].event  # the event itself: not lockgate's
