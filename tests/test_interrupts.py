"""A person in the loop: ``ctx.interrupt`` parks a run on a question until ``client.resume``
answers it; ``result(on_interrupt=)`` and ``run_and_await`` answer it for their caller.

On memory through the inline runner (manual time), then SQLite and Valkey through a real
worker, the Kafka composite rebuilt from its journal, and the ``runs resume`` command."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from lockgate import (
    DurableInterrupt,
    DurableInvocationCancelled,
    DurableInvocationError,
    EventKind,
    InlineWorkflowRunner,
    InterruptAction,
    InterruptHandlerFailed,
    InterruptResponse,
    ManualClock,
    MemoryStore,
    NonDeterminismError,
    RunEvent,
    RunNotFoundError,
    RunNotWaitingError,
    RunStatus,
    SQLiteStore,
    Store,
    ValkeyStore,
    WaitTimeout,
    WorkflowClient,
    WorkflowContext,
    check_replay,
    run_and_await,
    step,
    workflow,
)
from lockgate.cli import main
from lockgate.runs import _interrupts as runs_interrupts
from lockgate.runs._chains import live_run
from lockgate.stores._types import interrupt_signal
from lockgate.worker import WorkerOptions, WorkflowWorker
from valkey_server import shared_url

Drive = Callable[..., Awaitable[RunStatus]]


def of_kind(events: list[RunEvent], kind: str) -> list[RunEvent]:
    return [e for e in events if e.kind == kind]


SHIPPED: list[str] = []


@step(name="int_ship")
async def ship(order: str) -> str:
    SHIPPED.append(order)
    return f"shipped {order}"


@workflow(name="int_approve")
async def approve_flow(ctx: WorkflowContext, order: str) -> dict[str, Any]:
    answer = await ctx.interrupt({"question": f"ship {order}?", "order": order})
    if answer.action == InterruptAction.REJECT:
        return {"shipped": False, "why": answer.value}
    return {"shipped": True, "by": answer.value, "receipt": await ship(order)}


@workflow(name="int_two")
async def two_questions(ctx: WorkflowContext) -> list[Any]:
    first = await ctx.interrupt({"q": "first"})
    second = await ctx.interrupt({"q": "note?"}, expects="text")
    return [first.action, first.value, second.action, second.value]


@workflow(name="int_expects")
async def expects_flow(ctx: WorkflowContext, expects: str) -> list[Any]:
    answer = await ctx.interrupt({"propose": {"amount": 10}}, expects=expects)  # type: ignore[arg-type]
    return [answer.action, answer.value]


@workflow(name="int_timeout")
async def timeout_flow(ctx: WorkflowContext, catch: bool = True) -> str:
    try:
        answer = await ctx.interrupt({"q": "in time?"}, timeout=60)
    except WaitTimeout:
        if not catch:
            raise
        return "timed out"
    return str(answer.action)


@workflow(name="int_guarded")
async def guarded_flow(ctx: WorkflowContext) -> str:
    try:
        await ctx.interrupt({"q": "anyone?"})
    except InterruptHandlerFailed as exc:
        return f"no answer: {exc.error.get('type')}"
    return "answered"


async def interrupted(runner: InlineWorkflowRunner, name: str, **params: Any) -> Any:
    """A run of ``name`` advanced to its first interrupt."""
    handle = await runner.client.submit(name, params)
    await runner.run(name, handle.run_id)
    assert await handle.status() == RunStatus.INTERRUPTED
    return handle


async def question_of(handle: Any) -> DurableInterrupt:
    with pytest.raises(DurableInterrupt) as raised:
        await handle.result()
    return raised.value


# -- the body's side and resume ------------------------------------------------------------------


async def test_an_interrupt_parks_the_run_until_resume_approves_it(
    runner: InlineWorkflowRunner, client: WorkflowClient, store: MemoryStore, drive: Drive
) -> None:
    SHIPPED.clear()
    handle = await interrupted(runner, "int_approve", order="A1")
    info = store.get_run("int_approve", handle.run_id)
    assert info is not None
    assert (info.lock_holder, info.wait.kind) == (None, "interrupt")  # type: ignore[union-attr]
    listed, _ = store.list_runs("int_approve")
    assert [(i.run_id, i.status) for i in listed] == [(handle.run_id, RunStatus.INTERRUPTED)]
    asked = of_kind(await handle.events(), EventKind.RUN_INTERRUPTED)
    assert len(asked) == 1
    assert asked[0].payload["payload"] == {"question": "ship A1?", "order": "A1"}
    assert asked[0].payload["expects"] == "approval"
    assert asked[0].payload["deadline"] is None
    assert SHIPPED == []

    await handle.resume("approve", "ana")
    assert await handle.status() == RunStatus.PENDING
    assert await drive(handle) == RunStatus.COMPLETE
    assert await handle.result() == {"shipped": True, "by": "ana", "receipt": "shipped A1"}
    resumed = of_kind(await handle.events(), EventKind.RUN_RESUMED)
    assert [(e.payload["action"], e.payload["value"]) for e in resumed] == [("approve", "ana")]
    assert resumed[0].payload["wait_id"] == asked[0].payload["wait_id"]
    assert SHIPPED == ["A1"]
    # The answer was taken out of the buffer once journaled.
    assert (
        store.peek_signal(
            "int_approve", handle.run_id, interrupt_signal(asked[0].payload["wait_id"])
        )
        is None
    )


async def test_reject_is_the_body_s_to_act_on(runner: InlineWorkflowRunner, drive: Drive) -> None:
    SHIPPED.clear()
    handle = await interrupted(runner, "int_approve", order="B2")
    await handle.resume(InterruptAction.REJECT, {"reason": "out of stock"})
    assert await drive(handle) == RunStatus.COMPLETE
    assert await handle.result() == {"shipped": False, "why": {"reason": "out of stock"}}
    assert SHIPPED == []


@pytest.mark.parametrize(
    ("expects", "action", "value"),
    [
        ("approval", "approve", None),
        ("approval", "reject", "too much"),
        ("choice", "respond", "red"),
        ("text", "respond", "looks fine"),
        ("value", "respond", {"amount": 12}),
        ("edit", "approve", None),
        ("edit", "reject", None),
        ("edit", "edit", {"amount": 8}),
    ],
)
async def test_each_action_answers_the_questions_that_take_it(
    runner: InlineWorkflowRunner, drive: Drive, expects: str, action: str, value: Any
) -> None:
    handle = await interrupted(runner, "int_expects", expects=expects)
    await handle.resume(action, value)
    assert await drive(handle) == RunStatus.COMPLETE
    assert await handle.result() == [action, value]


@pytest.mark.parametrize(
    ("expects", "action", "value", "match"),
    [
        ("approval", "respond", "yes", "answer it with approve or reject, not respond"),
        ("approval", "edit", {"a": 1}, "not edit"),
        ("text", "approve", None, "answer it with respond, not approve"),
        ("edit", "respond", 3, "approve, edit or reject"),
        ("edit", "edit", None, "needs the edited proposal"),
        ("approval", "maybe", None, "'maybe' is not an interrupt action"),
        ("approval", "approve", {"x": float("nan")}, "JSON"),
    ],
)
async def test_an_answer_that_does_not_fit_the_question_is_refused_and_nothing_sent(
    runner: InlineWorkflowRunner,
    store: MemoryStore,
    expects: str,
    action: str,
    value: Any,
    match: str,
) -> None:
    handle = await interrupted(runner, "int_expects", expects=expects)
    journal = await handle.events()
    with pytest.raises(ValueError, match=match):
        await handle.resume(action, value)
    assert await handle.events() == journal
    asked = of_kind(journal, EventKind.RUN_INTERRUPTED)[0]
    signal = interrupt_signal(asked.payload["wait_id"])
    assert store.peek_signal("int_expects", handle.run_id, signal) is None
    assert await handle.status() == RunStatus.INTERRUPTED


async def test_two_interrupts_in_a_row_and_a_stale_wait_id_is_refused(
    runner: InlineWorkflowRunner, drive: Drive
) -> None:
    handle = await interrupted(runner, "int_two")
    first = await question_of(handle)
    assert first.payload == {"q": "first"}
    await handle.resume("approve", wait_id=first.wait_id)
    assert await drive(handle) == RunStatus.INTERRUPTED
    second = await question_of(handle)
    assert second.payload == {"q": "note?"}
    assert second.wait_id != first.wait_id
    # An answer meant for the first question never lands on the second.
    with pytest.raises(RunNotWaitingError, match="answered already; it waits on"):
        await handle.resume("approve", wait_id=first.wait_id)
    with pytest.raises(RunNotWaitingError, match="never asked"):
        await handle.resume("respond", "x", wait_id="interrupt:7@00000000")
    assert await handle.status() == RunStatus.INTERRUPTED
    await handle.resume("respond", "all good", wait_id=second.wait_id)
    assert await drive(handle) == RunStatus.COMPLETE
    assert await handle.result() == ["approve", None, "respond", "all good"]


async def test_a_second_answer_is_refused_and_of_two_racing_one_applies(
    runner: InlineWorkflowRunner, drive: Drive
) -> None:
    handle = await interrupted(runner, "int_approve", order="C3")
    answers = await asyncio.gather(
        handle.resume("approve", "first"),
        handle.resume("reject", "second"),
        return_exceptions=True,
    )
    assert sorted(type(a).__name__ for a in answers) == ["NoneType", "RunNotWaitingError"]
    with pytest.raises(RunNotWaitingError, match="answered already"):
        await handle.resume("approve", "third")
    assert await drive(handle) == RunStatus.COMPLETE
    resumed = of_kind(await handle.events(), EventKind.RUN_RESUMED)
    assert len(resumed) == 1
    winner = answers.index(None)
    assert resumed[0].payload["value"] == ["first", "second"][winner]


async def test_an_answer_to_an_open_interrupt_of_a_run_not_parked_is_kept_for_it(
    runner: InlineWorkflowRunner, store: MemoryStore, drive: Drive
) -> None:
    @workflow(name="int_with_update")
    async def body(ctx: WorkflowContext) -> Any:
        notes: list[Any] = []
        ctx.on_update("note", lambda payload: notes.append(payload) or len(notes))
        answer = await ctx.interrupt({"q": "go?"})
        return [answer.action, notes]

    handle = await interrupted(runner, "int_with_update")
    # An update queues the parked run: it is pending, no longer parked, its interrupt open.
    store.deliver_update("int_with_update", handle.run_id, "note", {"n": 1}, "u1", "t")
    assert await handle.status() == RunStatus.PENDING
    await handle.resume("approve")  # buffered for the interrupt, not lost
    wait_id = of_kind(await handle.events(), EventKind.RUN_INTERRUPTED)[0].payload["wait_id"]
    assert store.peek_signal("int_with_update", handle.run_id, interrupt_signal(wait_id))
    assert await drive(handle) == RunStatus.COMPLETE
    assert await handle.result() == ["approve", [{"n": 1}]]
    assert len(of_kind(await handle.events(), EventKind.RUN_INTERRUPTED)) == 1
    assert len(of_kind(await handle.events(), EventKind.RUN_RESUMED)) == 1


async def test_resume_of_a_run_not_waiting_or_unknown_is_refused(
    runner: InlineWorkflowRunner, client: WorkflowClient, drive: Drive
) -> None:
    with pytest.raises(RunNotFoundError):
        await client.resume("int_approve", "no-such-run", "approve")
    queued = await client.submit("int_approve", {"order": "D4"})
    with pytest.raises(RunNotWaitingError, match="is not waiting on an interrupt"):
        await queued.resume("approve")
    handle = await interrupted(runner, "int_approve", order="D5")
    await handle.resume("approve")
    assert await drive(handle) == RunStatus.COMPLETE
    with pytest.raises(RunNotWaitingError, match="has ended"):
        await handle.resume("approve")


async def test_a_cancelled_interrupted_run_ends_cancelled_and_takes_no_answer(
    runner: InlineWorkflowRunner, drive: Drive
) -> None:
    handle = await interrupted(runner, "int_approve", order="E5")
    await handle.cancel(reason="changed my mind")
    with pytest.raises(RunNotWaitingError, match="being cancelled"):
        await handle.resume("approve")
    assert await drive(handle) == RunStatus.CANCELLED


async def test_the_question_and_the_reserved_signal_names_are_checked_in_the_body(
    client: WorkflowClient, drive: Drive
) -> None:
    @workflow(name="int_bad_questions")
    async def body(ctx: WorkflowContext) -> list[str]:
        refused = []
        for call in (
            lambda: ctx.interrupt(["not", "a", "dict"]),  # type: ignore[arg-type]
            lambda: ctx.interrupt({"q": object()}),
            lambda: ctx.interrupt({"q": 1}, expects="vote"),  # type: ignore[arg-type]
            lambda: ctx.interrupt({"q": 1}, timeout=float("inf")),
            lambda: ctx.wait_for_signal(interrupt_signal("interrupt:0@x")),
        ):
            try:
                await call()
            except (TypeError, ValueError) as exc:
                refused.append(type(exc).__name__)
        return refused

    handle = await client.submit("int_bad_questions")
    assert await drive(handle) == RunStatus.COMPLETE
    assert await handle.result() == [
        "TypeError",
        "TypeError",
        "ValueError",
        "ValueError",
        "ValueError",
    ]
    with pytest.raises(ValueError, match="reserved"):
        await handle.signal(interrupt_signal("interrupt:0@x"), {"action": "approve"})


async def test_a_journal_with_interrupts_replays_and_a_changed_body_is_refused(
    runner: InlineWorkflowRunner, client: WorkflowClient, drive: Drive
) -> None:
    handle = await interrupted(runner, "int_approve", order="R1")
    stages: list[str] = []

    @workflow(name="int_queried")
    async def queried(ctx: WorkflowContext) -> str:
        ctx.on_query("stage", lambda: stages[-1] if stages else "asking")
        answer = await ctx.interrupt({"q": "go?"})
        stages.append(str(answer.action))
        return "done"

    asking = await interrupted(runner, "int_queried")
    assert await asking.query("stage") == "asking"  # served by replay up to the open question

    await handle.resume("approve", "qa")
    assert await drive(handle) == RunStatus.COMPLETE
    events = await handle.events()
    state = await check_replay(approve_flow, events)
    assert state.calls[0].kind == "interrupt"
    assert (state.calls[0].outcome, state.calls[0].result) == (
        "resumed",
        {"action": "approve", "value": "qa"},
    )
    assert state.calls[0].payload == {"question": "ship R1?", "order": "R1"}

    @workflow(name="int_approve_changed")
    async def changed(ctx: WorkflowContext, order: str) -> dict[str, Any]:
        return {"shipped": True, "receipt": await ship(order)}

    renamed = [
        RunEvent(e.kind, {**e.payload, "name": "int_approve_changed"}, e.run_id)
        if e.kind == EventKind.RUN_INIT
        else e
        for e in events
    ]
    with pytest.raises(NonDeterminismError, match="interrupt 'interrupt'"):
        await check_replay(changed, renamed)


def test_a_kafka_journal_read_shows_a_run_on_its_question_as_interrupted() -> None:
    from lockgate.stores.kafka._fold import status_after

    assert status_after("run:interrupted", dict) == RunStatus.INTERRUPTED
    assert status_after("run:resumed", dict) == RunStatus.PENDING


# -- deadlines ------------------------------------------------------------------------------------


async def test_an_interrupt_with_a_timeout_raises_wait_timeout_at_its_deadline(
    runner: InlineWorkflowRunner, clock: ManualClock, drive: Drive
) -> None:
    started = clock()
    handle = await interrupted(runner, "int_timeout")
    wait = runner.store.get_run("int_timeout", handle.run_id).wait  # type: ignore[union-attr]
    assert wait is not None
    assert wait.due_at == started + 60
    clock.advance(59)
    assert await runner.fire_due_timers() == 0
    clock.advance(1)
    assert await runner.fire_due_timers() == 1
    with pytest.raises(RunNotWaitingError, match="reached its deadline"):
        await handle.resume("approve")
    assert await drive(handle) == RunStatus.COMPLETE
    assert await handle.result() == "timed out"
    assert len(of_kind(await handle.events(), EventKind.RUN_WAIT_TIMED_OUT)) == 1


async def test_an_answer_before_the_deadline_wins_and_an_uncaught_timeout_fails_the_run(
    runner: InlineWorkflowRunner, clock: ManualClock, drive: Drive
) -> None:
    handle = await interrupted(runner, "int_timeout")
    clock.advance(30)
    await handle.resume("approve")
    clock.advance(60)
    assert await runner.fire_due_timers() == 0
    assert await drive(handle) == RunStatus.COMPLETE
    assert await handle.result() == "approve"

    uncaught = await interrupted(runner, "int_timeout", catch=False)
    clock.advance(60)
    await runner.fire_due_timers()
    assert await drive(uncaught) == RunStatus.ERROR
    last = (await uncaught.events())[-1]
    assert (last.kind, last.payload["code"]) == (EventKind.RUN_ERROR, "wait_timeout")


async def test_a_holder_that_finds_its_interrupt_past_the_deadline_times_it_out(
    runner: InlineWorkflowRunner, clock: ManualClock, drive: Drive
) -> None:
    @workflow(name="int_holder_deadline")
    async def body(ctx: WorkflowContext) -> str:
        ctx.on_update("poke", lambda payload: "poked")
        try:
            await ctx.interrupt({"q": "soon?"}, timeout=10)
        except WaitTimeout as exc:
            return f"timed out at call {exc.call_index}"
        return "answered"

    handle = await interrupted(runner, "int_holder_deadline")
    clock.advance(11)  # past the deadline, the timer not fired: an update queues the run first
    runner.store.deliver_update("int_holder_deadline", handle.run_id, "poke", {}, "u1", "t")
    await runner.run(handle.name, handle.run_id)
    assert await handle.status() == RunStatus.COMPLETE
    assert await handle.result() == "timed out at call 0"
    events = await handle.events()
    assert len(of_kind(events, EventKind.RUN_WAIT_TIMED_OUT)) == 1
    assert of_kind(events, EventKind.RUN_UPDATE_COMPLETED)[0].payload["result"] == "poked"


# -- result(on_interrupt=) -----------------------------------------------------------------------


async def test_result_without_a_handler_raises_durable_interrupt_with_the_question(
    runner: InlineWorkflowRunner,
) -> None:
    handle = await interrupted(runner, "int_approve", order="F6")
    raised = await question_of(handle)
    asked = of_kind(await handle.events(), EventKind.RUN_INTERRUPTED)[0]
    assert (raised.name, raised.run_id) == ("int_approve", handle.run_id)
    assert raised.payload == {"question": "ship F6?", "order": "F6"}
    assert raised.wait_id == asked.payload["wait_id"]
    assert raised.event_id == str(asked.run_seq)
    assert raised.code == "suspend"


async def test_result_with_a_handler_answers_every_question_sync_or_async(
    runner: InlineWorkflowRunner, client: WorkflowClient
) -> None:
    asked: list[dict[str, Any]] = []

    async def handler(payload: dict[str, Any]) -> Any:
        asked.append(payload)
        if payload["q"] == "first":
            return InterruptResponse("approve", {"by": "bot"})
        return "noted"  # a plain value: the value of a respond

    handle = await client.submit("int_two")
    assert await handle.result(on_interrupt=handler) == [
        "approve",
        {"by": "bot"},
        "respond",
        "noted",
    ]
    assert asked == [{"q": "first"}, {"q": "note?"}]

    again = await client.submit("int_approve", {"order": "G7"})
    assert await again.result(on_interrupt=lambda p: InterruptResponse(InterruptAction.REJECT)) == {
        "shipped": False,
        "why": None,
    }


async def test_a_handler_that_raises_fails_the_question_and_its_exception_propagates(
    runner: InlineWorkflowRunner, client: WorkflowClient, drive: Drive
) -> None:
    def broken(payload: dict[str, Any]) -> Any:
        raise ConnectionError("the approvals desk is down")

    handle = await client.submit("int_approve", {"order": "H8"})
    with pytest.raises(ConnectionError, match="desk is down"):
        await handle.result(on_interrupt=broken)
    assert await drive(handle) == RunStatus.ERROR
    last = (await handle.events())[-1]
    assert (last.kind, last.payload["code"]) == (EventKind.RUN_ERROR, "interrupt_handler_failed")
    with pytest.raises(DurableInvocationError, match="handler failed"):
        await handle.result()

    # A body that catches the failure carries on.
    guarded = await client.submit("int_guarded")
    with pytest.raises(ConnectionError):
        await guarded.result(on_interrupt=broken)
    assert await drive(guarded) == RunStatus.COMPLETE
    assert await guarded.result() == "no answer: builtins:ConnectionError"


async def test_a_retry_of_a_run_whose_question_went_unanswered_asks_it_again(
    runner: InlineWorkflowRunner, client: WorkflowClient, clock: ManualClock, drive: Drive
) -> None:
    def broken(payload: dict[str, Any]) -> Any:
        raise ConnectionError("down")

    SHIPPED.clear()
    failed = await client.submit("int_two")
    with pytest.raises(ConnectionError):
        await failed.result(on_interrupt=lambda p: "first" if p["q"] == "note?" else broken(p))
    assert await drive(failed) == RunStatus.ERROR
    retry = await failed.retry()
    assert await drive(retry) == RunStatus.INTERRUPTED
    asked = await question_of(retry)
    assert asked.payload == {"q": "first"}
    assert asked.wait_id != (await question_of_events(failed))  # the retry's own question
    await retry.resume("approve")
    assert await retry.result(on_interrupt=lambda p: "again") == [
        "approve",
        None,
        "respond",
        "again",
    ]

    timed_out = await interrupted(runner, "int_timeout", catch=False)
    clock.advance(60)
    await runner.fire_due_timers()
    assert await drive(timed_out) == RunStatus.ERROR
    second = await timed_out.retry()
    assert await drive(second) == RunStatus.INTERRUPTED
    await second.resume("approve")
    assert await drive(second) == RunStatus.COMPLETE
    assert await second.result() == "approve"


async def question_of_events(handle: Any) -> str:
    return str(of_kind(await handle.events(), EventKind.RUN_INTERRUPTED)[0].payload["wait_id"])


async def test_a_handler_that_answers_with_an_action_the_question_does_not_take_fails_it(
    client: WorkflowClient, drive: Drive
) -> None:
    handle = await client.submit("int_approve", {"order": "I9"})
    with pytest.raises(ValueError, match="answer it with approve or reject"):
        await handle.result(on_interrupt=lambda payload: "yes please")  # a respond
    assert await drive(handle) == RunStatus.ERROR
    error = (await handle.events())[-1].payload
    assert error["code"] == "interrupt_handler_failed"
    assert "ValueError" in json.dumps(error)


async def test_a_handler_raising_durable_interrupt_leaves_the_run_waiting(
    client: WorkflowClient, drive: Drive
) -> None:
    handle = await client.submit("int_approve", {"order": "J1"})

    def defer(payload: dict[str, Any]) -> Any:
        raise DurableInterrupt("int_approve", handle.run_id, None, payload)

    with pytest.raises(DurableInterrupt):
        await handle.result(on_interrupt=defer)
    assert await handle.status() == RunStatus.INTERRUPTED
    await handle.resume("approve")
    assert await drive(handle) == RunStatus.COMPLETE


# -- run_and_await, against a worker ---------------------------------------------------------------

FAST = WorkerOptions(
    claim_poll_interval=0.005,
    timer_poll_interval_s=0.01,
    orphan_scan_interval=0.05,
    shutdown_grace=2.0,
)


class AskTheHost(Exception):
    """An adapter's own way of saying "the host answers this one": in ``suspend_on``."""


@contextlib.asynccontextmanager
async def serving(store: Store) -> AsyncIterator[WorkflowWorker]:
    worker = WorkflowWorker(
        workflows=[approve_flow, two_questions, guarded_flow], store=store, options=FAST
    )
    task = asyncio.create_task(worker.run())
    try:
        yield worker
    finally:
        worker.stop()
        async with asyncio.timeout(10):
            await asyncio.gather(task, return_exceptions=True)


@pytest.fixture(params=["memory", "sqlite", "valkey"])
def live_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """A store a worker on the system clock serves."""
    store: Store
    if request.param == "memory":
        store = MemoryStore(lock_ttl=5.0, heartbeat_interval=0.05)
    elif request.param == "sqlite":
        store = SQLiteStore(tmp_path / "int.db", lock_ttl=5.0, heartbeat_interval=0.05)
    else:
        store = ValkeyStore(
            shared_url(),
            namespace=f"int{uuid.uuid4().hex[:10]}",
            lock_ttl=5.0,
            heartbeat_interval=0.05,
        )
    yield store
    store.close()


async def test_run_and_await_answers_with_its_handler_and_re_attaches(live_store: Store) -> None:
    SHIPPED.clear()
    async with serving(live_store):
        answered = await run_and_await(
            live_store,
            "int_two",
            idempotency_key="order-1",
            on_interrupt=lambda p: InterruptResponse("approve") if p["q"] == "first" else "ok",
            poll_interval=0.01,
            timeout=60,
        )
        assert answered == ["approve", None, "respond", "ok"]
        again = await run_and_await(
            live_store, "int_two", idempotency_key="order-1", poll_interval=0.01, timeout=60
        )
        assert again == answered


async def test_run_and_await_without_a_handler_raises_durable_interrupt_then_resumes(
    live_store: Store,
) -> None:
    SHIPPED.clear()
    client = WorkflowClient(live_store, poll_interval=0.01)
    async with serving(live_store):
        with pytest.raises(DurableInterrupt) as raised:
            await run_and_await(
                live_store,
                "int_approve",
                {"order": "K2"},
                idempotency_key="order-2",
                poll_interval=0.01,
                timeout=60,
            )
        assert raised.value.payload == {"question": "ship K2?", "order": "K2"}
        listed, _ = live_store.list_runs("int_approve")
        assert [(i.run_id, i.status) for i in listed] == [("order-2", RunStatus.INTERRUPTED)]
        await client.resume(
            "int_approve", "order-2", "approve", "ops", wait_id=raised.value.wait_id
        )
        with pytest.raises(RunNotWaitingError):
            await client.resume("int_approve", "order-2", "reject", wait_id=raised.value.wait_id)
        result = await run_and_await(
            live_store,
            "int_approve",
            {"order": "K2"},
            idempotency_key="order-2",
            poll_interval=0.01,
            timeout=60,
        )
        assert result == {"shipped": True, "by": "ops", "receipt": "shipped K2"}
    assert SHIPPED == ["K2"]


async def test_run_and_await_suspend_on_leaves_the_run_waiting_and_a_failure_fails_it(
    live_store: Store,
) -> None:
    client = WorkflowClient(live_store, poll_interval=0.01)

    def host_answers(payload: dict[str, Any]) -> Any:
        raise AskTheHost(str(payload))

    async with serving(live_store):
        with pytest.raises(AskTheHost):
            await run_and_await(
                live_store,
                "int_guarded",
                idempotency_key="g-1",
                on_interrupt=host_answers,
                suspend_on=(AskTheHost,),
                poll_interval=0.01,
                timeout=60,
            )
        assert await client.status("int_guarded", "g-1") == RunStatus.INTERRUPTED
        await client.resume("int_guarded", "g-1", "approve")
        assert await client.result("int_guarded", "g-1", timeout=60) == "answered"

        # Not in suspend_on: the question fails, and the body (which catches it) carries on.
        with pytest.raises(AskTheHost):
            await run_and_await(
                live_store,
                "int_guarded",
                idempotency_key="g-2",
                on_interrupt=host_answers,
                poll_interval=0.01,
                timeout=60,
            )
        result = await client.result("int_guarded", "g-2", timeout=60)
        assert result == f"no answer: {AskTheHost.__module__}:AskTheHost"

        # Uncaught, the failure ends the run in error with its code.
        with pytest.raises(AskTheHost):
            await run_and_await(
                live_store,
                "int_approve",
                {"order": "L3"},
                idempotency_key="a-3",
                on_interrupt=host_answers,
                poll_interval=0.01,
                timeout=60,
            )
        with pytest.raises(DurableInvocationError) as failed:
            await client.result("int_approve", "a-3", timeout=60)
        assert not isinstance(failed.value, DurableInvocationCancelled)
        last = live_store.get_last_event("int_approve", "a-3")
        assert last is not None
        assert last.payload["code"] == "interrupt_handler_failed"


async def test_run_and_await_refuses_a_suspend_on_that_is_not_exception_classes() -> None:
    with pytest.raises(TypeError, match="suspend_on"):
        await run_and_await(
            MemoryStore(),
            "int_two",
            idempotency_key="x",
            suspend_on=[AskTheHost],  # type: ignore[arg-type]
        )


# -- the Kafka composite, rebuilt ----------------------------------------------------------------


async def test_an_interrupted_run_is_rebuilt_from_the_kafka_journal_as_interrupted(
    kafka_bootstrap: str,
) -> None:
    from lockgate.stores import (
        CompositeStore,
        KafkaEventLogStore,
        ValkeyLifecycleStore,
        rebuild_lifecycle,
    )

    clock = ManualClock()
    lifecycle = ValkeyLifecycleStore(
        shared_url(), namespace=f"ik{uuid.uuid4().hex[:10]}", clock=clock, lock_ttl=30.0
    )
    events = KafkaEventLogStore(
        kafka_bootstrap, topic_prefix=f"ik{uuid.uuid4().hex[:10]}", shard_count=1
    )
    store = CompositeStore(lifecycle=lifecycle, events=events)
    try:
        runner = InlineWorkflowRunner(store=store, clock=clock)
        handle = await interrupted(runner, "int_two")
        await handle.resume("approve")
        await runner.run("int_two", handle.run_id)  # the second question
        before = store.get_run("int_two", handle.run_id)
        assert before is not None
        assert before.status == RunStatus.INTERRUPTED

        pattern = f"lg:{{{lifecycle.namespace}[:}}]*"
        for found in list(lifecycle._redis.scan_iter(match=pattern)):
            lifecycle._redis.delete(found)
        assert store.get_run("int_two", handle.run_id) is None
        report = rebuild_lifecycle(store)
        assert report.by_status() == {"interrupted": 1}
        assert "1 waiting on an interrupt" in "\n".join(report.lines())
        after = store.get_run("int_two", handle.run_id)
        assert after is not None
        assert (after.status, after.wait) == (RunStatus.INTERRUPTED, before.wait)

        await handle.resume("respond", "rebuilt")
        await runner.run("int_two", handle.run_id)
        assert await handle.result() == ["approve", None, "respond", "rebuilt"]
    finally:
        store.close()


# -- the command line ----------------------------------------------------------------------------


def _cli(capsys: pytest.CaptureFixture[str], url: str, *argv: str) -> tuple[int, str, str]:
    code = main([*argv, "--store", url])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


async def test_runs_resume_and_runs_list_status_interrupted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    clock = ManualClock()
    store = SQLiteStore(tmp_path / "cli.db", clock=clock)
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    runner = InlineWorkflowRunner(store=store, clock=clock)
    try:
        handle = await interrupted(runner, "int_two")
        done = await runner.client.submit("int_approve", {"order": "M4"})
        first = await question_of(handle)

        code, out, _ = await asyncio.to_thread(
            _cli, capsys, url, "runs", "list", "int_two", "--status", "interrupted", "--json"
        )
        assert code == 0
        assert [json.loads(line)["run_id"] for line in out.splitlines()] == [handle.run_id]
        code, out, _ = await asyncio.to_thread(_cli, capsys, url, "runs", "list", "int_two")
        assert "interrupted  " in out
        assert f"an answer to {first.wait_id}, no deadline" in out
        code, out, _ = await asyncio.to_thread(
            _cli, capsys, url, "runs", "show", "int_two", handle.run_id
        )
        assert "status       interrupted" in out
        assert f"waiting on   an answer to {first.wait_id}, no deadline" in out
        assert 'question     (approval) {"q":"first"}' in out
        assert f"run:interrupted  {first.wait_id} (approval)" in out

        # A bad action, bad JSON, an action the question does not take: exit 2, one line.
        for argv, match in [
            (["maybe"], "'maybe' is not an interrupt action"),
            (["approve", "--value", "{nope"], "--value is not valid JSON"),
            (["respond", "--value", '"x"'], "answer it with approve or reject, not respond"),
            (["approve", "--wait-id", "bad\nid"], "wait id"),
        ]:
            code, out, err = await asyncio.to_thread(
                _cli, capsys, url, "runs", "resume", "int_two", handle.run_id, *argv
            )
            assert code == 2, (argv, err)
            assert len(err.strip().splitlines()) == 1, err
            assert match in err
            assert out == ""
        assert await handle.status() == RunStatus.INTERRUPTED

        code, out, _ = await asyncio.to_thread(
            _cli,
            capsys,
            url,
            "runs",
            "resume",
            "int_two",
            handle.run_id,
            "approve",
            "--value",
            '{"by": "cli"}',
            "--wait-id",
            first.wait_id,
        )
        assert code == 0
        assert (
            out.strip()
            == f'{first.wait_id} of run {handle.run_id} answered: approve {{"by":"cli"}}'
        )
        # The same wait id again, and a run not waiting: exit 2, one line.
        code, _, err = await asyncio.to_thread(
            _cli,
            capsys,
            url,
            "runs",
            "resume",
            "int_two",
            handle.run_id,
            "approve",
            "--wait-id",
            first.wait_id,
        )
        assert code == 2
        assert "answered already" in err
        code, _, err = await asyncio.to_thread(
            _cli, capsys, url, "runs", "resume", "int_approve", done.run_id, "approve"
        )
        assert code == 2
        assert "is not waiting on an interrupt" in err
        code, _, err = await asyncio.to_thread(
            _cli, capsys, url, "runs", "resume", "int_two", "nope", "approve"
        )
        assert code == 2
        assert "no run 'nope'" in err

        await runner.run("int_two", handle.run_id)
        code, out, _ = await asyncio.to_thread(
            _cli,
            capsys,
            url,
            "runs",
            "resume",
            "int_two",
            handle.run_id,
            "respond",
            "--value",
            '"from the shell"',
        )
        assert code == 0
        await runner.run("int_two", handle.run_id)
        assert await handle.result() == ["approve", {"by": "cli"}, "respond", "from the shell"]
        code, out, _ = await asyncio.to_thread(
            _cli, capsys, url, "runs", "events", "int_two", handle.run_id
        )
        assert "run:resumed" in out
        assert 'respond "from the shell"' in out
    finally:
        store.close()


# -- the docs ------------------------------------------------------------------------------------

DOCS = Path(__file__).parents[1] / "docs" / "composition.md"


def test_the_example_in_the_docs_runs_and_prints_what_they_show() -> None:
    section = DOCS.read_text().split("## A person in the loop: interrupts\n", 1)[1]
    section = section.split("\n## ", 1)[0]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    shown = section.split("```text\n", 1)[1].split("```", 1)[0]
    ran = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == shown


CHAIN_ANSWERS: list[tuple[str, str]] = []


@workflow(name="int_chain")
async def int_chain(ctx: WorkflowContext, hop: int = 0) -> Any:
    answer = await ctx.interrupt({"q": f"hop {hop}?"})
    CHAIN_ANSWERS.append((ctx.run_id, str(answer.action)))
    if hop == 0:
        await ctx.continue_as_new({"hop": 1})
    return str(answer.action)


async def test_one_resume_answers_one_question_when_the_run_moves_on_meanwhile(
    runner: InlineWorkflowRunner, client: WorkflowClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An answer queues the run; a fast worker takes it, continues as new, and the successor
    asks its own question, all before the client would look at the run again: the answer
    went to the question it was meant for, and the successor's question still waits."""
    CHAIN_ANSWERS.clear()
    handle = await client.submit("int_chain", run_id="ic")
    await runner.run("int_chain", "ic")
    looks = {"n": 0}

    async def tail_with_a_fast_worker(store: Any, name: str, run_id: str) -> Any:
        looks["n"] += 1
        if looks["n"] == 2:
            await runner.run("int_chain", "ic")
            await runner.run("int_chain", "ic.c1")
        return await live_run(store, name, run_id)

    monkeypatch.setattr(runs_interrupts, "live_run", tail_with_a_fast_worker)
    await client.resume("int_chain", "ic", "approve")
    await runner.run("int_chain", "ic")
    await runner.run("int_chain", "ic.c1")
    monkeypatch.undo()
    assert CHAIN_ANSWERS == [("ic", "approve")]
    assert await handle.status() == RunStatus.INTERRUPTED  # hop 1 asks, unanswered
    await handle.resume("reject")
    await runner.run("int_chain", "ic.c1")
    assert await handle.result() == "reject"
