"""Streams inside a workflow, without a broker: :class:`InMemorySource` on its own, and
``ctx.consume`` over it in runs driven by the inline runner: one journaled step per batch, a
commit after each step's outcome is durable, replays that never poll, retries, and (the
property at the end) every record in exactly one finished step however often the run dies."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lockgate import (
    Batch,
    ConfigurationError,
    DurableInvocationError,
    EventKind,
    InlineWorkflowRunner,
    InMemorySource,
    InvalidNameError,
    KafkaSource,
    ManualClock,
    MemoryStore,
    NonDeterminismError,
    RetryPolicy,
    RunEvent,
    RunHandle,
    RunStatus,
    Source,
    StepKind,
    StreamProgress,
    WorkflowClient,
    WorkflowContext,
    check_replay,
    reconstruct_state,
    workflow,
)

Drive = Callable[..., Awaitable[RunStatus]]
NO_BACKOFF = RetryPolicy(max_attempts=3, initial_backoff=0.0, jitter=0.0)


class Crash(BaseException):
    """The worker process died here: nothing in the engine catches it."""


def stream_steps(events: list[RunEvent], kind: str) -> list[RunEvent]:
    return [e for e in events if e.kind == kind and e.payload.get("kind") == StepKind.STREAM]


def handled_batches(events: list[RunEvent]) -> list[dict[str, Any]]:
    """The results of the finished stream steps that handled a batch (not the idle polls)."""
    return [
        e.payload["result"]
        for e in stream_steps(events, EventKind.STEP_DONE)
        if not e.payload["result"].get("idle")
    ]


class WatchedSource(InMemorySource[Any]):
    """An in-memory source that logs each call made to it, and checks at each commit that
    the step:done of the batch it commits is in the store already."""

    def __init__(self, store: MemoryStore | None = None, **options: Any) -> None:
        super().__init__(**options)
        self.store = store
        self.run: tuple[str, str] | None = None
        self.calls: list[tuple[str, int | None]] = []
        self.commits_before_done: list[int] = []

    def poll(self, timeout_ms: int = 5000) -> Batch[Any] | None:
        batch = super().poll(timeout_ms)
        self.calls.append(("poll", None if batch is None else batch.offset))
        return batch

    def seek(self, source_id: str, partition: int, offset: int) -> None:
        self.calls.append(("seek", offset))
        super().seek(source_id, partition, offset)

    def commit(self, source_id: str, partition: int, offset: int) -> None:
        self.calls.append(("commit", offset))
        if self.store is not None and self.run is not None:
            journal = self.store.load_run(*self.run)
            if not any(r["next_offset"] == offset for r in handled_batches(journal)):
                self.commits_before_done.append(offset)
        super().commit(source_id, partition, offset)

    def polls(self) -> list[int | None]:
        return [offset for call, offset in self.calls if call == "poll"]


# -- InMemorySource --------------------------------------------------------------------------


def test_poll_hands_out_batches_in_order_then_none() -> None:
    source = InMemorySource(records=list(range(25)), batch_size=10)
    batches = [source.poll(), source.poll(), source.poll()]
    assert [(b.offset, b.records[0], len(b.records)) for b in batches if b] == [
        (0, 0, 10),
        (10, 10, 10),
        (20, 20, 5),
    ]
    assert [b.next_offset for b in batches if b] == [10, 20, 25]
    assert all(b is not None and (b.source_id, b.partition) == ("test-topic", 0) for b in batches)
    assert source.poll() is None
    assert source.poll(timeout_ms=0) is None
    assert InMemorySource().poll() is None


def test_reading_starts_at_the_committed_offset_unless_sought() -> None:
    source = InMemorySource(source_id="orders", records=list("abcdefgh"), batch_size=3)
    assert source.get_committed("orders", 0) is None
    source.inject_committed("orders", 0, 4)
    assert source.get_committed("orders", 0) == 4
    first = source.poll()
    assert first is not None
    assert (first.offset, first.records) == (4, ["e", "f", "g"])
    # A commit records progress; it does not move what is read next.
    source.commit("orders", 0, 1)
    assert source.get_committed("orders", 0) == 1
    second = source.poll()
    assert second is not None
    assert second.records == ["h"]
    source.seek("orders", 0, 1)
    again = source.poll()
    assert again is not None
    assert (again.offset, again.records) == (1, ["b", "c", "d"])
    source.seek("orders", 0, 99)
    assert source.poll() is None
    sought = InMemorySource(source_id="orders", records=list("abc"))
    sought.inject_committed("orders", 0, 2)
    sought.seek("orders", 0, 0)
    batch = sought.poll()
    assert batch is not None
    assert batch.records == ["a", "b", "c"]


def test_an_in_memory_source_has_one_partition_and_is_a_source() -> None:
    source = InMemorySource(source_id="clicks")
    assert source.partitions() == [("clicks", 0)]
    assert isinstance(source, Source)
    assert isinstance(KafkaSource("clicks", bootstrap_servers="127.0.0.1:1"), Source)
    assert not isinstance(object(), Source)


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"batch_size": 0}, ConfigurationError),
        ({"batch_size": -3}, ConfigurationError),
        ({"batch_size": "10"}, TypeError),
        ({"batch_size": True}, TypeError),
        ({"records": (1, 2)}, TypeError),
        ({"source_id": ""}, ConfigurationError),
        ({"source_id": 7}, TypeError),
    ],
)
def test_bad_options_are_refused(options: dict[str, Any], error: type[Exception]) -> None:
    with pytest.raises(error, match="InMemorySource"):
        InMemorySource(**options)


def test_calls_naming_another_source_or_partition_are_refused() -> None:
    source = InMemorySource(source_id="orders", records=[1])
    for call in (source.seek, source.commit, source.inject_committed):
        with pytest.raises(ValueError, match="no source 'payments'"):
            call("payments", 0, 0)
        with pytest.raises(ValueError, match="partition 0 only, not 2"):
            call("orders", 2, 0)
        with pytest.raises(ValueError, match=">= 0"):
            call("orders", 0, -1)
        with pytest.raises(TypeError, match="integer offset"):
            call("orders", 0, "5")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no source"):
        source.get_committed("payments", 0)
    with pytest.raises(ValueError, match="timeout_ms"):
        source.poll(timeout_ms=-1)
    assert source.get_committed("orders", 0) is None


def test_a_batch_is_frozen_and_says_where_the_next_one_starts() -> None:
    batch = Batch("t", 2, 40, ["a", "b"])
    assert batch.next_offset == 42
    assert dataclasses.replace(batch, end_offset=45).next_offset == 45
    assert [f.name for f in dataclasses.fields(Batch)] == [
        "source_id",
        "partition",
        "offset",
        "records",
        "end_offset",
    ]
    with pytest.raises(dataclasses.FrozenInstanceError):
        batch.offset = 1  # type: ignore[misc]
    with pytest.raises(ValueError, match="end_offset"):
        Batch("t", 0, 5, [], end_offset=4)
    with pytest.raises(ValueError, match="offset"):
        Batch("t", 0, -1, [])
    with pytest.raises(TypeError, match="list"):
        Batch("t", 0, 0, (1,))  # type: ignore[arg-type]


def test_a_kafka_source_checks_its_options_and_connects_only_when_used() -> None:
    unused = KafkaSource("orders", bootstrap_servers="127.0.0.1:1")  # nothing listens there
    assert (unused.source_id, unused.group_id) == ("orders", "lockgate.source.orders")
    unused.close()
    with pytest.raises(ConfigurationError, match="closed"):
        unused.poll()
    for bad in (
        {"topic": "has space"},
        {"topic": ""},
        {"batch_size": 0},
        {"partitions": []},
        {"partitions": [-1]},
        {"group_id": ""},
        {"bootstrap_servers": ""},
    ):
        options: dict[str, Any] = {"topic": "orders", "bootstrap_servers": "b:9092", **bad}
        with pytest.raises(ConfigurationError):
            KafkaSource(options.pop("topic"), **options)


# -- ctx.consume -----------------------------------------------------------------------------


async def test_each_batch_is_handled_once_in_a_journaled_step_then_committed(
    runner: InlineWorkflowRunner, client: WorkflowClient, drive: Drive
) -> None:
    source = WatchedSource(runner.store, source_id="orders", records=list(range(23)), batch_size=5)  # type: ignore[arg-type]
    seen: list[tuple[int, list[int]]] = []

    def handle_batch(batch: Batch[int]) -> int:
        seen.append((batch.offset, batch.records))
        return sum(batch.records)

    @workflow(name="sources_basic")
    async def body(ctx: WorkflowContext) -> dict[str, Any]:
        progress = await ctx.consume(source, handle_batch)
        assert isinstance(progress, StreamProgress)
        return dataclasses.asdict(progress) | {"positions": sorted(progress.positions.items())}

    handle = await client.submit("sources_basic")
    source.run = (handle.name, handle.run_id)
    assert await drive(handle) == RunStatus.COMPLETE
    assert [offset for offset, _ in seen] == [0, 5, 10, 15, 20]
    assert [r for _, records in seen for r in records] == list(range(23))
    assert await handle.result() == {
        "batches": 5,
        "records": 23,
        "positions": [[["orders", 0], 23]],
    }
    events = await handle.events()
    pending = stream_steps(events, EventKind.STEP_PENDING)
    done = stream_steps(events, EventKind.STEP_DONE)
    assert [e.payload["call_index"] for e in pending] == [0, 1, 2, 3, 4]
    assert [e.payload["call_index"] for e in done] == [0, 1, 2, 3, 4, 5]
    assert {e.payload["step_id"] for e in done} == {"orders"}
    assert [e.payload["offset"] for e in pending] == [0, 5, 10, 15, 20]
    assert done[-1].payload["result"] == {"idle": True}
    assert done[0].payload["result"] == {
        "source_id": "orders",
        "partition": 0,
        "offset": 0,
        "next_offset": 5,
        "count": 5,
        "result": 10,
    }
    assert [r["next_offset"] for r in handled_batches(events)] == [5, 10, 15, 20, 23]
    # Poll, commit after each batch's step, and a last poll that found nothing.
    assert source.calls == [
        ("seek", 0),  # where a partition no step finished starts: its commit, else 0
        ("poll", 0),
        ("commit", 5),
        ("poll", 5),
        ("commit", 10),
        ("poll", 10),
        ("commit", 15),
        ("poll", 15),
        ("commit", 20),
        ("poll", 20),
        ("commit", 23),
        ("poll", None),
    ]
    assert source.commits_before_done == []
    assert source.get_committed("orders", 0) == 23
    state = reconstruct_state(events)
    assert {state.calls[i].kind for i in range(6)} == {StepKind.STREAM}
    assert all(state.calls[i].done for i in range(6))


async def test_a_replay_takes_the_journal_and_never_polls(
    runner: InlineWorkflowRunner, client: WorkflowClient, drive: Drive
) -> None:
    source = WatchedSource(source_id="clicks", records=list(range(12)), batch_size=4)
    handled: list[int] = []

    async def count_them(batch: Batch[int]) -> list[int]:
        handled.append(batch.offset)
        return batch.records[:1]

    @workflow(name="sources_replay")
    async def body(ctx: WorkflowContext) -> int:
        progress = await ctx.consume(source, count_them, name="clicks-stream")
        ctx.on_query("progress", lambda: [progress.batches, progress.records])
        return progress.records

    handle = await client.submit("sources_replay")
    assert await drive(handle) == RunStatus.COMPLETE
    calls = list(source.calls)
    assert await handle.query("progress") == [3, 12]
    state = await check_replay(body, await handle.events())
    assert state.calls[0].fingerprint == "stream 'clicks-stream'"
    assert source.calls == calls
    assert handled == [0, 4, 8]

    @workflow(name="sources_replay_renamed")
    async def renamed(ctx: WorkflowContext) -> int:
        return (await ctx.consume(source, count_them, name="another")).records

    with pytest.raises(NonDeterminismError, match="another"):
        await check_replay(renamed, await handle.events())
    assert source.calls == calls


async def test_max_batches_ends_the_loop_and_the_next_call_goes_on_from_there(
    runner: InlineWorkflowRunner, client: WorkflowClient, drive: Drive
) -> None:
    source = WatchedSource(source_id="events", records=list(range(50)), batch_size=10)
    offsets: list[int] = []

    @workflow(name="sources_max_batches")
    async def body(ctx: WorkflowContext) -> list[Any]:
        first = await ctx.consume(source, lambda b: offsets.append(b.offset), max_batches=3)
        second = await ctx.consume(source, lambda b: offsets.append(b.offset), max_batches=1)
        return [first.batches, first.records, first.positions[("events", 0)], second.records]

    handle = await client.submit("sources_max_batches")
    assert await drive(handle) == RunStatus.COMPLETE
    assert await handle.result() == [3, 30, 30, 10]
    assert offsets == [0, 10, 20, 30]
    assert source.get_committed("events", 0) == 40
    events = await handle.events()
    # No idle poll: both loops ended on their count.
    assert len(stream_steps(events, EventKind.STEP_DONE)) == 4
    # The second call sought the source to where the stream stood (it was there already).
    assert ("seek", 30) in source.calls


async def test_a_failing_handler_is_retried_on_the_same_batch_then_raised(
    client: WorkflowClient, drive: Drive
) -> None:
    source = WatchedSource(source_id="flaky", records=list(range(6)), batch_size=3)
    tries: list[int] = []

    def handler(batch: Batch[int]) -> None:
        tries.append(batch.offset)
        if batch.offset == 0 and tries.count(0) == 1:
            raise ConnectionError("the sink hung up")
        if batch.offset == 3:
            raise ValueError(f"record {batch.records[0]} is bad")

    @workflow(name="sources_retry")
    async def body(ctx: WorkflowContext) -> None:
        await ctx.consume(source, handler, retry=NO_BACKOFF)

    handle = await client.submit("sources_retry")
    assert await drive(handle) == RunStatus.ERROR
    assert tries == [0, 0, 3, 3, 3]
    events = await handle.events()
    errors = stream_steps(events, EventKind.STEP_ERROR)
    assert [
        (e.payload["call_index"], e.payload["attempt"], e.payload["final"]) for e in errors
    ] == [
        (0, 1, False),
        (1, 1, False),
        (1, 2, False),
        (1, 3, True),
    ]
    assert [e.payload["attempt"] for e in stream_steps(events, EventKind.STEP_DONE)] == [2]
    # Only the batch that was handled is committed; the failed one is read again next time.
    assert [c for c in source.calls if c[0] == "commit"] == [("commit", 3)]
    assert events[-1].kind == EventKind.RUN_ERROR
    with pytest.raises(DurableInvocationError, match="record 3 is bad"):
        await handle.result()


async def test_durable_calls_inside_the_handler_are_refused(
    client: WorkflowClient, drive: Drive
) -> None:
    source = InMemorySource(source_id="nested", records=[1, 2])
    calls: list[int] = []

    @workflow(name="sources_nested")
    async def body(ctx: WorkflowContext) -> None:
        async def handler(batch: Batch[int]) -> None:
            calls.append(batch.offset)
            await ctx.sleep(1)

        await ctx.consume(source, handler, retry=NO_BACKOFF)

    handle = await client.submit("sources_nested")
    assert await drive(handle) == RunStatus.ERROR
    assert calls == [0]  # never retried: it would fail the same way
    events = await handle.events()
    (error,) = stream_steps(events, EventKind.STEP_ERROR)
    assert error.payload["final"] is True
    assert "NestedDurableOperationError" in error.payload["error"]["type"]
    assert events[-1].payload["code"] == "nested_durable_operation"


async def test_a_handler_result_that_is_not_json_fails_the_step(
    client: WorkflowClient, drive: Drive
) -> None:
    source = InMemorySource(source_id="sets", records=[1])

    @workflow(name="sources_not_json")
    async def body(ctx: WorkflowContext) -> None:
        await ctx.consume(source, lambda batch: set(batch.records))

    handle = await client.submit("sources_not_json")
    assert await drive(handle) == RunStatus.ERROR
    events = await handle.events()
    assert events[-1].payload["code"] == "step_result_type"
    assert handled_batches(events) == []
    assert source.get_committed("sets", 0) is None


async def test_a_poll_that_returns_no_batch_is_a_failure_of_its_position(
    client: WorkflowClient, drive: Drive
) -> None:
    class Broken(InMemorySource[Any]):
        def poll(self, timeout_ms: int = 5000) -> Any:
            return ["not", "a", "batch"]

    @workflow(name="sources_bad_poll")
    async def body(ctx: WorkflowContext) -> None:
        await ctx.consume(Broken(), lambda batch: None, retry=NO_BACKOFF)

    handle = await client.submit("sources_bad_poll")
    assert await drive(handle) == RunStatus.ERROR
    errors = stream_steps(await handle.events(), EventKind.STEP_ERROR)
    assert [e.payload["attempt"] for e in errors] == [1, 2, 3]
    assert "not a Batch" in errors[0].payload["error"]["message"]


BAD_CALLS: dict[str, tuple[dict[str, Any], type[Exception]]] = {
    "max_batches_0": ({"max_batches": 0}, ValueError),
    "max_batches_bool": ({"max_batches": True}, ValueError),
    "negative_timeout": ({"poll_timeout": -1}, ValueError),
    "nan_timeout": ({"poll_timeout": float("nan")}, ValueError),
    "retry_not_a_policy": ({"retry": 3}, TypeError),
    "name_with_newline": ({"name": "two\nlines"}, InvalidNameError),
    "handler_not_callable": ({"handler": "not callable"}, TypeError),
    "no_source_id": ({"source": object()}, InvalidNameError),  # nothing to name it after
    "not_a_source": ({"source": object(), "name": "s"}, TypeError),
}


@pytest.mark.parametrize("case", BAD_CALLS)
async def test_bad_consume_arguments_are_refused_before_anything_is_journaled(
    client: WorkflowClient, drive: Drive, case: str
) -> None:
    call, error = BAD_CALLS[case]
    seen: list[str] = []

    @workflow(name=f"sources_bad_args_{case}")
    async def body(ctx: WorkflowContext) -> None:
        args = {"source": InMemorySource(records=[1]), "handler": lambda b: None, **call}
        try:
            await ctx.consume(args.pop("source"), args.pop("handler"), **args)
        except error as exc:
            seen.append(type(exc).__name__)

    handle = await client.submit(f"sources_bad_args_{case}")
    assert await drive(handle) == RunStatus.COMPLETE
    assert seen == [error.__name__]
    assert stream_steps(await handle.events(), EventKind.STEP_PENDING) == []


# -- crashes ---------------------------------------------------------------------------------


async def recover(runner: InlineWorkflowRunner, clock: ManualClock, handle: RunHandle) -> None:
    """The attempt died: let its lease lapse and requeue the run."""
    clock.advance(31.0)  # past the store's lock_ttl of 30s
    assert runner.store.recover_pending_runs(handle.name) == [handle.run_id]


async def test_a_resumed_run_seeks_past_a_batch_whose_commit_was_lost(
    runner: InlineWorkflowRunner, client: WorkflowClient, clock: ManualClock, drive: Drive
) -> None:
    committed: dict[str, int] = {}  # what the "broker" keeps across the crash
    handled: list[int] = []

    class DyingSource(WatchedSource):
        def commit(self, source_id: str, partition: int, offset: int) -> None:
            if offset == 8 and "died" not in committed:
                committed["died"] = 1
                raise Crash()  # after the batch's step:done, before its commit
            super().commit(source_id, partition, offset)
            committed["offset"] = offset

    sources: list[DyingSource] = []

    @workflow(name="sources_lost_commit")
    async def body(ctx: WorkflowContext) -> int:
        source = DyingSource(source_id="pay", records=list(range(10)), batch_size=4)
        if "offset" in committed:
            source.inject_committed("pay", 0, committed["offset"])
        sources.append(source)
        return (await ctx.consume(source, lambda b: handled.append(b.offset))).records

    handle = await client.submit("sources_lost_commit")
    with pytest.raises(Crash):
        await runner.run(handle.name, handle.run_id)
    assert committed == {"died": 1, "offset": 4}
    await recover(runner, clock, handle)
    assert await drive(handle) == RunStatus.COMPLETE
    assert await handle.result() == 10
    assert handled == [0, 4, 8]  # the batch at 4 was not handed out again
    # The source restarted at its commit (4), and the run moved it to the journal's 8.
    assert sources[-1].calls[:2] == [("seek", 8), ("poll", 8)]
    assert committed["offset"] == 10


async def test_a_source_that_outlives_its_attempt_is_sought_back_to_the_unfinished_batch(
    runner: InlineWorkflowRunner, client: WorkflowClient, clock: ManualClock, drive: Drive
) -> None:
    # Made outside the body: the resumed attempt gets the same object, its cursor past the
    # batch the crashed attempt polled and never finished.
    shared = InMemorySource(source_id="kept", records=list(range(10)), batch_size=4)
    handled: list[int] = []
    crashed: list[int] = []

    def handle_batch(batch: Batch[int]) -> int:
        if batch.offset == 0 and not crashed:
            crashed.append(batch.offset)
            raise Crash()  # the attempt dies in the first batch's step: no position journaled
        handled.extend(batch.records)
        return len(batch.records)

    @workflow(name="sources_shared")
    async def body(ctx: WorkflowContext) -> int:
        return (await ctx.consume(shared, handle_batch)).records

    handle = await client.submit("sources_shared")
    with pytest.raises(Crash):
        await runner.run(handle.name, handle.run_id)
    await recover(runner, clock, handle)
    assert await drive(handle) == RunStatus.COMPLETE
    assert await handle.result() == 10
    assert handled == list(range(10))  # records 0..3 were handed out again, not skipped
    assert shared.get_committed("kept", 0) == 10


class SimulatedCrash(BaseException):
    """The process died at a boundary the example chose."""


@dataclasses.dataclass
class Example:
    """What the current property example reports to."""

    store: MemoryStore | None = None
    run_id: str = ""
    records: int = 0
    batch_size: int = 1
    plan: frozenset[int] = frozenset()
    boundary: int = 0
    crashes: int = 0
    committed: int | None = None
    handled: list[int] = dataclasses.field(default_factory=list)
    violations: list[str] = dataclasses.field(default_factory=list)

    def tick(self) -> None:
        self.boundary += 1
        if self.boundary in self.plan:
            self.crashes += 1
            raise SimulatedCrash(f"boundary {self.boundary}")


EXAMPLE = Example()
PROPERTY_NAME = "sources_crash_property"


class CrashingStore(MemoryStore):
    """Dies before and after each append an attempt makes (a step's outcome among them)."""

    def append_and_poll(self, *args: Any, **kwargs: Any) -> Any:
        EXAMPLE.tick()
        result = super().append_and_poll(*args, **kwargs)
        EXAMPLE.tick()
        return result


class BrokerSource(InMemorySource[int]):
    """A fresh source per attempt, as after a restart; its commits outlive it (a broker's)."""

    def commit(self, source_id: str, partition: int, offset: int) -> None:
        EXAMPLE.tick()  # dies before the commit lands
        super().commit(source_id, partition, offset)
        EXAMPLE.committed = offset


def property_handler(batch: Batch[int]) -> int:
    assert EXAMPLE.store is not None
    journal = EXAMPLE.store.load_run(PROPERTY_NAME, EXAMPLE.run_id)
    if any(r["offset"] == batch.offset for r in handled_batches(journal)):
        EXAMPLE.violations.append(f"the batch at {batch.offset} was handed out after its step")
    EXAMPLE.tick()  # dies before the effect
    EXAMPLE.handled.extend(batch.records)
    EXAMPLE.tick()  # dies after the effect, before the step's outcome
    return len(batch.records)


@workflow(name=PROPERTY_NAME, timeout=30)
async def property_body(ctx: WorkflowContext, max_batches: int | None) -> list[int]:
    source = BrokerSource(
        source_id="prop", records=list(range(EXAMPLE.records)), batch_size=EXAMPLE.batch_size
    )
    if EXAMPLE.committed is not None:
        source.inject_committed("prop", 0, EXAMPLE.committed)
    progress = await ctx.consume(source, property_handler, max_batches=max_batches)
    return [progress.batches, progress.records, progress.positions.get(("prop", 0), 0)]


async def run_property_example(max_batches: int | None) -> list[int]:
    clock = ManualClock()
    store = CrashingStore(clock=clock, lock_ttl=30.0, max_retries=10_000)
    EXAMPLE.store = store
    runner = InlineWorkflowRunner(store=store, clock=clock)
    handle = await runner.client.submit(PROPERTY_NAME, {"max_batches": max_batches})
    EXAMPLE.run_id = handle.run_id
    for _ in range(500):
        info = store.get_run(PROPERTY_NAME, handle.run_id)
        assert info is not None
        if info.status.is_terminal:
            break
        try:
            if info.status == RunStatus.PENDING:
                await runner.run(PROPERTY_NAME, handle.run_id)
            else:
                clock.advance(store.lock_ttl + 1)
                store.recover_pending_runs(PROPERTY_NAME)
        except SimulatedCrash:
            clock.advance(store.lock_ttl + 1)
            store.recover_pending_runs(PROPERTY_NAME)
    else:
        raise AssertionError("the run never ended")
    result: list[int] = await handle.result()
    return result


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    records=st.integers(min_value=0, max_value=40),
    batch_size=st.integers(min_value=1, max_value=9),
    max_batches=st.one_of(st.none(), st.integers(min_value=1, max_value=8)),
    plan=st.frozensets(st.integers(min_value=1, max_value=60), max_size=6),
)
def test_every_record_is_in_exactly_one_finished_step_across_crashes(
    records: int, batch_size: int, max_batches: int | None, plan: frozenset[int]
) -> None:
    EXAMPLE.__dict__.update(Example(records=records, batch_size=batch_size, plan=plan).__dict__)
    result = asyncio.run(run_property_example(max_batches))

    batches = -(-records // batch_size)
    if max_batches is not None:
        batches = min(batches, max_batches)
    covered = min(records, batches * batch_size)
    assert result == [batches, covered, covered]
    assert EXAMPLE.violations == []
    assert EXAMPLE.store is not None
    journal = EXAMPLE.store.load_run(PROPERTY_NAME, EXAMPLE.run_id)
    assert journal[-1].kind == EventKind.RUN_COMPLETE
    ranges = [(r["offset"], r["next_offset"]) for r in handled_batches(journal)]
    # The finished steps tile the records handled: each record in exactly one of them.
    assert [n for start, end in ranges for n in range(start, end)] == list(range(covered))
    # Every record was handled; one more than once only in a batch in flight at a crash.
    assert set(EXAMPLE.handled) == set(range(covered))
    assert len(EXAMPLE.handled) - covered <= EXAMPLE.crashes * batch_size
