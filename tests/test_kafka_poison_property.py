"""Nothing a record holds stops a topic consumer: a :class:`BoundConsumer` and a
:class:`TriggerConsumer`, real Kafka consumers on the real broker, are fed records whose
values, keys and headers are arbitrary bytes (hypothesis), mixed with good records and with
values known to be poison (100,000-deep arrays, a lone surrogate escape, NaN, 1e400) and good
ones at the edges of what lockgate carries (nesting of exactly 256 levels, a 4,001-digit
number, NUL and surrogate-pair escapes), each of those once in an explicit example. After
each example, every record is in exactly one place: a run (the bound topic's) or a fire (the
trigger topic's), or the dead-letter topic, once; every good record is in a run, with its value
as sent; every known-poison value is dead-lettered as ``not-json``; and every run made executes
exactly once. The consumer serves on from one example to the next.

The bound consumer serves a Valkey + Kafka composite store, the trigger consumer an SQLite
file; a worker in burst mode (``run_until_idle``) runs what they submitted. Last, a submit that
fails of a bug (a validator of ``value`` raising ``RuntimeError``) dead-letters its record as
``submit-failed``, the record's bytes as they were, and the records around it run."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import pytest
from confluent_kafka import Consumer, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st
from pydantic import BeforeValidator

from lockgate import (
    Collect,
    KafkaTopic,
    RunStatus,
    SQLiteStore,
    WorkflowContext,
    open_store,
    workflow,
)
from lockgate.stores import CompositeStore, KafkaEventLogStore, Store
from lockgate.streams import TriggerConsumer
from lockgate.streams._dead_letters import DETAIL_HEADER, REASON_HEADER, SOURCE_HEADER
from lockgate.streams.bound import BoundConsumer, bound_run_id
from lockgate.worker import WorkerOptions, WorkflowWorker
from lockgate.workflow._spec import spec_of
from valkey_server import shared_url

BOUND = f"kpp-bound-{uuid.uuid4().hex[:8]}"
#: Executions of each run's one step, by workflow and run id.
EXECUTED: collections.Counter[tuple[str, str]] = collections.Counter()


def executed(workflow_name: str, run_id: str) -> str:
    EXECUTED[(workflow_name, run_id)] += 1
    return run_id


@workflow(name="kpp_bound", topic=KafkaTopic(BOUND, max_concurrency=16))
async def kpp_bound(ctx: WorkflowContext, value: Any) -> str:
    return str(await ctx.step(executed, "kpp_bound", ctx.run_id))


@workflow(name="kpp_trigger", trigger=Collect(key="k", max_events=1, window_seconds=60))
async def kpp_trigger(
    ctx: WorkflowContext, key: str, events: list[dict[str, Any]], count: int
) -> str:
    return str(await ctx.step(executed, "kpp_trigger", ctx.run_id))


#: Values no consumer may take: each must be dead-lettered as not-json.
POISON = [
    b"[" * 100_000 + b"]" * 100_000,
    b"{" * 50_000 + b"}" * 50_000,
    b"[" * 257 + b"]" * 257,  # one level past MAX_DEPTH
    # Decodable, but deep enough for a later step's recursion (a params check, the store's
    # encoding, the journal's) to run out of stack.
    b'{"k": "a", "n": 1, "x": ' + b"[" * 950 + b"]" * 950 + b"}",
    b'{"k": "a", "n": 1, "s": "\\ud800"}',
    b'{"k": "a", "n": 1, "s": "\\udfff\\ud800"}',
    b'{"k": "a", "n": NaN}',
    b'{"k": "a", "n": 1e400}',
    b'{"k": "a", "n": 1' + b"0" * 5000 + b"}",  # past the interpreter's digit limit
    b'{"k": "a", "n": 1}\xff',
    b"\xed\xa0\x80",  # a surrogate encoded as UTF-8 bytes
]

#: JSON at the edges of what lockgate carries, for a good record's ``x``: each must run.
EDGES = [
    "[" * 255 + "]" * 255,  # with the event's object around it: MAX_DEPTH levels exactly
    "1" + "0" * 4000,  # a whole number under the interpreter's digit limit
    "-0.0",
    "1.7976931348623157e308",
    "5e-324",
    '"\\u0000\\ud83d\\ude00\\u2028"',  # NUL, a surrogate pair (valid), a line separator
    '{"": {"\\u00e9": [null, true, false, ""]}}',
]

texts = st.text(max_size=12)
headers = st.lists(
    st.tuples(
        st.one_of(texts, st.binary(max_size=8)), st.one_of(st.none(), st.binary(max_size=16))
    ),
    max_size=3,
)
keys = st.one_of(st.none(), st.binary(max_size=24), texts.map(str.encode))


@st.composite
def records(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Records, each ``{"kind": "good" | "poison" | "any", "value", "key", "headers"}``; a
    good value is an object ``{"k": KEY, "n": N, "tag": ...}`` (N unique per test) with the
    record key either its ``k`` or none."""
    made = []
    for _ in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(["good", "good", "poison", "any"]))
        if kind == "good":
            key = draw(st.sampled_from(["a", "b", "ключ", "😀"]))
            event = {"k": key, "n": next(NUMBERS), "tag": draw(texts)}
            value = json.dumps(event, ensure_ascii=draw(st.booleans())).encode()
            edge = draw(st.one_of(st.none(), st.sampled_from(EDGES)))
            if edge is not None:
                value = value[:-1] + b', "x": ' + edge.encode() + b"}"
            record_key = draw(st.sampled_from([None, key.encode()]))
        elif kind == "poison":
            value, record_key = draw(st.sampled_from(POISON)), draw(keys)
        else:
            value = draw(st.one_of(st.none(), st.binary(max_size=64)))
            record_key = draw(keys)
        made.append({"kind": kind, "value": value, "key": record_key, "headers": draw(headers)})
    return made


NUMBERS = iter(range(10**9))


def edge_batch() -> list[dict[str, Any]]:
    """One good record per edge, and one record per poison value: the explicit example."""
    made = []
    for edge in EDGES:
        value = f'{{"k": "a", "n": {next(NUMBERS)}, "x": {edge}}}'.encode()
        made.append({"kind": "good", "value": value, "key": None, "headers": []})
    made.extend({"kind": "poison", "value": v, "key": None, "headers": []} for v in POISON)
    return made


def produce(producer: Producer, topic: str, batch: list[dict[str, Any]]) -> list[int]:
    """``batch`` sent to partition 0 of ``topic`` in order; the offset of each."""
    offsets = [-1] * len(batch)

    def reporter(index: int) -> Any:
        def report(err: Any, msg: Message) -> None:
            assert err is None, err
            offsets[index] = msg.offset() or 0

        return report

    for index, record in enumerate(batch):
        producer.produce(
            topic,
            value=record["value"],
            key=record["key"],
            partition=0,
            headers=record["headers"],
            on_delivery=reporter(index),
        )
    assert producer.flush(30) == 0
    assert -1 not in offsets
    return offsets


class DeadLetterReader:
    """The copies of a dead-letter topic's partition 0, read on as they come."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": uuid.uuid4().hex,
                "enable.partition.eof": True,
                "enable.auto.commit": False,
            }
        )
        self.consumer.assign([TopicPartition(topic, 0, 0)])
        #: The offset after the last copy read.
        self.read = 0
        #: Source offset -> reasons of its copies.
        self.copies: dict[int, list[str]] = collections.defaultdict(list)

    def read_to_end(self) -> None:
        """Read up to the partition's end as of now."""
        partition = TopicPartition(self.topic, 0)
        _, high = self.consumer.get_watermark_offsets(partition, timeout=10, cached=False)
        deadline = time.monotonic() + 30
        while self.read < high:
            assert time.monotonic() < deadline, f"{self.topic} not read to its end"
            message = self.consumer.poll(0.2)
            if message is None or message.error() is not None:
                continue
            self.read = (message.offset() or 0) + 1
            found = {k: v.decode() for k, v in message.headers() or []}
            source = found[SOURCE_HEADER]
            self.copies[int(source.rsplit("/", 1)[1])].append(found[REASON_HEADER])

    def close(self) -> None:
        self.consumer.close()


def run_all(store: Store, fn: Any) -> None:
    worker = WorkflowWorker(
        workflows=[fn],
        store=store,
        worker_id=f"kpp-{uuid.uuid4().hex[:6]}",
        options=WorkerOptions(max_concurrent_runs=16, claim_poll_interval=0.01),
    )
    asyncio.run(worker.run_until_idle())


def check_each_once(
    batch: list[dict[str, Any]],
    offsets: list[int],
    runs: dict[int, Any],
    dead: DeadLetterReader,
    workflow_name: str,
) -> None:
    """Each record of ``batch`` in exactly one run (``runs``: offset -> the run's value) or
    dead-lettered once; good ones in a run, as sent; poison dead-lettered as not-json; and
    each run executed once."""
    for record, offset in zip(batch, offsets, strict=True):
        copies = dead.copies.get(offset, [])
        in_run = offset in runs
        assert in_run != bool(copies), (record, offset, in_run, copies)
        assert len(copies) <= 1, (record, copies)
        if record["kind"] == "good":
            assert in_run, (record, copies)
            assert runs[offset]["value"] == json.loads(record["value"])
        if record["kind"] == "poison":
            assert copies == ["not-json"], (record, copies)
        if in_run:
            assert EXECUTED[(workflow_name, runs[offset]["run_id"])] == 1, record


# -- the bound consumer --------------------------------------------------------------------------


@pytest.fixture
def composite(kafka_bootstrap: str) -> Iterator[CompositeStore]:
    store = open_store(
        f"{shared_url()}?namespace=kpp{uuid.uuid4().hex[:8]}",
        journal=f"kafka://{kafka_bootstrap}?topic_prefix=kpp{uuid.uuid4().hex[:8]}",
    )
    assert isinstance(store, CompositeStore)
    yield store
    store.close()


@contextlib.contextmanager
def joined(store: CompositeStore, fn: Any) -> Iterator[BoundConsumer]:
    """A BoundConsumer of ``fn``'s topic (made here, one partition), once it owns it."""
    spec = spec_of(fn)
    assert spec.topic is not None
    journal = store.events
    assert isinstance(journal, KafkaEventLogStore)
    admin = AdminClient({"bootstrap.servers": journal.bootstrap_servers})
    topic = spec.topic.name
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=30)
    consumer = BoundConsumer(store, journal, spec, worker_id=f"kpp-{spec.name}")
    consumer.open()
    try:
        deadline = time.monotonic() + 60
        while not consumer.assigned.is_set():
            consumer.step()
            assert time.monotonic() < deadline, "no assignment"
        yield consumer
    finally:
        consumer.close()


@pytest.fixture
def bound(composite: CompositeStore) -> Iterator[tuple[CompositeStore, BoundConsumer]]:
    with joined(composite, kpp_bound) as consumer:
        yield composite, consumer


def pump_bound(consumer: BoundConsumer, high: int, *, settled: bool) -> None:
    """Step until the partition is read up to ``high``, every record submitted or
    dead-lettered (its copy acknowledged), and, if ``settled``, no run left open."""
    deadline = time.monotonic() + 15
    while True:
        consumer.step()
        flow = consumer._flows.get(0)
        assert flow is not None, "the partition was revoked"
        if (
            (flow.next_offset or 0) >= high
            and not flow.waiting
            and not flow.submitting
            and (not settled or consumer.in_flight == 0)
            and consumer._dead.held_at(0) is None
        ):
            return
        assert time.monotonic() < deadline, "the bound consumer did not catch up"


def test_a_bound_consumer_survives_any_record_and_runs_each_good_one_once(
    bound: tuple[CompositeStore, BoundConsumer], kafka_bootstrap: str
) -> None:
    store, consumer = bound
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True})
    dead = DeadLetterReader(kafka_bootstrap, f"{BOUND}.dlq")

    @settings(
        max_examples=20,
        deadline=None,
        # A failing example is shown as drawn: each try of a smaller one costs a broker's
        # round trips, and one that hangs, a pump's deadline.
        phases=[Phase.explicit, Phase.reuse, Phase.generate],
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    @given(batch=records())
    @example(batch=edge_batch())
    def check(batch: list[dict[str, Any]]) -> None:
        offsets = produce(producer, BOUND, batch)
        pump_bound(consumer, offsets[-1] + 1, settled=False)  # submitted or dead-lettered
        run_all(store, kpp_bound)
        pump_bound(consumer, offsets[-1] + 1, settled=True)  # and the runs seen finished
        dead.read_to_end()
        runs = {}
        for offset in offsets:
            run_id = bound_run_id(BOUND, 0, offset)
            info = store.get_run("kpp_bound", run_id)
            if info is not None:
                assert info.status == RunStatus.COMPLETE, info
                runs[offset] = {"run_id": run_id, "value": info.params["value"]}
        check_each_once(batch, offsets, runs, dead, "kpp_bound")

    try:
        check()
    finally:
        dead.close()
    assert consumer.dead_lettered > 0
    assert consumer.submitted > 0


# -- the trigger consumer ------------------------------------------------------------------------


@pytest.fixture
def trigger(kafka_bootstrap: str, tmp_path: Path) -> Iterator[tuple[SQLiteStore, TriggerConsumer]]:
    store = SQLiteStore(tmp_path / "triggers.db", create=True)
    journal = KafkaEventLogStore(kafka_bootstrap, topic_prefix=f"kpp{uuid.uuid4().hex[:8]}")
    consumer = TriggerConsumer(store, journal, spec_of(kpp_trigger), worker_id="kpp-trigger")
    consumer.open(partitions=[0])
    try:
        yield store, consumer
    finally:
        consumer.close()
        journal.close()
        store.close()


def pump_trigger(consumer: TriggerConsumer, high: int) -> None:
    deadline = time.monotonic() + 15
    while True:
        consumer.step(timeout=0.01)
        if (
            (consumer.positions().get(0) or 0) >= high
            and not consumer._to_fire
            and consumer._dead.held_at(0) is None
        ):
            consumer.step(timeout=0)
            return
        assert time.monotonic() < deadline, "the trigger consumer did not catch up"


def test_a_trigger_consumer_survives_any_record_and_fires_each_good_one_once(
    trigger: tuple[SQLiteStore, TriggerConsumer], kafka_bootstrap: str
) -> None:
    store, consumer = trigger
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True})
    dead = DeadLetterReader(kafka_bootstrap, consumer.dlq)

    @settings(
        max_examples=20,
        deadline=None,
        # A failing example is shown as drawn: each try of a smaller one costs a broker's
        # round trips, and one that hangs, a pump's deadline.
        phases=[Phase.explicit, Phase.reuse, Phase.generate],
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    @given(batch=records())
    @example(batch=edge_batch())
    def check(batch: list[dict[str, Any]]) -> None:
        offsets = produce(producer, consumer.topic, batch)
        pump_trigger(consumer, offsets[-1] + 1)
        run_all(store, kpp_trigger)
        dead.read_to_end()
        runs: dict[int, dict[str, Any]] = {}
        page, cursor = store.list_runs("kpp_trigger", limit=500)
        while True:
            for info in page:
                trigger = store.load_run("kpp_trigger", info.run_id)[0].payload["provenance"][
                    "trigger"
                ]
                assert trigger["first"] == trigger["last"]  # max_events=1: one event a fire
                assert trigger["first"] not in runs, "two fires of one record"
                assert info.status == RunStatus.COMPLETE, info
                runs[trigger["first"]] = {"run_id": info.run_id, "value": info.params["events"][0]}
            if not cursor:
                break
            page, cursor = store.list_runs("kpp_trigger", limit=500, cursor=cursor)
        check_each_once(batch, offsets, runs, dead, "kpp_trigger")

    try:
        check()
    finally:
        dead.close()
    assert consumer.dead_lettered > 0
    assert consumer.fires > 0


VALIDATED = f"kpp-validated-{uuid.uuid4().hex[:8]}"


def refuses_boom(value: Any) -> Any:
    if isinstance(value, dict) and value.get("boom"):
        raise RuntimeError("the validator's own bug")  # not a ValueError: no validation error
    return value


@workflow(name="kpp_validated", topic=KafkaTopic(VALIDATED))
async def kpp_validated(
    ctx: WorkflowContext, value: Annotated[dict[str, Any], BeforeValidator(refuses_boom)]
) -> int:
    return int(value["n"])


def test_a_submit_that_fails_of_a_bug_dead_letters_its_record_as_submit_failed(
    composite: CompositeStore, kafka_bootstrap: str
) -> None:
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True})
    boom = b'{"n": 1, "boom": true}'
    batch = [
        {"value": b'{"n": 0}', "key": b"k0", "headers": []},
        {"value": boom, "key": b"\xff", "headers": [("h", b"1")]},
        {"value": b'{"n": 2}', "key": None, "headers": []},
    ]
    with joined(composite, kpp_validated) as consumer:
        offsets = produce(producer, VALIDATED, batch)
        pump_bound(consumer, offsets[-1] + 1, settled=False)
        assert consumer.submitted == 2
        assert consumer.dead_lettered == 1
    for offset, n in ((offsets[0], 0), (offsets[2], 2)):
        info = composite.get_run("kpp_validated", bound_run_id(VALIDATED, 0, offset))
        assert info is not None
        assert info.params["value"] == {"n": n}
    assert composite.get_run("kpp_validated", bound_run_id(VALIDATED, 0, offsets[1])) is None
    dlq = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": uuid.uuid4().hex})
    dlq.assign([TopicPartition(f"{VALIDATED}.dlq", 0, 0)])
    try:
        deadline = time.monotonic() + 30
        copy = None
        while copy is None or copy.error() is not None:
            assert time.monotonic() < deadline, "no dead-letter copy"
            copy = dlq.poll(0.2)
    finally:
        dlq.close()
    headers = {k: v.decode() for k, v in copy.headers() or []}
    assert headers[REASON_HEADER] == "submit-failed"
    assert headers[DETAIL_HEADER] == "RuntimeError: the validator's own bug"
    assert headers[SOURCE_HEADER] == f"{VALIDATED}/0/{offsets[1]}"
    assert (copy.key(), copy.value()) == (b"\xff", boom)  # the record as it was
