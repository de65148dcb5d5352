"""A CompositeStore's operations on the event loop (``stores/composite/_composed.py``): the same
operation driven with plain calls or natively gives the same answers and errors; on Valkey +
Kafka the worker's hot calls run natively, an awaited append returns only once Kafka has the
copy, the copies of many runs in flight share the producer, and a batch claim reads its runs'
journals side by side."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Callable, Iterator

import pytest

from lockgate import (
    EventKind,
    RunEvent,
    StoreUnavailable,
    WorkflowClient,
    WorkflowContext,
    step,
    workflow,
)
from lockgate.stores import CompositeStore, KafkaEventLogStore, ValkeyLifecycleStore
from lockgate.stores._calls import call_store
from lockgate.stores.composite._composed import Call, Op, Together, drive, drive_natively
from valkey_server import shared_url


class _Counter:
    """A backend of plain in-process state: what the drivers are tested against."""

    blocking_io = False

    def __init__(self) -> None:
        self.calls: list[str] = []

    def add(self, a: int, b: int = 0) -> int:
        self.calls.append(f"add {a} {b}")
        return a + b

    def fail(self) -> None:
        raise ValueError("refused")


def _sums(backend: _Counter) -> Op[list[int]]:
    one = yield Call(backend.add, (1,), {"b": 2})
    both = yield Together((_twice(backend, one), _twice(backend, 10)))
    with contextlib.suppress(ValueError):  # an error thrown in is the operation's to handle
        yield Call(backend.fail)
    return [one, *both]


def _twice(backend: _Counter, n: int) -> Op[int]:
    once = yield Call(backend.add, (n, n))
    return (yield Call(backend.add, (once, once)))


async def test_an_operation_answers_the_same_driven_plainly_or_natively() -> None:
    plain, native = _Counter(), _Counter()
    assert drive(_sums(plain)) == [3, 12, 40] == await drive_natively(_sums(native))
    assert sorted(plain.calls) == sorted(native.calls)


async def test_an_error_the_operation_does_not_handle_reaches_its_caller() -> None:
    def op(backend: _Counter) -> Op[None]:
        yield Call(backend.fail)

    with pytest.raises(ValueError, match="refused"):
        drive(op(_Counter()))
    with pytest.raises(ValueError, match="refused"):
        await drive_natively(op(_Counter()))


Make = Callable[..., CompositeStore]


@pytest.fixture
def composites(kafka_bootstrap: str) -> Iterator[Make]:
    namespace, prefix = f"kn{uuid.uuid4().hex[:10]}", f"kn{uuid.uuid4().hex[:10]}"
    made: list[CompositeStore] = []

    def make(**options: object) -> CompositeStore:
        lifecycle = ValkeyLifecycleStore(shared_url(), namespace=namespace)
        events = KafkaEventLogStore(
            kafka_bootstrap, topic_prefix=prefix, shard_count=lifecycle.shard_count, **options
        )
        made.append(CompositeStore(lifecycle=lifecycle, events=events))
        return made[-1]

    yield make
    for store in made:
        store.close()


@step(name="kn_add")
async def add(n: int) -> int:
    return n + 1


@workflow(name="kn_flow")
async def flow(ctx: WorkflowContext, n: int) -> int:
    return await add(await add(n))


def test_the_hot_calls_run_natively_and_the_others_on_a_store_thread(composites: Make) -> None:
    store = composites()
    for method in (store.append_and_poll, store.finish_if_quiet, store.claim_next_runs_loaded):
        assert store.coroutine_for(method) is not None
    assert store.coroutine_for(store.list_runs) is None  # not composed: a store thread
    other = composites()
    assert store.coroutine_for(other.append_and_poll) is None  # another store's method


async def test_a_native_append_returns_once_kafka_has_the_copy(composites: Make) -> None:
    writer, reader = composites(), composites()
    handle = await WorkflowClient(writer, poll_interval=0.01).submit("kn_flow", {"n": 1})
    claims = await call_store(writer, writer.claim_next_runs_loaded, "kn_flow", ["lease-1"])
    [claimed] = list(claims)
    assert [e.kind for e in claimed.events or []] == [EventKind.RUN_INIT]
    done = RunEvent(
        "step:done", {"call_index": 0, "step_id": "kn_add", "result": 2}, claimed.run_id
    )
    await call_store(
        writer, writer.append_and_poll, "kn_flow", handle.run_id, [done], fence="lease-1"
    )
    # Another process's store, reading the topic, finds the copy already there.
    journal = reader.events.load_run("kn_flow", handle.run_id)
    assert [e.kind for e in journal] == [EventKind.RUN_INIT, EventKind.STEP_DONE]
    assert journal[-1].headers.get("lg-epoch") is not None


async def test_a_batch_claim_reads_every_claimed_runs_journal(composites: Make) -> None:
    submitter, worker = composites(), composites()
    client = WorkflowClient(submitter, poll_interval=0.01)
    runs = {(await client.submit("kn_flow", {"n": n})).run_id for n in range(12)}
    leases = [f"lease-{i}" for i in range(12)]
    claims = await call_store(worker, worker.claim_next_runs_loaded, "kn_flow", leases)
    loaded = {c.run_id: c.events for c in claims}
    assert set(loaded) == runs
    assert all([e.kind for e in events or []] == [EventKind.RUN_INIT] for events in loaded.values())


async def test_native_appends_of_many_runs_in_flight_are_all_acknowledged(
    composites: Make,
) -> None:
    store = composites()
    log = store.events
    assert isinstance(log, KafkaEventLogStore)
    append = log.coroutine_for(log.append_copies)
    assert append is not None

    async def run(i: int) -> None:
        for seq in range(1, 6):
            await append(
                "kn_many", f"r{i}", [RunEvent("step:done", {"i": seq}, f"r{i}", run_seq=seq)]
            )

    await asyncio.gather(*(run(i) for i in range(200)))
    # A store of its own, with no lifecycle, reads the partition from its start.
    fresh = KafkaEventLogStore(log.bootstrap_servers, topic_prefix=log.topic[: -len(".journal")])
    try:
        for i in (0, 99, 199):
            assert [e.payload["i"] for e in fresh.load_run("kn_many", f"r{i}")] == [1, 2, 3, 4, 5]
    finally:
        fresh.close()


async def test_a_native_append_kafka_cannot_keep_is_store_unavailable(composites: Make) -> None:
    store = composites(delivery_timeout=1.0)
    log = store.events
    assert isinstance(log, KafkaEventLogStore)
    append = log.coroutine_for(log.append_copies)
    assert append is not None
    log.shard_count, log.locate = 1, lambda name, run_id: 7  # a partition the topic lacks
    with pytest.raises(StoreUnavailable):
        await append("kn_lost", "r-1", [RunEvent("run:init", {}, "r-1", run_seq=1)])
