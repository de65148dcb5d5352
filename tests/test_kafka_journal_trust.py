"""What the Kafka journal believes (invariants 8 and 10), on the suite's real broker and Valkey.

A record someone other than lockgate appended to ``{prefix}.journal`` is not believed: one
stamped with an epoch the lifecycle store never issued for its run is dropped from every read
(``client.events``, the HTTP API, ``journal replay --store``) and counted, and the run's real
event at that ``run_seq`` is seen; with a journal key, a record without a valid ``lg-mac`` is
skipped by reads, replays and rebuilds. A record that does not decode never stops a rebuild or
a replay: it is skipped and named, and everything else is restored. ``store info`` on a
Valkey + Kafka composite shows both halves. The CLI is run as a process (exit codes, stderr).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from prometheus_client import REGISTRY

from lockgate import (
    EventKind,
    InlineWorkflowRunner,
    ManualClock,
    RunEvent,
    RunStatus,
    WorkflowClient,
    WorkflowContext,
    step,
    workflow,
)
from lockgate.http import create_app
from lockgate.journal._events import EPOCH_HEADER
from lockgate.stores import CompositeStore, KafkaEventLogStore, ValkeyLifecycleStore
from lockgate.stores.composite._rebuild import rebuild_lifecycle
from lockgate.stores.kafka._codec import MAC_HEADER, encode, record_headers, record_mac
from valkey_server import shared_url

SRC = Path(__file__).resolve().parents[1] / "src"
KEY = "a-journal-key-of-32-characters!!"


@step(name="jt_add")
async def add(n: int) -> int:
    return n + 1


@workflow(name="jt_nap")
async def nap(ctx: WorkflowContext, n: int) -> int:
    first = await add(n)
    await ctx.sleep(3600)
    return await add(first)


@workflow(name="jt_sum")
async def summed(ctx: WorkflowContext, n: int) -> int:
    return await add(await add(n))


@dataclass
class Tier:
    """One Valkey namespace and one journal topic, as a deployment's processes share them."""

    bootstrap: str
    namespace: str
    prefix: str
    key: str | None
    made: list[CompositeStore]

    def store(self, clock: ManualClock | None = None, *, unkeyed: bool = False) -> CompositeStore:
        lifecycle = ValkeyLifecycleStore(
            shared_url(), namespace=self.namespace, shard_count=1, clock=clock
        )
        events = KafkaEventLogStore(
            self.bootstrap,
            topic_prefix=self.prefix,
            shard_count=1,
            read_timeout=10.0,
            journal_key=None if unkeyed else self.key,
        )
        self.made.append(CompositeStore(lifecycle=lifecycle, events=events))
        return self.made[-1]

    @property
    def topic(self) -> str:
        return f"{self.prefix}.journal"

    @property
    def store_url(self) -> str:
        return f"{shared_url()}?namespace={self.namespace}&shard_count=1"

    def journal_url(self, *, key: str | None = None) -> str:
        url = f"kafka://{self.bootstrap}?topic_prefix={self.prefix}&read_timeout=10"
        return url + (f"&journal_key={key}" if key else "")

    def forge(self, name: str, event: RunEvent, *, value: bytes | None = None, **extra: Any) -> int:
        """Append one record to the journal topic as anyone with write access could: the
        offset it got."""
        producer = Producer({"bootstrap.servers": self.bootstrap})
        offsets: list[int] = []
        headers: list[tuple[str, str | bytes | None]] = [
            *record_headers(name, event),
            *extra.get("headers", ()),
        ]
        producer.produce(
            self.topic,
            encode(event) if value is None else value,
            key=event.run_id.encode(),
            partition=0,
            headers=headers,
            on_delivery=lambda err, msg: offsets.append(msg.offset()) if err is None else None,
        )
        assert producer.flush(30) == 0
        (offset,) = offsets
        return offset


@pytest.fixture
def tier(kafka_bootstrap: str) -> Iterator[Tier]:
    made: list[CompositeStore] = []
    yield Tier(
        kafka_bootstrap, f"jt{uuid.uuid4().hex[:10]}", f"jt{uuid.uuid4().hex[:10]}", None, made
    )
    for store in made:
        store.close()


def _dropped(workflow: str, reason: str) -> float:
    return (
        REGISTRY.get_sample_value(
            "lockgate_journal_records_dropped_total", {"workflow": workflow, "reason": reason}
        )
        or 0.0
    )


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("LOCKGATE_")}
    environ["PYTHONPATH"] = str(SRC)
    return subprocess.run(
        [sys.executable, "-m", "lockgate", *args],
        capture_output=True,
        text=True,
        timeout=180,
        env={**environ, **(env or {})},
    )


def _forged_complete(run_id: str, run_seq: int, epoch: int) -> RunEvent:
    return RunEvent(
        EventKind.RUN_COMPLETE,
        {"result": "forged"},
        run_id,
        run_seq=run_seq,
        headers={EPOCH_HEADER: str(epoch)},
    )


async def test_a_forged_epoch_is_dropped_from_every_read_and_the_real_event_is_seen(
    tier: Tier, caplog: pytest.LogCaptureFixture
) -> None:
    clock = ManualClock()
    writer = tier.store(clock)
    runner = InlineWorkflowRunner(store=writer, clock=clock)
    await runner.start()
    handle = await runner.client.submit("jt_nap", {"n": 1})
    await runner.run("jt_nap", handle.run_id)
    run = ("jt_nap", handle.run_id)
    asleep = writer.load_run(*run)
    assert asleep[-1].kind == EventKind.RUN_SLEEPING
    issued = max(int(e.headers.get(EPOCH_HEADER, 0)) for e in asleep)
    assert issued == 1
    # The forgery: the run's next run_seq, "completed" under an epoch no claim ever held.
    seq = (asleep[-1].run_seq or 0) + 1
    forged = tier.forge("jt_nap", _forged_complete(handle.run_id, seq, 999))
    before = _dropped("jt_nap", "epoch")

    with caplog.at_level(logging.ERROR, logger="lockgate.stores"):
        reader = tier.store()
        seen = await WorkflowClient(reader).events(*run)
        assert [e.kind for e in seen] == [e.kind for e in asleep]
        assert reader.get_run(*run).status == RunStatus.SLEEPING
        again = tier.store()  # HTTP GET events, from another process's store
        with _serving(again) as url:
            async with httpx.AsyncClient(base_url=url, timeout=30) as http:
                answer = await http.get(f"/jt_nap/runs/{handle.run_id}/events")
            assert answer.status_code == 200, answer.text
            body = answer.json()
        assert EventKind.RUN_SLEEPING in json.dumps(body)
        assert EventKind.RUN_COMPLETE not in json.dumps(body)
    assert _dropped("jt_nap", "epoch") >= before + 1
    said = [r for r in caplog.records if "never issued" in r.getMessage()]
    assert said
    assert handle.run_id in said[0].getMessage()
    assert len(said) <= 2  # at most once per run in each reading process
    counted = _dropped("jt_nap", "epoch")
    await WorkflowClient(reader).events(*run)  # read again: neither counted nor said again
    assert _dropped("jt_nap", "epoch") == counted
    assert len([r for r in caplog.records if "never issued" in r.getMessage()]) == len(said)

    # journal replay with the lifecycle store skips it and says so (exit 1); the topic alone
    # cannot tell it from a real event.
    done = _cli("journal", "replay", "--journal", tier.journal_url(), "--store", tier.store_url)
    assert done.returncode == 1, done.stderr
    assert "run:complete" not in done.stdout
    assert "skipped 1 bad record" in done.stdout.splitlines()[-1]
    assert "epoch 999 is above the highest the lifecycle store issued" in done.stderr
    log = reader.events
    assert isinstance(log, KafkaEventLogStore)
    with log.replay(run_id=handle.run_id) as replay:  # a composite's log asks its lifecycle
        assert EventKind.RUN_COMPLETE not in [record.kind for record in replay]
    assert [offset for _p, offset, _why in replay.summary.skipped] == [forged]
    wrong = _cli("journal", "replay", "--journal", tier.journal_url(), "--store", "sqlite:///x")
    assert wrong.returncode == 2
    assert "valkey:// lifecycle store" in wrong.stderr
    assert len(wrong.stderr.splitlines()) == 1
    alone = _cli("journal", "replay", "--journal", tier.journal_url())
    assert alone.returncode == 0
    assert "run:complete" in alone.stdout

    # The run goes on; its real terminal, at the forged record's run_seq, is what every
    # reader sees.
    clock.advance(3601)
    await runner.fire_due_timers()
    await runner.run("jt_nap", handle.run_id)
    fresh = tier.store()
    ended = await WorkflowClient(fresh).events(*run)
    assert ended[-1].kind == EventKind.RUN_COMPLETE
    assert [e.run_seq for e in ended] == list(range(1, len(ended) + 1))  # seq's slot: real
    assert (ended[-1].run_seq or 0) >= seq
    assert fresh.get_run(*run).status == RunStatus.COMPLETE
    assert ended[-1].payload.get("result") == 3
    assert all(int(e.headers.get(EPOCH_HEADER, 0)) <= 2 for e in ended)
    assert "forged" not in json.dumps([e.payload for e in ended])
    await runner.aclose()


def _serving(store: CompositeStore) -> Any:
    from http_support import app_server

    return app_server(create_app(store, workflows=[nap, summed]))


async def _drive_mixed(tier: Tier) -> tuple[CompositeStore, list[str], str]:
    """Three completed runs and one asleep, through a composite."""
    clock = ManualClock()
    store = tier.store(clock)
    runner = InlineWorkflowRunner(store=store, clock=clock)
    await runner.start()
    done = [(await runner.client.submit("jt_sum", {"n": i})).run_id for i in range(3)]
    for run_id in done:
        await runner.run("jt_sum", run_id)
    asleep = (await runner.client.submit("jt_nap", {"n": 5})).run_id
    await runner.run("jt_nap", asleep)
    await runner.aclose()
    return store, done, asleep


def _lose_valkey(store: CompositeStore) -> None:
    lifecycle = store.lifecycle
    assert isinstance(lifecycle, ValkeyLifecycleStore)
    for found in list(lifecycle._redis.scan_iter(match=f"lg:{{{lifecycle.namespace}[:}}]*")):
        lifecycle._redis.delete(found)


def _ghost(tier: Tier) -> str:
    """Records of a run that never existed, its journal not starting with a run:init."""
    ghost = f"ghost-{uuid.uuid4().hex[:6]}"
    init = RunEvent(EventKind.RUN_INIT, {"params": {"n": 0}, "submitted_at": 1.0}, ghost, run_seq=2)
    tier.forge("jt_sum", init)
    tier.forge("jt_sum", _forged_complete(ghost, 3, 999))
    return ghost


async def test_a_rebuild_skips_a_bad_record_and_a_forged_journal_and_restores_the_rest(
    tier: Tier,
) -> None:
    store, done, asleep = await _drive_mixed(tier)
    # A record with lockgate's headers that does not decode, among the real ones.
    event = RunEvent(EventKind.RUN_INIT, {}, "r-bad", run_seq=1)
    bad = tier.forge("jt_sum", event, value=b"\x02")
    ghost = _ghost(tier)
    _lose_valkey(store)

    rebuilt = _cli("store", "rebuild", "--store", tier.store_url, "--journal", tier.journal_url())
    assert rebuilt.returncode == 1, rebuilt.stderr
    lines = rebuilt.stdout.splitlines()
    assert f"skipped record 0/{bad} of {tier.topic}: its value" in "\n".join(lines)
    assert any(
        line.startswith(f"not restored: run {ghost} of jt_sum: its journal does not start")
        for line in lines
    )
    assert "restored 4 runs: 0 queued, 1 sleeping," in rebuilt.stdout
    fresh = tier.store()
    for run_id in done:
        assert fresh.get_run("jt_sum", run_id).status == RunStatus.COMPLETE
    assert fresh.get_run("jt_nap", asleep).status == RunStatus.SLEEPING
    assert fresh.get_run("jt_sum", ghost) is None
    assert fresh.get_run("jt_sum", "r-bad") is None
    # A second rebuild restores nothing more, and still names what it skipped.
    again = _cli("store", "rebuild", "--store", tier.store_url, "--journal", tier.journal_url())
    assert again.returncode == 1
    assert "restored nothing" in again.stdout


async def test_journal_replay_skips_and_counts_a_bad_record_and_strict_stops_at_it(
    tier: Tier,
) -> None:
    _store, done, _asleep = await _drive_mixed(tier)
    bad = tier.forge("jt_sum", RunEvent(EventKind.RUN_INIT, {}, "r-bad", run_seq=1), value=b"\x02")
    after = (await _drive_mixed(tier))[1]  # runs after the bad record are replayed too
    url = tier.journal_url()
    skipping = _cli("journal", "replay", "--journal", url, "--json")
    assert skipping.returncode == 1, skipping.stderr
    *lines, tail = skipping.stdout.splitlines()
    summary = json.loads(tail)["summary"]
    assert summary["skipped"] == [
        {"partition": 0, "offset": bad, "reason": summary["skipped"][0]["reason"]}
    ]
    assert {json.loads(line)["run_id"] for line in lines} >= {*done, *after}
    (said,) = skipping.stderr.splitlines()
    assert said.startswith(f"lockgate: skipped record 0/{bad}: ")
    strict = _cli("journal", "replay", "--journal", url, "--strict")
    assert strict.returncode == 1
    (line,) = strict.stderr.splitlines()
    assert line.startswith("lockgate: error: ")
    assert f"offset {bad}" in line
    assert "Traceback" not in strict.stderr


async def test_with_a_journal_key_records_are_signed_and_unsigned_or_wrong_ones_skipped(
    tier: Tier,
) -> None:
    tier.key = KEY
    store, done, asleep = await _drive_mixed(tier)
    # Signed records round-trip: each carries an lg-mac that verifies.
    consumer = Consumer({"bootstrap.servers": tier.bootstrap, "group.id": uuid.uuid4().hex})
    consumer.assign([TopicPartition(tier.topic, 0, 0)])
    first = consumer.consume(num_messages=1, timeout=30)[0]
    consumer.close()
    macs = [v for k, v in first.headers() or [] if k == MAC_HEADER]
    assert macs == [record_mac(KEY.encode(), first.key(), first.value(), first.headers()).encode()]
    reader = tier.store()
    assert reader.get_run("jt_sum", done[0]).status == RunStatus.COMPLETE
    assert reader.load_run("jt_sum", done[0])[-1].payload == {"result": 2}

    # Forged: the asleep run's next event with no MAC, then with a MAC under another key. The
    # epoch (1) is one the lifecycle did issue: only the MAC tells them from lockgate's.
    run = ("jt_nap", asleep)
    seq = (reader.load_run(*run)[-1].run_seq or 0) + 1
    before = _dropped("jt_nap", "mac")
    unsigned = tier.forge("jt_nap", _forged_complete(asleep, seq, 1))
    event = _forged_complete(asleep, seq, 1)
    wrong = record_mac(b"another-key-of-enough-length", asleep.encode(), encode(event), [])
    signed_wrong = tier.forge("jt_nap", event, headers=[(MAC_HEADER, wrong.encode())])
    fresh = tier.store()
    seen = await WorkflowClient(fresh).events(*run)
    assert seen[-1].kind == EventKind.RUN_SLEEPING
    assert _dropped("jt_nap", "mac") >= before + 2
    # Without the key, a reader believes them: the key is what tells.
    unkeyed = tier.store(unkeyed=True)
    assert (await WorkflowClient(unkeyed).events(*run))[-1].kind == EventKind.RUN_COMPLETE

    # journal replay with the key (URL option or environment) skips both and names them.
    for args, env in (
        (["--journal", tier.journal_url(key=KEY)], None),
        (["--journal", tier.journal_url()], {"LOCKGATE_JOURNAL_KEY": KEY}),
    ):
        replayed = _cli("journal", "replay", *args, env=env)
        assert replayed.returncode == 1, replayed.stderr
        nap_lines = [line for line in replayed.stdout.splitlines() if asleep in line]
        assert nap_lines
        assert not any("run:complete" in line for line in nap_lines)
        named = replayed.stderr.splitlines()
        assert [n.split(":")[1].strip() for n in named] == [
            f"skipped record 0/{unsigned}",
            f"skipped record 0/{signed_wrong}",
        ]
        assert "lg-mac" in named[0]
        assert "does not verify" in named[1]

    # A rebuild with the key skips them and a well-formed journal forged without a MAC.
    ghost = f"ghost-{uuid.uuid4().hex[:6]}"
    tier.forge(
        "jt_sum",
        RunEvent(EventKind.RUN_INIT, {"params": {"n": 0}, "submitted_at": 1.0}, ghost, run_seq=1),
    )
    tier.forge("jt_sum", _forged_complete(ghost, 2, 1))
    _lose_valkey(store)
    rebuilt = _cli(  # the key as the journal URL's option, through open_store
        "store", "rebuild", "--store", tier.store_url, "--journal", tier.journal_url(key=KEY)
    )
    assert rebuilt.returncode == 1, rebuilt.stderr
    skipped = [line for line in rebuilt.stdout.splitlines() if line.startswith("skipped record")]
    assert len(skipped) == 4  # the two forged for the nap, the ghost's two
    assert f"skipped record 0/{unsigned} of {tier.topic}: it has no lg-mac" in skipped[0]
    assert f"skipped record 0/{signed_wrong} of {tier.topic}: its lg-mac does not" in skipped[1]
    restored = tier.store()
    assert restored.get_run("jt_sum", ghost) is None
    assert restored.get_run("jt_nap", asleep).status == RunStatus.SLEEPING
    for run_id in done:
        assert restored.get_run("jt_sum", run_id).status == RunStatus.COMPLETE


async def test_store_info_on_a_composite_shows_the_valkey_store_and_the_journal_topic(
    tier: Tier,
) -> None:
    await _drive_mixed(tier)
    done = _cli(
        "store", "info", "--store", tier.store_url, "--journal", tier.journal_url(), "--json"
    )
    assert done.returncode == 0, done.stderr
    info = json.loads(done.stdout)
    assert info["lifecycle"]["namespace"] == tier.namespace
    assert info["lifecycle"]["workflows"]["jt_sum"]["runs"] == 3
    assert info["events"]["topic"] == tier.topic
    assert info["events"]["partitions"] == 1
    end = info["events"]["offsets"]["0"]["end"]
    assert end == info["events"]["records"] > 0
    text = _cli("store", "info", "--store", tier.store_url, "--journal", tier.journal_url())
    assert text.returncode == 0, text.stderr
    assert "events.offsets.0.end" in text.stdout
    assert "lifecycle.namespace" in text.stdout


async def test_a_rebuild_restores_no_run_whose_journal_does_not_start_with_its_run_init(
    tier: Tier,
) -> None:
    """A run that never existed, its records forged with a run:init (at run_seq 2) and a
    completion: the rebuild names it and restores the rest; it does not become a run."""
    store, done, _asleep = await _drive_mixed(tier)
    ghost = _ghost(tier)
    _lose_valkey(store)
    report = rebuild_lifecycle(tier.store())
    assert report.restored_total == 4
    assert report.refused == 1
    ((name, run_id, why),) = report.not_restored
    assert (name, run_id) == ("jt_sum", ghost)
    assert "does not start with a run:init" in why
    restored = tier.store()
    assert restored.get_run("jt_sum", ghost) is None
    assert restored.get_run("jt_sum", done[0]).status == RunStatus.COMPLETE


def test_a_process_that_learned_a_runs_epoch_keeps_its_own_later_claims_copies(
    tier: Tier,
) -> None:
    """A process that read a live run (its bound: the outbox's epoch 1) and then claims it
    (epoch 2) keeps the copies it makes under the new epoch in its memory: its next read of
    the run needs no request to the broker, and shows them."""
    mine, other = tier.store(), tier.store()
    run = ("jt_sum", "r-1")
    mine.submit_run(*run, {"n": 1})
    assert mine.claim_next_run("jt_sum", "worker-a/1") == "r-1"
    done = RunEvent("step:done", {"call_index": 0, "result": 2}, "r-1")
    mine.append_and_poll(*run, [done], fence="worker-a/1")
    assert [e.kind for e in other.load_run(*run)] == [EventKind.RUN_INIT, "step:done"]
    mine.release_run(*run, "worker-a/1")
    assert other.claim_next_run("jt_sum", "worker-b/1") == "r-1"
    again = RunEvent("step:done", {"call_index": 1, "result": 3}, "r-1")
    other.append_and_poll(*run, [again], fence="worker-b/1")
    log = other.events
    assert isinstance(log, KafkaEventLogStore)
    reads = log.topic_reads
    journal = other.load_run(*run)
    assert [e.headers.get(EPOCH_HEADER) for e in journal[1:]] == ["1", "2"]
    assert log.topic_reads == reads  # from memory


def _journal_of(store: CompositeStore) -> KafkaEventLogStore:
    log = store.events
    assert isinstance(log, KafkaEventLogStore)
    return log


async def test_a_header_that_is_not_utf8_stops_no_read_replay_or_rebuild(tier: Tier) -> None:
    """A binary header (a ``traceparent`` some tracer adds) is no reason to doubt a record;
    an ``lg-*`` header that is not UTF-8 is not lockgate's: rebuild skips and names it,
    replay skips it, reads drop it and go on past it."""
    store, done, asleep = await _drive_mixed(tier)
    # A new run's run:init carrying a binary traceparent: a run like any other.
    traced = f"r-trace-{uuid.uuid4().hex[:6]}"
    init = RunEvent(EventKind.RUN_INIT, {"params": {"n": 7}, "submitted_at": 2.0}, traced)
    tier.forge(
        "jt_sum",
        RunEvent(init.kind, init.payload, traced, run_seq=1),
        headers=[("traceparent", b"\xff\x00\xfe")],
    )
    seq = (store.load_run("jt_nap", asleep)[-1].run_seq or 0) + 1
    # The asleep run's "next event" with a second lg-run-seq that is not UTF-8, and a record
    # whose lg-run-id is not UTF-8.
    bad_seq = tier.forge(
        "jt_nap", _forged_complete(asleep, seq, 1), headers=[("lg-run-seq", b"\xff")]
    )
    bad_id = tier.forge(
        "jt_sum", _forged_complete("r-x", 2, 1), headers=[("lg-run-id", b"\xff\xfe")]
    )
    before = _dropped("jt_nap", "header")

    # Reads: the run's journal as it was, the record counted and read past.
    reader = tier.store()
    seen = await WorkflowClient(reader).events("jt_nap", asleep)
    assert seen[-1].kind == EventKind.RUN_SLEEPING
    assert _dropped("jt_nap", "header") == before + 1
    assert (await WorkflowClient(reader).events("jt_nap", asleep))[-1].kind == seen[-1].kind
    assert _dropped("jt_nap", "header") == before + 1  # read past: not met again
    assert tier.store().load_run("jt_sum", done[0])[-1].kind == EventKind.RUN_COMPLETE

    # Replay (the API and the CLI): both skipped and named, the rest replayed.
    with _journal_of(tier.store()).replay() as replay:
        kinds = {(record.run_id, record.kind) for record in replay}
    assert (traced, EventKind.RUN_INIT) in kinds
    assert (asleep, EventKind.RUN_COMPLETE) not in kinds
    assert [offset for _p, offset, _why in replay.summary.skipped] == [bad_seq, bad_id]
    replayed = _cli("journal", "replay", "--journal", tier.journal_url())
    assert replayed.returncode == 1, replayed.stderr
    assert "Traceback" not in replayed.stderr
    assert [line.split(":")[1].strip() for line in replayed.stderr.splitlines()] == [
        f"skipped record 0/{bad_seq}",
        f"skipped record 0/{bad_id}",
    ]

    # Rebuild: exit 1, each named, every other run restored.
    _lose_valkey(store)
    rebuilt = _cli("store", "rebuild", "--store", tier.store_url, "--journal", tier.journal_url())
    assert rebuilt.returncode == 1, rebuilt.stderr
    assert "Traceback" not in rebuilt.stderr
    assert (
        f"skipped record 0/{bad_seq} of {tier.topic}: its lg-run-seq header is not UTF-8"
        in rebuilt.stdout
    )
    assert (
        f"skipped record 0/{bad_id} of {tier.topic}: its lg-run-id header is not UTF-8"
        in rebuilt.stdout
    )
    assert "restored 5 runs: 1 queued, 1 sleeping," in rebuilt.stdout
    restored = tier.store()
    assert restored.get_run("jt_nap", asleep).status == RunStatus.SLEEPING
    assert restored.get_run("jt_sum", traced).status == RunStatus.PENDING
    for run_id in done:
        assert restored.get_run("jt_sum", run_id).status == RunStatus.COMPLETE


def test_record_mac_takes_a_repeated_header_with_a_null_copy() -> None:
    secret = KEY.encode()
    headers: list[tuple[str, str | bytes | None]] = [("lg-run-seq", b"3"), ("lg-run-seq", None)]
    mac = record_mac(secret, b"k", b"v", headers)
    assert mac == record_mac(secret, b"k", b"v", list(headers))  # the same input, the same MAC
    assert mac != record_mac(secret, b"k", b"v", headers[::-1])  # the null is part of it
    assert mac != record_mac(secret, b"k", b"v", headers[:1])


async def test_with_a_journal_key_a_repeated_header_with_a_null_copy_is_skipped(
    tier: Tier,
) -> None:
    """A forged record repeating an ``lg-*`` header, one copy null: its MAC does not verify,
    so reads drop it, replay and rebuild skip and name it; none of them fails on it."""
    tier.key = KEY
    store, done, asleep = await _drive_mixed(tier)
    seq = (store.load_run("jt_nap", asleep)[-1].run_seq or 0) + 1
    forged = tier.forge(  # with an lg-mac, so that a reader computes the record's MAC
        "jt_nap",
        _forged_complete(asleep, seq, 1),
        headers=[("lg-run-seq", None), (MAC_HEADER, b"0" * 64)],
    )
    before = _dropped("jt_nap", "mac")
    seen = await WorkflowClient(tier.store()).events("jt_nap", asleep)
    assert seen[-1].kind == EventKind.RUN_SLEEPING
    assert _dropped("jt_nap", "mac") == before + 1

    replayed = _cli("journal", "replay", "--journal", tier.journal_url(key=KEY))
    assert replayed.returncode == 1, replayed.stderr
    (named,) = replayed.stderr.splitlines()
    assert named.startswith(f"lockgate: skipped record 0/{forged}: ")
    assert "run:complete" not in "\n".join(
        line for line in replayed.stdout.splitlines() if asleep in line
    )

    _lose_valkey(store)
    rebuilt = _cli(
        "store", "rebuild", "--store", tier.store_url, "--journal", tier.journal_url(key=KEY)
    )
    assert rebuilt.returncode == 1, rebuilt.stderr
    assert "Traceback" not in rebuilt.stderr
    assert f"skipped record 0/{forged} of {tier.topic}: its lg-mac does not" in rebuilt.stdout
    restored = tier.store()
    assert restored.get_run("jt_nap", asleep).status == RunStatus.SLEEPING
    for run_id in done:
        assert restored.get_run("jt_sum", run_id).status == RunStatus.COMPLETE


async def test_a_run_complete_with_no_epoch_is_dropped_once_the_bound_is_known(
    tier: Tier, caplog: pytest.LogCaptureFixture
) -> None:
    """lockgate writes a run:complete only from an attempt, fenced, so always with its epoch:
    one with none is refused by reads and by ``journal replay --store`` as an epoch above the
    bound would be."""
    store, _done, asleep = await _drive_mixed(tier)
    run = ("jt_nap", asleep)
    seq = (store.load_run(*run)[-1].run_seq or 0) + 1
    unstamped = RunEvent(EventKind.RUN_COMPLETE, {"result": "forged"}, asleep, run_seq=seq)
    forged = tier.forge("jt_nap", unstamped)
    before = _dropped("jt_nap", "epoch")
    with caplog.at_level(logging.ERROR, logger="lockgate.stores"):
        reader = tier.store()
        seen = await WorkflowClient(reader).events(*run)
    assert seen[-1].kind == EventKind.RUN_SLEEPING
    assert "forged" not in json.dumps([e.payload for e in seen])
    assert _dropped("jt_nap", "epoch") == before + 1
    assert any(asleep in r.getMessage() for r in caplog.records)

    replayed = _cli("journal", "replay", "--journal", tier.journal_url(), "--store", tier.store_url)
    assert replayed.returncode == 1, replayed.stderr
    assert "run:complete" not in "\n".join(
        line for line in replayed.stdout.splitlines() if asleep in line
    )
    (named,) = replayed.stderr.splitlines()
    assert named.startswith(f"lockgate: skipped record 0/{forged}: ")
    assert "no epoch" in named
    # The topic alone cannot tell it from lockgate's: without the store, it is replayed.
    alone = _cli("journal", "replay", "--journal", tier.journal_url())
    assert alone.returncode == 0, alone.stderr


def test_a_journal_key_is_never_quoted_in_an_error(kafka_bootstrap: str) -> None:
    secret = "supersecretkey123456"
    bogus = f"kafka://127.0.0.1:1?journal_key={secret}&bogus=1"
    for args in (
        ["journal", "replay", "--journal", bogus],
        ["journal", "replay", "--journal", f"kafka://h:1/x?journal_key={secret}"],
        ["store", "info", "--store", shared_url(), "--journal", f"{bogus}#x"],
        ["store", "info", "--store", "sqlite:///x.db", "--journal", bogus],
        [
            "topics",
            "list",
            "--journal",
            f"kafka://h:1?journal_key={secret}&replication_factor=x",
        ],
    ):
        done = _cli(*args)
        assert done.returncode == 2, (args, done.stderr)
        (line,) = done.stderr.splitlines()
        assert secret not in line, line
        assert "journal_key=***" in line, line
    from lockgate import ConfigurationError
    from lockgate.stores.opener._open import open_store

    with pytest.raises(ConfigurationError) as caught:
        open_store(shared_url(), journal=f"kafka://{kafka_bootstrap}?journal_key={secret}#frag")
    assert secret not in str(caught.value)
    assert "journal_key=***" in str(caught.value)
    # How a worker's lines name the store: no key either.
    from lockgate.worker._status import describe_store

    opened = open_store(
        f"{shared_url()}?namespace=jt{uuid.uuid4().hex[:8]}",
        journal=f"kafka://{kafka_bootstrap}?topic_prefix=jt{uuid.uuid4().hex[:8]}"
        f"&journal_key={secret}",
    )
    try:
        assert secret not in describe_store(opened)
    finally:
        opened.close()
