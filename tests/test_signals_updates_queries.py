"""Talking to a run: signals (buffered, delivered, deduplicated, timed out), queries served
from replayed state, and updates applied by a worker and journaled once."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from lockgate import (
    EventKind,
    InlineWorkflowRunner,
    InvalidNameError,
    ManualClock,
    MemoryStore,
    NestedDurableOperationError,
    PayloadTooLarge,
    QueryError,
    RunEvent,
    RunFinishedError,
    RunNotStartedError,
    RunStatus,
    UpdateError,
    UpdateRejected,
    UpdateTimeout,
    WaitTimeout,
    WorkflowClient,
    WorkflowContext,
    step,
    workflow,
)
from lockgate.stores import Gates

Drive = Callable[..., Awaitable[RunStatus]]


def kinds(events: list[RunEvent]) -> list[str]:
    return [e.kind for e in events]


def of_kind(events: list[RunEvent], kind: str) -> list[RunEvent]:
    return [e for e in events if e.kind == kind]


# -- signals ---------------------------------------------------------------------------------


@workflow(name="sig_two_waits")
async def two_waits(ctx: WorkflowContext) -> list[Any]:
    first = await ctx.wait_for_signal("item")
    second = await ctx.wait_for_signal("item")
    return [first, second]


async def test_a_signal_sent_before_the_wait_is_buffered_and_returned_once(
    client: WorkflowClient, drive: Drive
) -> None:
    handle = await client.submit("sig_two_waits")
    assert await handle.signal("item", {"n": 1}) == "buffered"
    # The first wait takes the buffered signal; the second must not see it again.
    assert await drive(handle) == RunStatus.SIGNAL_WAITING
    events = await handle.events()
    received = of_kind(events, EventKind.RUN_SIGNAL_RECEIVED)
    assert [e.payload["payload"] for e in received] == [{"n": 1}]
    assert of_kind(events, EventKind.RUN_SIGNAL_WAITING)[-1].payload["call_index"] == 1

    assert await handle.signal("item", {"n": 2}) == "delivered"
    assert await drive(handle) == RunStatus.COMPLETE
    assert await handle.result() == [{"n": 1}, {"n": 2}]


async def test_a_repeated_signal_id_is_applied_once(client: WorkflowClient, drive: Drive) -> None:
    handle = await client.submit("sig_two_waits")
    assert await handle.signal("item", {"n": 1}, signal_id="sig-1") == "buffered"
    assert await handle.signal("item", {"n": 1}, signal_id="sig-1") == "duplicate"
    assert await drive(handle) == RunStatus.SIGNAL_WAITING  # the duplicate fed no second wait

    # Resent after it was consumed, the same id is still a no-op, whatever its payload.
    assert await handle.signal("item", {"n": 9}, signal_id="sig-1") == "duplicate"
    assert await drive(handle) == RunStatus.SIGNAL_WAITING

    assert await handle.signal("item", {"n": 2}, signal_id="sig-2") == "delivered"
    assert await drive(handle) == RunStatus.COMPLETE
    assert await handle.result() == [{"n": 1}, {"n": 2}]
    received = of_kind(await handle.events(), EventKind.RUN_SIGNAL_RECEIVED)
    assert [e.payload["signal_id"] for e in received] == ["sig-1", "sig-2"]


async def test_delivered_only_when_the_run_waits_for_that_signal(
    client: WorkflowClient, drive: Drive
) -> None:
    @workflow(name="sig_delivered_vs_buffered")
    async def body(ctx: WorkflowContext) -> list[Any]:
        approval = await ctx.wait_for_signal("approve")
        note = await ctx.wait_for_signal("note")
        return [approval, note]

    handle = await client.submit("sig_delivered_vs_buffered")
    assert await drive(handle) == RunStatus.SIGNAL_WAITING
    assert await handle.signal("note", {"text": "early"}) == "buffered"
    assert await handle.status() == RunStatus.SIGNAL_WAITING  # a buffered signal wakes nothing
    assert await handle.signal("approve", {"by": "ana"}) == "delivered"
    assert await handle.status() == RunStatus.PENDING
    assert await drive(handle) == RunStatus.COMPLETE
    assert await handle.result() == [{"by": "ana"}, {"text": "early"}]


async def test_a_wait_timeout_can_be_caught_and_the_body_carries_on(
    client: WorkflowClient, clock: ManualClock, drive: Drive
) -> None:
    caught: list[WaitTimeout] = []

    @workflow(name="sig_timeout_caught")
    async def body(ctx: WorkflowContext) -> str:
        try:
            await ctx.wait_for_signal("approve", timeout=60)
        except WaitTimeout as exc:
            caught.append(exc)
            return "auto-rejected"
        return "approved"

    started = clock()
    handle = await client.submit("sig_timeout_caught")
    assert await drive(handle) == RunStatus.COMPLETE
    assert await handle.result() == "auto-rejected"
    assert clock() >= started + 60
    assert caught
    assert caught[-1].name == "approve"
    assert caught[-1].code == "wait_timeout"
    assert caught[-1].deadline is not None
    assert caught[-1].deadline.timestamp() == started + 60
    assert len(of_kind(await handle.events(), EventKind.RUN_WAIT_TIMED_OUT)) == 1


async def test_an_uncaught_wait_timeout_fails_the_run(client: WorkflowClient, drive: Drive) -> None:
    @workflow(name="sig_timeout_uncaught")
    async def body(ctx: WorkflowContext) -> Any:
        return await ctx.wait_for_signal("approve", timeout=30)

    handle = await client.submit("sig_timeout_uncaught")
    assert await drive(handle) == RunStatus.ERROR
    events = await handle.events()
    assert events[-1].kind == EventKind.RUN_ERROR
    assert events[-1].payload["code"] == "wait_timeout"


async def test_a_signal_before_the_deadline_beats_the_timeout(
    runner: InlineWorkflowRunner, client: WorkflowClient, clock: ManualClock, drive: Drive
) -> None:
    @workflow(name="sig_before_deadline")
    async def body(ctx: WorkflowContext) -> Any:
        try:
            return await ctx.wait_for_signal("approve", timeout=60)
        except WaitTimeout:
            return "timed out"

    handle = await client.submit("sig_before_deadline")
    await runner.run(handle.name, handle.run_id)  # one attempt: it parks with a deadline
    assert await handle.status() == RunStatus.SIGNAL_WAITING
    clock.advance(30)
    assert await runner.fire_due_timers() == 0
    assert await handle.signal("approve", {"ok": True}) == "delivered"
    clock.advance(60)  # past the deadline: the answer already arrived
    assert await runner.fire_due_timers() == 0
    assert await drive(handle) == RunStatus.COMPLETE
    assert await handle.result() == {"ok": True}
    assert of_kind(await handle.events(), EventKind.RUN_WAIT_TIMED_OUT) == []


async def test_a_signal_to_an_ended_run_is_refused(client: WorkflowClient, drive: Drive) -> None:
    @workflow(name="sig_ended")
    async def body(ctx: WorkflowContext) -> str:
        return "done"

    handle = await client.submit("sig_ended")
    assert await drive(handle) == RunStatus.COMPLETE
    with pytest.raises(RunFinishedError):
        await handle.signal("late", {"x": 1})
    assert kinds(await handle.events()) == [EventKind.RUN_INIT, EventKind.RUN_COMPLETE]


async def test_signal_payload_must_be_a_json_dict(client: WorkflowClient) -> None:
    handle = await client.submit("sig_two_waits")
    with pytest.raises(ValueError, match="payload"):
        await handle.signal("item", ["not", "a", "dict"])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="payload"):
        await handle.signal("item", {"x": object()})


async def test_signal_update_and_query_names_and_ids_the_rules_refuse_are_refused(
    client: WorkflowClient, store: MemoryStore
) -> None:
    handle = await client.submit("sig_two_waits")
    for bad in ("line\nbreak", "unit\x1fsep", ""):
        with pytest.raises(InvalidNameError, match="signal name"):
            await handle.signal(bad, {})
        with pytest.raises(InvalidNameError, match="signal id"):
            await handle.signal("item", {}, signal_id=bad)
        with pytest.raises(InvalidNameError, match="update name"):
            await handle.update(bad, {})
        with pytest.raises(InvalidNameError, match="update id"):
            await handle.update("add", {}, update_id=bad)
        with pytest.raises(InvalidNameError, match="query name"):
            await handle.query(bad)
    assert store.peek_signal("sig_two_waits", handle.run_id, "item") is None
    assert store.peek_pending_updates("sig_two_waits", handle.run_id) == []


async def test_a_signal_to_a_run_not_yet_started_is_buffered_for_it(
    client: WorkflowClient, clock: ManualClock, drive: Drive
) -> None:
    @workflow(name="sig_delayed_start")
    async def body(ctx: WorkflowContext) -> Any:
        return await ctx.wait_for_signal("config")

    handle = await client.submit("sig_delayed_start", delay=600)
    assert await handle.signal("config", {"mode": "fast"}) == "buffered"
    assert await handle.status() == RunStatus.SLEEPING  # the signal does not start it early
    started = clock()
    assert await drive(handle) == RunStatus.COMPLETE
    assert clock() >= started + 600
    assert await handle.result() == {"mode": "fast"}


async def test_wait_for_signal_refuses_a_nan_timeout(
    runner: InlineWorkflowRunner, client: WorkflowClient
) -> None:
    @workflow(name="sig_nan_timeout")
    async def body(ctx: WorkflowContext) -> Any:
        try:
            return await ctx.wait_for_signal("approve", timeout=math.nan)
        except (TypeError, ValueError):
            return "refused"

    handle = await client.submit("sig_nan_timeout")
    await runner.run(handle.name, handle.run_id)
    # Like ctx.sleep(nan), the bad timeout is refused in the body; a NaN deadline would
    # never come due, so the run would wait for ever.
    assert await handle.status() == RunStatus.COMPLETE
    assert await handle.result() == "refused"


async def test_an_oversized_signal_is_refused_and_the_run_survives(
    runner: InlineWorkflowRunner, client: WorkflowClient
) -> None:
    @workflow(name="sig_oversized", max_event_payload_bytes=200)
    async def body(ctx: WorkflowContext) -> Any:
        return await ctx.wait_for_signal("data")

    handle = await client.submit("sig_oversized")
    await runner.run(handle.name, handle.run_id)
    assert await handle.status() == RunStatus.SIGNAL_WAITING
    with pytest.raises((PayloadTooLarge, ValueError)):
        await handle.signal("data", {"blob": "x" * 500})
    await runner.run(handle.name, handle.run_id)
    assert await handle.status() == RunStatus.SIGNAL_WAITING
    assert await handle.signal("data", {"blob": "small"}) == "delivered"
    await runner.run(handle.name, handle.run_id)
    assert await handle.result() == {"blob": "small"}


# -- queries ---------------------------------------------------------------------------------


QUERY_CALLS = {"reserve": 0}


@step(name="qry_reserve")
async def qry_reserve(sku: str) -> str:
    QUERY_CALLS["reserve"] += 1
    return f"reserved {sku}"


@workflow(name="qry_order")
async def qry_order(ctx: WorkflowContext, sku: str) -> dict[str, Any]:
    state: dict[str, Any] = {"stage": "new", "log": []}
    ctx.on_query("state", lambda: dict(state))
    ctx.on_query("log_entry", lambda i: state["log"][i])
    state["log"].append(await qry_reserve(sku))
    state["stage"] = "reserved"
    approval = await ctx.wait_for_signal("approve")
    state["log"].append(f"approved by {approval['by']}")
    state["stage"] = "approved"
    return state


async def test_queries_read_state_rebuilt_by_replay_on_a_parked_and_a_finished_run(
    client: WorkflowClient, drive: Drive
) -> None:
    QUERY_CALLS["reserve"] = 0
    handle = await client.submit("qry_order", {"sku": "sku-1"})
    assert await drive(handle) == RunStatus.SIGNAL_WAITING
    before = await handle.events()

    assert await handle.query("state") == {"stage": "reserved", "log": ["reserved sku-1"]}
    assert await client.query("qry_order", handle.run_id, "log_entry", 0) == "reserved sku-1"
    assert await handle.events() == before  # a query writes nothing
    assert QUERY_CALLS["reserve"] == 1  # and runs no step

    await handle.signal("approve", {"by": "ana"})
    assert await drive(handle) == RunStatus.COMPLETE
    finished = await handle.events()
    assert await handle.query("state") == {
        "stage": "approved",
        "log": ["reserved sku-1", "approved by ana"],
    }
    assert await handle.query("log_entry", 1) == "approved by ana"
    assert await handle.events() == finished
    assert QUERY_CALLS["reserve"] == 1


async def test_an_unknown_query_lists_the_known_ones(client: WorkflowClient, drive: Drive) -> None:
    handle = await client.submit("qry_order", {"sku": "sku-2"})
    assert await drive(handle) == RunStatus.SIGNAL_WAITING
    before = await handle.events()
    with pytest.raises(QueryError, match="nope") as raised:
        await handle.query("nope")
    assert "state" in str(raised.value)
    assert "log_entry" in str(raised.value)
    assert await handle.events() == before


async def test_a_failing_query_handler_raises_query_error(
    client: WorkflowClient, drive: Drive
) -> None:
    handle = await client.submit("qry_order", {"sku": "sku-3"})
    assert await drive(handle) == RunStatus.SIGNAL_WAITING
    with pytest.raises(QueryError):
        await handle.query("log_entry", 5)  # IndexError inside the handler


# -- updates ---------------------------------------------------------------------------------


UPDATE_CALLS: dict[str, int] = {}


def _reset_update_calls() -> None:
    UPDATE_CALLS.clear()
    UPDATE_CALLS.update({"add": 0, "validate": 0, "explode": 0})


@workflow(name="upd_cart")
async def upd_cart(ctx: WorkflowContext) -> list[str]:
    items: list[str] = []

    def validate(payload: dict[str, Any]) -> None:
        UPDATE_CALLS["validate"] += 1
        if not payload.get("item"):
            raise ValueError("an item is required")

    def add(payload: dict[str, Any]) -> int:
        UPDATE_CALLS["add"] += 1
        items.append(payload["item"])
        return len(items)

    def explode(payload: dict[str, Any]) -> None:
        UPDATE_CALLS["explode"] += 1
        raise RuntimeError("handler broke")

    ctx.on_update("add", add, validator=validate)
    ctx.on_update("explode", explode)
    ctx.on_query("items", lambda: list(items))
    await ctx.wait_for_signal("checkout")
    return items


async def test_an_update_to_a_parked_run_is_applied_and_the_run_re_parks(
    client: WorkflowClient, drive: Drive
) -> None:
    _reset_update_calls()
    handle = await client.submit("upd_cart")
    assert await drive(handle) == RunStatus.SIGNAL_WAITING

    assert await client.update("upd_cart", handle.run_id, "add", {"item": "apple"}) == 1
    assert await handle.update("add", {"item": "pear"}) == 2
    assert await handle.status() == RunStatus.SIGNAL_WAITING  # still waits for its signal

    events = await handle.events()
    received = of_kind(events, EventKind.RUN_UPDATE_RECEIVED)
    completed = of_kind(events, EventKind.RUN_UPDATE_COMPLETED)
    assert [e.payload["payload"] for e in received] == [{"item": "apple"}, {"item": "pear"}]
    assert [e.payload["result"] for e in completed] == [1, 2]
    # Live once per update, and once more when the second attempt replayed the first.
    assert UPDATE_CALLS["add"] == 3

    await handle.signal("checkout")
    assert await drive(handle) == RunStatus.COMPLETE
    assert await handle.result() == ["apple", "pear"]


async def test_applied_updates_are_re_applied_on_replay_for_queries(
    client: WorkflowClient, drive: Drive
) -> None:
    _reset_update_calls()
    handle = await client.submit("upd_cart")
    assert await drive(handle) == RunStatus.SIGNAL_WAITING
    await handle.update("add", {"item": "plum"})
    journal = await handle.events()
    assert await handle.query("items") == ["plum"]
    assert await handle.events() == journal
    assert len(of_kind(journal, EventKind.RUN_UPDATE_RECEIVED)) == 1


async def test_a_validator_that_raises_rejects_the_update_and_journals_nothing(
    client: WorkflowClient, drive: Drive
) -> None:
    _reset_update_calls()
    handle = await client.submit("upd_cart")
    assert await drive(handle) == RunStatus.SIGNAL_WAITING
    with pytest.raises(UpdateRejected, match="an item is required"):
        await handle.update("add", {"item": ""})
    events = await handle.events()
    assert of_kind(events, EventKind.RUN_UPDATE_RECEIVED) == []
    assert of_kind(events, EventKind.RUN_UPDATE_COMPLETED) == []
    assert of_kind(events, EventKind.RUN_UPDATE_FAILED) == []
    assert UPDATE_CALLS["add"] == 0
    assert await handle.status() == RunStatus.SIGNAL_WAITING
    assert await handle.query("items") == []


async def test_a_handler_that_raises_is_an_update_error(
    client: WorkflowClient, drive: Drive
) -> None:
    _reset_update_calls()
    handle = await client.submit("upd_cart")
    assert await drive(handle) == RunStatus.SIGNAL_WAITING
    with pytest.raises(UpdateError, match="handler broke"):
        await handle.update("explode", {})
    events = await handle.events()
    failed = of_kind(events, EventKind.RUN_UPDATE_FAILED)
    assert len(failed) == 1
    assert failed[0].payload["status"] == "failed"
    assert await handle.status() == RunStatus.SIGNAL_WAITING
    await handle.signal("checkout")
    assert await drive(handle) == RunStatus.COMPLETE
    assert await handle.result() == []


async def test_an_update_with_no_handler_is_an_update_error(
    client: WorkflowClient, drive: Drive
) -> None:
    _reset_update_calls()
    handle = await client.submit("upd_cart")
    assert await drive(handle) == RunStatus.SIGNAL_WAITING
    with pytest.raises(UpdateError, match="remove"):
        await handle.update("remove", {"item": "apple"})
    assert await handle.status() == RunStatus.SIGNAL_WAITING


async def test_the_same_update_id_applies_once_and_returns_the_same_value(
    client: WorkflowClient, drive: Drive
) -> None:
    _reset_update_calls()
    handle = await client.submit("upd_cart")
    assert await drive(handle) == RunStatus.SIGNAL_WAITING
    first = await handle.update("add", {"item": "fig"}, update_id="u-1")
    second = await handle.update("add", {"item": "fig"}, update_id="u-1")
    assert first == second == 1
    assert UPDATE_CALLS["add"] == 1
    events = await handle.events()
    assert len(of_kind(events, EventKind.RUN_UPDATE_RECEIVED)) == 1
    assert await handle.query("items") == ["fig"]


async def test_an_update_after_the_run_ended_is_refused(
    client: WorkflowClient, drive: Drive
) -> None:
    _reset_update_calls()
    handle = await client.submit("upd_cart")
    assert await drive(handle) == RunStatus.SIGNAL_WAITING
    assert await handle.update("add", {"item": "fig"}, update_id="u-before-end") == 1
    await handle.signal("checkout")
    assert await drive(handle) == RunStatus.COMPLETE
    with pytest.raises(RunFinishedError):
        await handle.update("add", {"item": "kiwi"})
    # A retry of an update settled before the end still reads its outcome.
    assert await handle.update("add", {"item": "fig"}, update_id="u-before-end") == 1
    assert await handle.result() == ["fig"]
    assert len(of_kind(await handle.events(), EventKind.RUN_UPDATE_RECEIVED)) == 1


async def test_an_update_before_a_delayed_start_is_refused(
    client: WorkflowClient, runner: InlineWorkflowRunner
) -> None:
    _reset_update_calls()
    handle = await client.submit("upd_cart", delay=60)
    assert await handle.status() == RunStatus.SLEEPING
    with pytest.raises(RunNotStartedError):
        await handle.update("add", {"item": "kiwi"})
    assert runner.store.peek_pending_updates("upd_cart", handle.run_id) == []


async def test_an_update_nobody_applies_times_out_and_stays_queued(
    store: MemoryStore, clock: ManualClock, client: WorkflowClient, drive: Drive
) -> None:
    _reset_update_calls()
    handle = await client.submit("upd_cart")
    assert await drive(handle) == RunStatus.SIGNAL_WAITING
    plain = WorkflowClient(store, clock=clock, poll_interval=1.0)
    started = clock()
    waiting = asyncio.create_task(
        plain.update("upd_cart", handle.run_id, "add", {"item": "lime"}, update_id="u-9", timeout=5)
    )
    for _ in range(100):
        await asyncio.sleep(0)
        if waiting.done():
            break
        clock.advance(1.0)
    with pytest.raises(UpdateTimeout):
        await waiting
    assert 5 <= clock() - started <= 7
    assert UPDATE_CALLS["add"] == 0
    assert [u["update_id"] for u in store.peek_pending_updates("upd_cart", handle.run_id)] == [
        "u-9"
    ]
    # A worker applies it later; asking again with the same id reads its outcome.
    assert await drive(handle) == RunStatus.SIGNAL_WAITING
    assert UPDATE_CALLS["add"] == 1
    assert (
        await plain.update("upd_cart", handle.run_id, "add", {"item": "lime"}, update_id="u-9") == 1
    )


async def test_an_oversized_update_is_refused_and_the_run_survives(
    client: WorkflowClient, drive: Drive
) -> None:
    @workflow(name="upd_oversized", max_event_payload_bytes=200)
    async def body(ctx: WorkflowContext) -> Any:
        ctx.on_update("store", lambda payload: len(payload["blob"]))
        return await ctx.wait_for_signal("done")

    handle = await client.submit("upd_oversized")
    assert await drive(handle) == RunStatus.SIGNAL_WAITING
    with pytest.raises((PayloadTooLarge, ValueError)):
        await handle.update("store", {"blob": "x" * 500}, timeout=5)
    assert await handle.status() == RunStatus.SIGNAL_WAITING
    assert await handle.update("store", {"blob": "small"}) == 5


async def test_an_update_handler_may_not_start_durable_operations(
    client: WorkflowClient, drive: Drive
) -> None:
    refused: list[str] = []

    @workflow(name="upd_nested")
    async def body(ctx: WorkflowContext) -> None:
        async def handler(payload: dict[str, Any]) -> str:
            try:
                await ctx.sleep(1)
            except NestedDurableOperationError as exc:
                refused.append(exc.boundary_kind)
            return "handled"

        ctx.on_update("poke", handler)
        await ctx.wait_for_signal("done")

    handle = await client.submit("upd_nested")
    assert await drive(handle) == RunStatus.SIGNAL_WAITING
    assert await handle.update("poke", {}) == "handled"
    assert refused == ["update"]
    assert of_kind(await handle.events(), EventKind.RUN_SLEEPING) == []


class HandsOnMidSend(MemoryStore):
    """A store where a hand-on lands right after the first signal is buffered: the run the
    signal went to moves (with its buffered signals and their send keys) to ``<id>.g``."""

    def __init__(self) -> None:
        super().__init__()
        self.sends: list[tuple[str, str | None]] = []

    def send_signal(self, name: str, run_id: str, *args: Any, **kwargs: Any) -> str:
        answer = super().send_signal(name, run_id, *args, **kwargs)
        self.sends.append((run_id, kwargs.get("idempotency_key")))
        if len(self.sends) == 1:
            self.hand_on_run(
                name,
                run_id,
                "lease-a",
                f"{run_id}.g",
                version="v2",
                version_behavior="auto_upgrade",
                gates=Gates(concurrency_key="acme", concurrency_max=5),
            )
        return answer


@pytest.mark.parametrize("signal_id", [None, "approve-1"])
async def test_a_signal_buffered_just_before_a_hand_on_moves_with_the_run_once(
    signal_id: str | None,
) -> None:
    store = HandsOnMidSend()
    client = WorkflowClient(store)
    store.submit_run("handed", "r1", {})
    assert store.claim_next_run("handed", "lease-a") == "r1"
    answer = await client.signal("handed", "r1", "approve", {"by": "dana"}, signal_id=signal_id)
    assert answer == "buffered"
    # Buffered where it was sent, the signal moved with the run: no second send is needed.
    assert [sent[0] for sent in store.sends] == ["r1"]
    assert store.sends[0][1] is not None  # sent with a key, which moved with it
    kept = store.peek_signal("handed", "r1.g", "approve")
    assert kept is not None
    assert kept["payload"] == {"by": "dana"}
    if signal_id is not None:  # the key moved with it: a retried send is recognised
        again = await client.signal("handed", "r1", "approve", {"by": "x"}, signal_id=signal_id)
        assert again == "duplicate"
    assert store.pop_signal_match("handed", "r1.g", "approve", kept["signal_id"])
    assert store.peek_signal("handed", "r1.g", "approve") is None  # no second copy
