"""The Kafka journal against what production throws at it, on the suite's real broker: a
client outside Python reading the topic, records written twice, a topic made for another
deployment, a bootstrap address nothing answers on, and a record lockgate did not write.

Each fault is a clear typed error with nothing written (the topic's offsets and the Valkey
namespace are compared before and after), or, for duplicates, each event folded once.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import shutil
import struct
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fastavro
import pytest
import redis
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from lockgate import (
    InlineWorkflowRunner,
    JournalRecordUndecodable,
    JournalTopicMismatch,
    RunStatus,
    StepContext,
    StoreProtocolError,
    StoreUnavailable,
    SystemClock,
    WorkflowClient,
    WorkflowContext,
    open_store,
    step,
    workflow,
)
from lockgate._errors import ErrorCode
from lockgate.cli import main
from lockgate.journal._events import RunEvent
from lockgate.stores import CompositeStore, ValkeyLifecycleStore
from test_cli import _one_error_line, enter_home
from test_kafka_processes import folded, topic_records
from valkey_server import shared_url

SCHEMA = Path(__file__).resolve().parents[1] / "schemas" / "run_event.avsc"


@dataclass
class Deployment:
    """A Valkey namespace and a topic prefix of the test's own."""

    bootstrap: str
    shards: int = 2
    namespace: str = ""
    prefix: str = ""

    def __post_init__(self) -> None:
        self.namespace = self.namespace or f"kf{uuid.uuid4().hex[:10]}"
        self.prefix = self.prefix or f"kf{uuid.uuid4().hex[:10]}"

    @property
    def store_url(self) -> str:
        return f"{shared_url()}?namespace={self.namespace}&shard_count={self.shards}"

    @property
    def journal_url(self) -> str:
        return f"kafka://{self.bootstrap}?topic_prefix={self.prefix}"

    @property
    def topic(self) -> str:
        return f"{self.prefix}.journal"

    def store(self) -> CompositeStore:
        """A fresh composite: nothing of its journals in memory yet."""
        store = open_store(self.store_url, journal=self.journal_url, lock_ttl=5.0)
        assert isinstance(store, CompositeStore)
        return store


@pytest.fixture
def deployment(kafka_bootstrap: str) -> Deployment:
    return Deployment(kafka_bootstrap)


def high_watermarks(bootstrap: str, topic: str, partitions: int) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex})
    try:
        return [
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
            for p in range(partitions)
        ]
    finally:
        consumer.close()


#: What a Valkey store records in a namespace on first contact, before anything else.
NAMESPACE_RECORD = {"layout", "shards"}


def no_runs_in(namespace: str) -> bool:
    """Whether ``namespace`` holds nothing but the record of its layout (written when a
    store first connects, before the journal is opened)."""
    keys = valkey_snapshot(namespace)
    return {key.decode().rsplit(":", 1)[-1] for key in keys} <= NAMESPACE_RECORD


def valkey_snapshot(namespace: str) -> dict[bytes, bytes | None]:
    """Every key of ``namespace`` with its serialized value."""
    client = redis.Redis.from_url(shared_url())
    try:
        return {key: client.dump(key) for key in client.scan_iter(match=f"*{namespace}*")}
    finally:
        client.close()


# -- workflows the tests run through an inline runner ------------------------------------------

EXECUTED: dict[str, int] = {}


@step
def charge(amount: int, ctx: StepContext) -> int:
    EXECUTED[ctx.run_id] = EXECUTED.get(ctx.run_id, 0) + 1
    return amount * 10


@workflow(name="kf_two_steps", version="1")
async def kf_two_steps(ctx: WorkflowContext, amount: int) -> int:
    first = await charge(amount)
    return first + await charge(amount + 1)


@workflow(name="kf_one_step", version="1")
async def kf_one_step(ctx: WorkflowContext, amount: int) -> int:
    return await charge(amount)


@workflow(name="kf_signalled", version="1")
async def kf_signalled(ctx: WorkflowContext, amount: int) -> int:
    first = await charge(amount)
    extra = await ctx.wait_for_signal("go")
    return first + int(extra["add"])


def run_all(store: CompositeStore, name: str, params: list[dict[str, Any]]) -> list[str]:
    """Submit one run per ``params`` and drive each until it ends or waits."""

    async def go() -> list[str]:
        runner = InlineWorkflowRunner(store=store, clock=SystemClock())
        await runner.start()
        try:
            handles = [await runner.client.submit(name, p) for p in params]
            for handle in handles:
                await runner.run(name, handle.run_id)
            return [handle.run_id for handle in handles]
        finally:
            await runner.aclose()

    return asyncio.run(go())


# -- a client outside Python -------------------------------------------------------------------


def kcat_records(kcat: str, bootstrap: str, topic: str) -> list[tuple[int, int, str, bytes]]:
    """(partition, offset, headers as kcat prints them, value) of every record: the value
    framed by its length (``%R``, 32-bit big-endian), never split on a separator."""
    done = subprocess.run(
        [kcat, "-b", bootstrap, "-t", topic, "-C", "-e", "-q", "-f", r"%p %o %h\n%R%s"],
        capture_output=True,
        timeout=60,
        check=True,
    )
    out, at, found = done.stdout, 0, []
    while at < len(out):
        end = out.index(b"\n", at)
        partition, offset, headers = out[at:end].decode().split(" ", 2)
        (length,) = struct.unpack(">i", out[end + 1 : end + 5])
        value = out[end + 5 : end + 5 + length]
        assert len(value) == length, "kcat's output ended inside a value"
        found.append((int(partition), int(offset), headers, value))
        at = end + 5 + length
    return found


def test_kcat_reads_the_journal_and_the_repository_schema_decodes_every_record(
    deployment: Deployment,
) -> None:
    kcat = shutil.which("kcat")
    if kcat is None:
        pytest.fail("kcat is not installed: make kcat installs it (apt-get install kcat, as root)")
    store = deployment.store()
    run_ids = run_all(store, "kf_two_steps", [{"amount": n} for n in range(4)])
    records = kcat_records(kcat, deployment.bootstrap, deployment.topic)
    schema = fastavro.parse_schema(json.loads(SCHEMA.read_text()))
    seen: dict[str, dict[int, dict[str, Any]]] = {run_id: {} for run_id in run_ids}
    for partition, _offset, header_text, value in records:
        record: Any = fastavro.schemaless_reader(io.BytesIO(value), schema, None)
        headers = dict(pair.split("=", 1) for pair in header_text.split(","))
        assert headers["lg-workflow"] == "kf_two_steps"
        assert headers["lg-run-id"] == record["run_id"]
        assert headers["lg-run-seq"] == str(record["run_seq"])
        assert headers["lg-schema"] == record["schema_version"]
        assert headers.get("lg-epoch") == record["headers"].get("lg-epoch")
        assert partition == store.lifecycle.shard_of("kf_two_steps", record["run_id"])  # type: ignore[attr-defined]
        seen[record["run_id"]].setdefault(record["run_seq"], record)
    for run_id in run_ids:
        journal = store.load_run("kf_two_steps", run_id)
        decoded = [seen[run_id][seq] for seq in sorted(seen[run_id])]
        assert [
            RunEvent(
                r["kind"],
                json.loads(r["payload"]),
                r["run_id"],
                schema_version=r["schema_version"],
                run_seq=r["run_seq"],
                headers=r["headers"],
            )
            for r in decoded
        ] == journal
        assert [e.kind for e in journal][-1] == "run:complete"
    store.close()


# -- records written twice -----------------------------------------------------------------------


def test_records_a_retrying_producer_wrote_twice_fold_once_for_reads_and_the_replay(
    deployment: Deployment,
) -> None:
    writer = deployment.store()
    (run_id,) = run_all(writer, "kf_signalled", [{"amount": 4}])
    assert writer.get_run("kf_signalled", run_id).status == RunStatus.SIGNAL_WAITING  # type: ignore[union-attr]
    writer.close()
    # Every record of the run produced again, as a producer retrying without idempotence
    # (or a second copier) would: same partition, key, headers and value.
    first = topic_records(deployment.bootstrap, deployment.topic, deployment.shards)
    again = Producer({"bootstrap.servers": deployment.bootstrap, "enable.idempotence": False})
    for record in first:
        again.produce(
            deployment.topic,
            record.value,
            key=record.key,
            partition=record.partition,
            headers=list(record.headers.items()),
        )
    assert again.flush(30) == 0
    doubled = topic_records(deployment.bootstrap, deployment.topic, deployment.shards)
    assert len(doubled) == 2 * len(first)
    journal = folded(first)[run_id]
    assert folded(doubled)[run_id] == journal  # copies are the same events

    reader = deployment.store()
    assert reader.load_run("kf_signalled", run_id) == journal
    assert reader.get_last_event("kf_signalled", run_id) == journal[-1]
    assert reader.get_run("kf_signalled", run_id).status == RunStatus.SIGNAL_WAITING  # type: ignore[union-attr]
    reader.close()

    # A fresh process's runner resumes the run: its replay sees charge's result once (the
    # step is not run again, and the body is not out of step with its journal).
    resumer = deployment.store()
    ran_before = EXECUTED.get(run_id, 0)

    async def resume() -> Any:
        runner = InlineWorkflowRunner(store=resumer, clock=SystemClock())
        await runner.start()
        try:
            await runner.client.signal("kf_signalled", run_id, "go", {"add": 7})
            await runner.run("kf_signalled", run_id)
            return await runner.client.handle("kf_signalled", run_id).result(timeout=10)
        finally:
            await runner.aclose()

    assert asyncio.run(resume()) == 47
    assert EXECUTED.get(run_id, 0) == ran_before
    final = deployment.store().load_run("kf_signalled", run_id)
    assert [e.run_seq for e in final] == list(range(1, len(final) + 1))
    assert sum(e.is_terminal for e in final) == 1
    resumer.close()


def test_two_stores_copying_one_runs_outbox_at_once_keep_each_event_once(
    deployment: Deployment,
) -> None:
    # Runs whose events are in the Valkey outbox only (written through the lifecycle store
    # alone): the first reads through two composites at once both copy them.
    lifecycle = ValkeyLifecycleStore(
        shared_url(), namespace=deployment.namespace, shard_count=deployment.shards
    )
    run_ids = [f"r{n}" for n in range(12)]
    for run_id in run_ids:
        lifecycle.submit_run("kf_copied", run_id, {"n": run_id})
        lifecycle.append_events(
            "kf_copied", run_id, [RunEvent("run:complete", {"result": run_id}, run_id)]
        )
    stores = [deployment.store(), deployment.store()]
    journals: dict[int, dict[str, list[RunEvent]]] = {0: {}, 1: {}}
    barrier = threading.Barrier(2)

    def read(index: int) -> None:
        for run_id in run_ids:
            barrier.wait(timeout=30)
            journals[index][run_id] = stores[index].load_run("kf_copied", run_id)

    threads = [threading.Thread(target=read, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    records = topic_records(deployment.bootstrap, deployment.topic, deployment.shards)
    copies = {(r.headers["lg-run-id"], r.headers["lg-run-seq"]) for r in records}
    assert len(records) > len(copies), "no event was copied twice: the race was not run"
    expected = folded(records)
    for run_id in run_ids:
        assert [e.kind for e in expected[run_id]] == ["run:init", "run:complete"]
        assert journals[0][run_id] == journals[1][run_id] == expected[run_id]
        assert deployment.store().load_run("kf_copied", run_id) == expected[run_id]
    for store in stores:
        store.close()
    lifecycle.close()


# -- typed errors, nothing written --------------------------------------------------------------


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.delenv("LOCKGATE_JOURNAL_URL", raising=False)
    yield from enter_home(tmp_path, monkeypatch)


def test_a_topic_with_another_partition_count_is_refused_with_nothing_written(
    deployment: Deployment, home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    admin = AdminClient({"bootstrap.servers": deployment.bootstrap})
    admin.create_topics([NewTopic(deployment.topic, 3, 1)])[deployment.topic].result(30)
    with pytest.raises(JournalTopicMismatch) as refused:
        deployment.store()
    assert refused.value.code == ErrorCode.CONFIGURATION
    assert "use another topic_prefix, or the shard count the topic was made for" in str(
        refused.value
    )
    argv = ["runs", "list", "kf_two_steps"]
    flags = ["--store", deployment.store_url, "--journal", deployment.journal_url]
    assert main([*argv, *flags]) == 2
    assert "has 3 partition(s)" in _one_error_line(capsys.readouterr().err)
    topics = admin.list_topics(timeout=10).topics
    assert len(topics[deployment.topic].partitions) == 3  # never repartitioned
    assert high_watermarks(deployment.bootstrap, deployment.topic, 3) == [0, 0, 0]
    assert no_runs_in(deployment.namespace)


def test_an_unreachable_bootstrap_address_is_store_unavailable_with_nothing_written(
    deployment: Deployment, home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    journal = "kafka://127.0.0.1:1?topic_prefix=nowhere&read_timeout=2"
    with pytest.raises(StoreUnavailable) as failed:
        open_store(deployment.store_url, journal=journal)
    assert failed.value.code == ErrorCode.STORE_UNAVAILABLE
    assert "Kafka at 127.0.0.1:1" in str(failed.value)
    argv = ["runs", "list", "kf_two_steps", "--store", deployment.store_url, "--journal", journal]
    assert main(argv) == 1
    assert "Kafka at 127.0.0.1:1" in _one_error_line(capsys.readouterr().err)
    assert no_runs_in(deployment.namespace)


def test_a_record_that_does_not_decode_is_a_typed_error_with_nothing_written(
    deployment: Deployment,
) -> None:
    writer = deployment.store()
    (run_id,) = run_all(writer, "kf_signalled", [{"amount": 1}])  # waits for its signal
    partition = writer.lifecycle.shard_of("kf_signalled", run_id)  # type: ignore[attr-defined]
    # Garbage with the run's headers, after its first record, in its partition; the writer
    # holds the run's journal in memory from before (its outbox vouching for every event, it
    # answers from memory and never meets the record), a reader comes fresh.
    held = writer.load_run("kf_signalled", run_id)
    junk = Producer({"bootstrap.servers": deployment.bootstrap})
    junk.produce(
        deployment.topic,
        b"\xff\x00 not avro",
        partition=partition,
        headers=[("lg-workflow", b"kf_signalled"), ("lg-run-id", run_id.encode())],
    )
    assert junk.flush(30) == 0
    before = high_watermarks(deployment.bootstrap, deployment.topic, deployment.shards)
    kept = valkey_snapshot(deployment.namespace)
    reader = deployment.store()
    for store in (reader, reader):  # twice: a read must not move past the record
        with pytest.raises(JournalRecordUndecodable) as refused:
            store.load_run("kf_signalled", run_id)
        error = refused.value
        assert error.code == ErrorCode.JOURNAL_RECORD_UNDECODABLE
        assert isinstance(error, StoreProtocolError)  # not an outage: waiting does not mend it
        assert (error.topic, error.partition, error.offset) == (
            deployment.topic,
            partition,
            before[partition] - 1,
        )
        message = str(error)
        assert f"{deployment.topic!r} partition {partition} offset {error.offset}" in message
        assert "keep other producers off the topic" in message
    assert writer.load_run("kf_signalled", run_id) == held
    writer.close()
    reader.close()
    assert high_watermarks(deployment.bootstrap, deployment.topic, deployment.shards) == before
    assert valkey_snapshot(deployment.namespace) == kept


def test_a_requeue_the_lifecycle_made_is_not_reported_failed_when_its_copy_is(
    deployment: Deployment,
) -> None:
    """A requeue (an attempt cut short by a journal outage puts its run back) lands in Valkey
    even when its event cannot be copied yet: the caller is told it landed, and the event
    waits in the outbox for the next operation of the run to copy it."""
    from lockgate.stores import KafkaEventLogStore

    lifecycle = ValkeyLifecycleStore(shared_url(), namespace=deployment.namespace)
    # Records for a partition the topic lacks: Kafka cannot keep them, as when it is away.
    log = KafkaEventLogStore(
        deployment.bootstrap,
        topic_prefix=deployment.prefix,
        locate=lambda *_: 5,
        delivery_timeout=2,
    )
    store = CompositeStore(lifecycle=lifecycle, events=log)
    lifecycle.submit_run("kf_requeued", "r1", {})
    assert lifecycle.claim_next_run("kf_requeued", "lease-1") == "r1"
    store.requeue_run("kf_requeued", "r1", "lease-1", reason="store_unavailable")
    assert store.get_run("kf_requeued", "r1").status == RunStatus.PENDING  # type: ignore[union-attr]
    assert [e.kind for e in lifecycle.events_after("kf_requeued", "r1", 0)] == [
        "run:init",
        "run:requeued",
    ]
    with pytest.raises(StoreUnavailable):  # a journal read still says the log is away
        store.load_run("kf_requeued", "r1")
    store.close()


def test_a_terminal_write_cancelled_between_valkey_and_the_topic_still_reaches_the_topic(
    deployment: Deployment,
) -> None:
    """An attempt's task is cancelled while its terminal write is on its way: Valkey has taken
    it (the run is complete there, its lock gone), the copy to the topic is not made yet. An
    attempt's own heartbeat does that when it asks for the lock the terminal just released.
    No later operation copies the outbox of an ended run, so the write must run to its end:
    the raw topic, as the rebuild and ``lockgate journal`` read it, holds the run:complete."""
    name, run_id, lease = "kf_ended", "r1", "worker-a/1"
    setup = deployment.store()
    setup.submit_run(name, run_id, {})
    assert setup.claim_next_run(name, lease) == run_id
    setup.close()
    watcher = ValkeyLifecycleStore(
        shared_url(), namespace=deployment.namespace, shard_count=deployment.shards
    )

    def terminals_on_topic() -> list[str]:
        records = topic_records(deployment.bootstrap, deployment.topic, deployment.shards)
        journal = folded(records).get(run_id, [])
        return [event.kind for event in journal if event.is_terminal]

    async def end_and_cancel() -> list[str]:
        store = deployment.store()  # a fresh process: nothing of the run copied by it yet
        finish = store.coroutine_for(store.finish_if_quiet)
        assert finish is not None  # the write runs natively on the loop, as in a worker
        terminal = RunEvent("run:complete", {"result": 1}, run_id)
        task = asyncio.create_task(finish(name, run_id, [terminal], fence=lease))
        deadline = time.monotonic() + 60
        while (info := watcher.get_run(name, run_id)) is None or not info.status.is_terminal:
            assert time.monotonic() < deadline, "Valkey never took the terminal"
            assert not task.done(), task
            await asyncio.sleep(0)
        # The loop is held here: the write is between Valkey's answer and the topic's.
        assert not task.done(), "the write ended before it could be cut short"
        assert terminals_on_topic() == [], "the copy was made before the cancel: no race run"
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # The loop goes on (a worker's does): the write, cut short for its caller, goes on.
        while not (found := await asyncio.to_thread(terminals_on_topic)):
            assert time.monotonic() < deadline, "the run:complete never reached the topic"
            await asyncio.sleep(0.05)
        store.close()
        return found

    assert asyncio.run(end_and_cancel()) == ["run:complete"]
    assert watcher.get_run(name, run_id).status == RunStatus.COMPLETE  # type: ignore[union-attr]
    assert watcher.events_after(name, run_id, 0) == []  # its outbox dropped once copied
    watcher.close()


def test_a_heartbeat_during_the_terminal_write_is_no_lost_lease(
    deployment: Deployment, caplog: pytest.LogCaptureFixture
) -> None:
    """The attempt's heartbeat comes while its terminal write is on its way, after Valkey took
    it: the lock it asks for is gone, released by the terminal. That is not a lost lease: the
    attempt is not cut short, it ends COMPLETED, and the topic holds the run:complete."""
    from lockgate import ManualClock
    from lockgate.attempt._attempt import Attempt
    from lockgate.attempt._unwind import AttemptOutcome
    from lockgate.workflow._spec import spec_of

    lease = "worker-a/1"
    setup = deployment.store()
    handle = asyncio.run(WorkflowClient(setup).submit("kf_one_step", {"amount": 3}))
    name, run_id = handle.name, handle.run_id
    assert setup.claim_next_run(name, lease) == run_id
    setup.close()
    watcher = ValkeyLifecycleStore(
        shared_url(), namespace=deployment.namespace, shard_count=deployment.shards
    )

    async def attempt_with_a_late_heartbeat() -> AttemptOutcome:
        store = deployment.store()  # a fresh process: its first copy of the run reads the topic
        clock = ManualClock()
        attempt = Attempt(
            store=store,
            spec=spec_of(kf_one_step),
            run_id=run_id,
            lease=lease,
            clock=clock,
            events=await asyncio.to_thread(store.load_run, name, run_id),
        )
        task = asyncio.create_task(attempt.execute())
        deadline = time.monotonic() + 60
        while (info := watcher.get_run(name, run_id)) is None or not info.status.is_terminal:
            assert time.monotonic() < deadline, "Valkey never took the terminal"
            assert not task.done(), task
            await asyncio.sleep(0)
        assert not task.done(), "the terminal write ended before the heartbeat could come"
        clock.advance(store.heartbeat_interval)  # the heartbeat is due: it asks Valkey now
        outcome = await task
        store.close()
        return outcome

    with caplog.at_level(logging.WARNING, logger="lockgate"):
        assert asyncio.run(attempt_with_a_late_heartbeat()) == AttemptOutcome.COMPLETED
    assert "lost" not in caplog.text
    assert EXECUTED[run_id] == 1
    records = topic_records(deployment.bootstrap, deployment.topic, deployment.shards)
    journal = folded(records)[run_id]
    assert [e.kind for e in journal if e.is_terminal] == ["run:complete"]
    assert journal[-1].payload["result"] == 30
    assert watcher.events_after(name, run_id, 0) == []
    watcher.close()
