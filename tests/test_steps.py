"""Steps and the durable context inside a run: journaling, typed results, retries, failures
raised into the body, deterministic values, custom events, caps, timeouts and determinism."""

from __future__ import annotations

import asyncio
import threading
import uuid
import warnings
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pytest
from pydantic import BaseModel

from lockgate import (
    DuplicateWorkflowWarning,
    DurableInvocationCancelled,
    DurableInvocationError,
    EventKind,
    Fatal,
    InlineWorkflowRunner,
    ManualClock,
    NestedDurableOperationError,
    PayloadTooLarge,
    Poison,
    RetryPolicy,
    RunEvent,
    RunHandle,
    RunStatus,
    StepContext,
    StepFailedError,
    Transient,
    UnboundContextError,
    WorkflowClient,
    WorkflowContext,
    step,
    workflow,
)

Drive = Callable[..., Awaitable[RunStatus]]
NO_BACKOFF = {"initial_backoff": 0.0, "jitter": 0.0}


class Crash(BaseException):
    """The worker process died here: nothing in the engine catches it."""


class OutOfStock(Exception):
    """An importable failure type, so a replay can rebuild it."""


class Quote(BaseModel):
    sku: str
    cents: int


@dataclass
class Receipt:
    receipt_id: str
    total: int


def kinds(events: list[RunEvent]) -> list[str]:
    return [e.kind for e in events]


def step_events(events: list[RunEvent], kind: str, step_id: str) -> list[RunEvent]:
    return [e for e in events if e.kind == kind and e.payload.get("step_id") == step_id]


async def crash_then_recover(
    runner: InlineWorkflowRunner, clock: ManualClock, handle: RunHandle
) -> None:
    """Run one attempt that dies, let its lease lapse, and requeue the run."""
    with pytest.raises(Crash):
        await runner.run(handle.name, handle.run_id)
    assert await handle.status() == RunStatus.IN_PROGRESS
    clock.advance(31.0)  # past the store's lock_ttl of 30s
    assert runner.store.recover_pending_runs(handle.name) == [handle.run_id]


# -- calling steps ---------------------------------------------------------------------------


async def test_async_and_sync_steps_are_journaled_and_awaited(
    client: WorkflowClient, drive: Drive
) -> None:
    calls: dict[str, int] = {"add": 0, "double": 0, "look": 0}
    threads: list[int] = []

    @step
    async def add_one(x: int) -> int:
        calls["add"] += 1
        return x + 1

    @step
    def double(x: int) -> int:
        calls["double"] += 1
        threads.append(threading.get_ident())
        return x * 2

    @step(name="steps_basic_look", effect="read")
    async def look(x: int) -> str:
        calls["look"] += 1
        return f"saw {x}"

    @workflow(name="steps_basic")
    async def body(ctx: WorkflowContext, x: int) -> dict[str, Any]:
        a = await add_one(x)
        b = await double(a)
        c = await look(b)
        return {"a": a, "b": b, "c": c}

    handle = await client.submit("steps_basic", {"x": 1})
    assert await drive(handle) == RunStatus.COMPLETE
    assert await handle.result() == {"a": 2, "b": 4, "c": "saw 4"}
    assert calls == {"add": 1, "double": 1, "look": 1}
    assert len(threads) == 1
    assert threads[0] != threading.get_ident()  # a sync step runs off the event loop

    events = await handle.events()
    add_name = add_one.__lockgate_step__.name  # type: ignore[attr-defined]
    assert [e.payload["result"] for e in step_events(events, EventKind.STEP_DONE, add_name)] == [2]
    assert len(step_events(events, EventKind.STEP_PENDING, add_name)) == 1
    # A read step journals no step:pending.
    assert step_events(events, EventKind.STEP_PENDING, "steps_basic_look") == []
    assert len(step_events(events, EventKind.STEP_DONE, "steps_basic_look")) == 1
    dones = [e.payload["call_index"] for e in events if e.kind == EventKind.STEP_DONE]
    assert dones == [0, 1, 2]


async def test_ctx_step_runs_an_undecorated_callable_with_name_and_retry(
    client: WorkflowClient, drive: Drive
) -> None:
    tries: list[int] = []

    async def fetch_price(sku: str, *, currency: str) -> str:
        tries.append(len(tries) + 1)
        if len(tries) == 1:
            raise ConnectionError("flaky")
        return f"{sku}:{currency}:42"

    def total(a: int, b: int) -> int:
        return a + b

    @workflow(name="steps_ctx_step")
    async def body(ctx: WorkflowContext) -> list[Any]:
        price = await ctx.step(
            fetch_price,
            "sku-1",
            currency="EUR",
            name="steps_fetch_price",
            retry=RetryPolicy(max_attempts=2, **NO_BACKOFF),
        )
        summed = await ctx.step(total, 2, 3)
        return [price, summed]

    handle = await client.submit("steps_ctx_step")
    assert await drive(handle) == RunStatus.COMPLETE
    assert await handle.result() == ["sku-1:EUR:42", 5]
    assert tries == [1, 2]
    events = await handle.events()
    errors = step_events(events, EventKind.STEP_ERROR, "steps_fetch_price")
    assert [(e.payload["attempt"], e.payload["final"]) for e in errors] == [(1, False)]
    done = step_events(events, EventKind.STEP_DONE, "steps_fetch_price")
    assert [e.payload["attempt"] for e in done] == [2]
    assert step_events(events, EventKind.STEP_DONE, total.__qualname__)[0].payload["result"] == 5


async def test_step_context_is_injected_and_its_idempotency_key_is_stable(
    client: WorkflowClient, drive: Drive
) -> None:
    seen: list[StepContext] = []

    @step
    async def first() -> int:
        return 1

    @step(name="steps_charge", retry=RetryPolicy(max_attempts=3, **NO_BACKOFF))
    async def charge(amount: int, sc: StepContext) -> str:
        seen.append(sc)
        if sc.attempt < 3:
            raise Transient("gateway busy")
        return f"charged {amount} with {sc.idempotency_key}"

    @workflow(name="steps_step_context")
    async def body(ctx: WorkflowContext) -> str:
        await first()
        result: str = await charge(500)
        return result

    handle = await client.submit("steps_step_context")
    assert await drive(handle) == RunStatus.COMPLETE
    assert [sc.attempt for sc in seen] == [1, 2, 3]
    assert {sc.run_id for sc in seen} == {handle.run_id}
    assert {sc.run_name for sc in seen} == {"steps_step_context"}
    assert {sc.step_id for sc in seen} == {"steps_charge"}
    assert {sc.call_index for sc in seen} == {1}
    keys = {sc.idempotency_key for sc in seen}
    assert keys == {f"{handle.run_id}:1:steps_charge"}
    assert await handle.result() == f"charged 500 with {handle.run_id}:1:steps_charge"


async def test_the_idempotency_key_survives_a_crash_inside_the_step(
    runner: InlineWorkflowRunner, client: WorkflowClient, clock: ManualClock, drive: Drive
) -> None:
    keys: list[str] = []

    @step(name="steps_charge_crashing")
    async def charge(sc: StepContext) -> str:
        keys.append(sc.idempotency_key)
        if len(keys) == 1:
            raise Crash()  # the process dies after the charge was sent
        return "charged"

    @workflow(name="steps_key_across_crash")
    async def body(ctx: WorkflowContext) -> str:
        result: str = await charge()
        return result

    handle = await client.submit("steps_key_across_crash")
    await crash_then_recover(runner, clock, handle)
    assert await drive(handle) == RunStatus.COMPLETE
    assert keys == [f"{handle.run_id}:0:steps_charge_crashing"] * 2
    events = await handle.events()
    assert len(step_events(events, EventKind.STEP_PENDING, "steps_charge_crashing")) == 2
    assert len(step_events(events, EventKind.STEP_DONE, "steps_charge_crashing")) == 1


async def test_the_retry_budget_carries_over_to_the_next_attempt(
    runner: InlineWorkflowRunner, client: WorkflowClient, clock: ManualClock, drive: Drive
) -> None:
    attempts: list[int] = []
    policy = RetryPolicy(max_attempts=2, initial_backoff=5.0, jitter=0)

    @step(name="steps_budget_step", retry=policy)
    async def flaky(sc: StepContext) -> None:
        attempts.append(sc.attempt)
        raise ConnectionError("down")

    @workflow(name="steps_retry_budget")
    async def body(ctx: WorkflowContext) -> None:
        await flaky()

    handle = await client.submit("steps_retry_budget")
    task = asyncio.create_task(runner.run(handle.name, handle.run_id))
    for _ in range(100):
        await asyncio.sleep(0)
        if attempts and clock.sleepers >= 2:  # the heartbeat and the backoff
            break
    assert attempts == [1]
    task.cancel()  # the process dies during the backoff
    with pytest.raises(asyncio.CancelledError):
        await task
    clock.advance(31.0)
    assert runner.store.recover_pending_runs(handle.name) == [handle.run_id]
    assert await drive(handle) == RunStatus.ERROR
    assert attempts == [1, 2]
    events = await handle.events()
    errors = step_events(events, EventKind.STEP_ERROR, "steps_budget_step")
    assert [(e.payload["attempt"], e.payload["final"]) for e in errors] == [(1, False), (2, True)]


# -- typed results ---------------------------------------------------------------------------


async def test_typed_results_round_trip_and_replay_with_their_declared_type(
    runner: InlineWorkflowRunner, client: WorkflowClient, clock: ManualClock, drive: Drive
) -> None:
    calls = {"quote": 0, "receipt": 0, "crash": 0}
    observed: list[tuple[Any, Any]] = []

    @step
    async def get_quote(sku: str) -> Quote:
        calls["quote"] += 1
        return Quote(sku=sku, cents=1999)

    @step
    async def get_receipt(quote: Quote) -> Receipt:
        calls["receipt"] += 1
        return Receipt(receipt_id=f"r-{quote.sku}", total=quote.cents)

    @step
    async def crash_once() -> None:
        calls["crash"] += 1
        if calls["crash"] == 1:
            raise Crash()

    @workflow(name="steps_typed_results")
    async def body(ctx: WorkflowContext) -> dict[str, Any]:
        quote = await get_quote("sku-9")
        receipt = await get_receipt(quote)
        observed.append((quote, receipt))
        await crash_once()
        return {"quote": quote.model_dump(), "receipt": receipt.total}

    handle = await client.submit("steps_typed_results")
    await crash_then_recover(runner, clock, handle)
    assert await drive(handle) == RunStatus.COMPLETE

    assert calls == {"quote": 1, "receipt": 1, "crash": 2}
    assert len(observed) == 2
    for quote, receipt in observed:
        assert type(quote) is Quote
        assert type(receipt) is Receipt
    assert observed[0] == observed[1]
    assert observed[1][1] == Receipt(receipt_id="r-sku-9", total=1999)
    events = await handle.events()
    quote_done = step_events(events, EventKind.STEP_DONE, get_quote.__lockgate_step__.name)  # type: ignore[attr-defined]
    assert quote_done[0].payload["result"] == {"sku": "sku-9", "cents": 1999}
    assert await handle.result() == {"quote": {"sku": "sku-9", "cents": 1999}, "receipt": 1999}


async def test_a_result_that_does_not_fit_its_annotation_ends_the_run_unretried(
    client: WorkflowClient, drive: Drive
) -> None:
    calls = {"n": 0}

    @step(name="steps_bad_type", retry=RetryPolicy(max_attempts=4, **NO_BACKOFF))
    async def count_items() -> int:
        calls["n"] += 1
        return "many"  # type: ignore[return-value]

    @workflow(name="steps_result_type_mismatch")
    async def body(ctx: WorkflowContext) -> int:
        n: int = await count_items()
        return n

    handle = await client.submit("steps_result_type_mismatch")
    assert await drive(handle) == RunStatus.ERROR
    assert calls["n"] == 1
    events = await handle.events()
    errors = step_events(events, EventKind.STEP_ERROR, "steps_bad_type")
    assert len(errors) == 1
    assert errors[0].payload["final"] is True
    assert errors[0].payload["error"]["code"] == "step_result_type"
    assert step_events(events, EventKind.STEP_DONE, "steps_bad_type") == []
    assert events[-1].kind == EventKind.RUN_ERROR
    assert events[-1].payload["code"] == "step_result_type"
    with pytest.raises(DurableInvocationError, match="steps_bad_type"):
        await handle.result()


async def test_a_non_json_result_without_annotation_is_an_error(
    client: WorkflowClient, drive: Drive
) -> None:
    calls = {"n": 0}

    @step(name="steps_non_json")
    async def make_set():  # type: ignore[no-untyped-def]
        calls["n"] += 1
        return {1, 2, 3}

    @workflow(name="steps_non_json_result")
    async def body(ctx: WorkflowContext) -> None:
        await make_set()

    handle = await client.submit("steps_non_json_result")
    assert await drive(handle) == RunStatus.ERROR
    assert calls["n"] == 1
    events = await handle.events()
    assert step_events(events, EventKind.STEP_DONE, "steps_non_json") == []
    assert events[-1].payload["code"] == "step_result_type"
    assert "JSON" in events[-1].payload["message"]


# -- retries and failures --------------------------------------------------------------------


async def test_transient_is_retried_up_to_max_attempts_even_when_not_listed(
    client: WorkflowClient, drive: Drive
) -> None:
    calls = {"n": 0}
    policy = RetryPolicy(max_attempts=3, retryable=(KeyError,), **NO_BACKOFF)

    @step(name="steps_always_transient", retry=policy)
    async def call_api() -> None:
        calls["n"] += 1
        raise Transient("upstream 503", code="upstream_unavailable")

    @workflow(name="steps_transient")
    async def body(ctx: WorkflowContext) -> None:
        await call_api()

    handle = await client.submit("steps_transient")
    assert await drive(handle) == RunStatus.ERROR
    assert calls["n"] == 3
    events = await handle.events()
    errors = step_events(events, EventKind.STEP_ERROR, "steps_always_transient")
    assert [(e.payload["attempt"], e.payload["final"]) for e in errors] == [
        (1, False),
        (2, False),
        (3, True),
    ]
    terminal = events[-1]
    assert terminal.payload["code"] == "transient"
    assert terminal.payload["user_code"] == "upstream_unavailable"
    with pytest.raises(DurableInvocationError) as raised:
        await handle.result()
    assert raised.value.user_code == "upstream_unavailable"


@pytest.mark.parametrize(("failure", "code"), [(Poison, "poison"), (Fatal, "fatal")])
async def test_poison_and_fatal_are_never_retried_and_carry_their_user_code(
    client: WorkflowClient, drive: Drive, failure: type[Exception], code: str
) -> None:
    calls = {"n": 0}
    name = f"steps_never_retried_{code}"
    policy = RetryPolicy(max_attempts=5, retryable=(failure,), **NO_BACKOFF)

    @step(name=f"{name}_step", retry=policy)
    async def validate() -> None:
        calls["n"] += 1
        raise failure("order 7 is malformed", code="malformed_order")

    @workflow(name=name)
    async def body(ctx: WorkflowContext) -> None:
        await validate()

    handle = await client.submit(name)
    assert await drive(handle) == RunStatus.ERROR
    assert calls["n"] == 1
    events = await handle.events()
    errors = step_events(events, EventKind.STEP_ERROR, f"{name}_step")
    assert [e.payload["final"] for e in errors] == [True]
    assert errors[0].payload["error"]["user_code"] == "malformed_order"
    assert events[-1].kind == EventKind.RUN_ERROR
    assert events[-1].payload["code"] == code
    assert events[-1].payload["user_code"] == "malformed_order"
    with pytest.raises(DurableInvocationError) as raised:
        await handle.result()
    assert raised.value.user_code == "malformed_order"
    assert not isinstance(raised.value, DurableInvocationCancelled)


async def test_retryable_limits_which_failures_are_retried(
    client: WorkflowClient, drive: Drive
) -> None:
    calls = {"conn": 0, "value": 0}
    policy = RetryPolicy(max_attempts=4, retryable=(ConnectionError,), **NO_BACKOFF)

    @step(name="steps_retry_conn", retry=policy)
    async def connect() -> str:
        calls["conn"] += 1
        if calls["conn"] < 3:
            raise ConnectionError("refused")
        return "connected"

    @step(name="steps_retry_value", retry=policy)
    async def parse() -> str:
        calls["value"] += 1
        raise ValueError("not retryable")

    @workflow(name="steps_retryable")
    async def body(ctx: WorkflowContext) -> list[str]:
        out = [await connect()]
        try:
            await parse()
        except ValueError as exc:
            out.append(f"gave up: {exc}")
        return out

    handle = await client.submit("steps_retryable")
    assert await drive(handle) == RunStatus.COMPLETE
    assert await handle.result() == ["connected", "gave up: not retryable"]
    assert calls == {"conn": 3, "value": 1}


async def test_retries_wait_their_backoff_on_the_runner_clock(
    runner: InlineWorkflowRunner, client: WorkflowClient, clock: ManualClock
) -> None:
    times: list[float] = []
    policy = RetryPolicy(max_attempts=3, initial_backoff=5.0, backoff_multiplier=2.0, jitter=0)

    @step(name="steps_backoff_step", retry=policy)
    async def flaky() -> str:
        times.append(clock())
        if len(times) < 3:
            raise Transient("again")
        return "ok"

    @workflow(name="steps_backoff")
    async def body(ctx: WorkflowContext) -> str:
        result: str = await flaky()
        return result

    handle = await client.submit("steps_backoff")
    attempt = asyncio.create_task(runner.run(handle.name, handle.run_id))
    for _ in range(200):
        await asyncio.sleep(0)
        if attempt.done():
            break
        clock.advance(1.0)
    await attempt
    assert await handle.status() == RunStatus.COMPLETE
    assert [round(t - times[0]) for t in times] == [0, 5, 15]


async def test_a_final_failure_is_raised_into_the_body_and_replayed_the_same_way(
    runner: InlineWorkflowRunner, client: WorkflowClient, clock: ManualClock, drive: Drive
) -> None:
    calls = {"reserve": 0, "backorder": 0, "ship": 0, "crash": 0}
    caught: list[OutOfStock] = []

    @step(name="steps_reserve", retry=RetryPolicy(max_attempts=2, **NO_BACKOFF))
    async def reserve(sku: str) -> str:
        calls["reserve"] += 1
        raise OutOfStock(f"{sku} is out of stock")

    @step(name="steps_backorder")
    async def backorder(sku: str) -> str:
        calls["backorder"] += 1
        return f"backordered {sku}"

    @step(name="steps_ship")
    async def ship(sku: str) -> str:
        calls["ship"] += 1
        return f"shipped {sku}"

    @step(name="steps_crash_once")
    async def crash_once() -> None:
        calls["crash"] += 1
        if calls["crash"] == 1:
            raise Crash()

    @workflow(name="steps_failure_into_body")
    async def body(ctx: WorkflowContext, sku: str) -> str:
        try:
            await reserve(sku)
        except OutOfStock as exc:
            caught.append(exc)
            outcome: str = await backorder(sku)
        else:
            outcome = await ship(sku)
        await crash_once()
        return outcome

    handle = await client.submit("steps_failure_into_body", {"sku": "sku-3"})
    await crash_then_recover(runner, clock, handle)
    assert await drive(handle) == RunStatus.COMPLETE
    assert await handle.result() == "backordered sku-3"
    assert calls == {"reserve": 2, "backorder": 1, "ship": 0, "crash": 2}
    assert len(caught) == 2
    assert all(type(exc) is OutOfStock for exc in caught)
    assert [str(exc) for exc in caught] == ["sku-3 is out of stock"] * 2
    events = await handle.events()
    assert len(step_events(events, EventKind.STEP_ERROR, "steps_reserve")) == 2


async def test_a_replayed_user_failure_keeps_its_type_and_user_code(
    runner: InlineWorkflowRunner, client: WorkflowClient, clock: ManualClock, drive: Drive
) -> None:
    calls = {"check": 0, "crash": 0}
    caught: list[Poison] = []

    @step(name="steps_check_poison")
    async def check() -> None:
        calls["check"] += 1
        raise Poison("address is missing", code="no_address")

    @step(name="steps_crash_after_poison")
    async def crash_once() -> None:
        calls["crash"] += 1
        if calls["crash"] == 1:
            raise Crash()

    @workflow(name="steps_replayed_poison")
    async def body(ctx: WorkflowContext) -> str | None:
        try:
            await check()
        except Poison as exc:
            caught.append(exc)
        await crash_once()
        return caught[-1].user_code

    handle = await client.submit("steps_replayed_poison")
    await crash_then_recover(runner, clock, handle)
    assert await drive(handle) == RunStatus.COMPLETE
    assert calls == {"check": 1, "crash": 2}
    assert [type(exc) for exc in caught] == [Poison, Poison]
    assert [exc.user_code for exc in caught] == ["no_address", "no_address"]
    assert await handle.result() == "no_address"


async def test_a_failure_type_that_cannot_be_imported_replays_as_step_failed_error(
    runner: InlineWorkflowRunner, client: WorkflowClient, clock: ManualClock, drive: Drive
) -> None:
    class LocalError(Exception):
        pass

    calls = {"crash": 0}
    caught: list[Exception] = []

    @step(name="steps_local_error", retry=RetryPolicy(max_attempts=1))
    async def fail() -> None:
        raise LocalError("only in this scope")

    @step(name="steps_crash_after_local")
    async def crash_once() -> None:
        calls["crash"] += 1
        if calls["crash"] == 1:
            raise Crash()

    @workflow(name="steps_unimportable_failure")
    async def body(ctx: WorkflowContext) -> str:
        try:
            await fail()
        except Exception as exc:
            caught.append(exc)
        await crash_once()
        return type(caught[-1]).__name__

    handle = await client.submit("steps_unimportable_failure")
    await crash_then_recover(runner, clock, handle)
    assert await drive(handle) == RunStatus.COMPLETE
    assert type(caught[0]) is LocalError
    replayed = caught[1]
    assert isinstance(replayed, StepFailedError)
    assert replayed.step_id == "steps_local_error"
    assert replayed.error_type.endswith("LocalError")
    assert "only in this scope" in str(replayed)


async def test_a_step_timeout_counts_as_a_failed_attempt(
    client: WorkflowClient, drive: Drive
) -> None:
    calls = {"n": 0}

    @step(name="steps_slow", timeout=0.1, retry=RetryPolicy(max_attempts=2, **NO_BACKOFF))
    async def slow() -> str:
        calls["n"] += 1
        if calls["n"] == 1:
            await asyncio.sleep(5)
        return "fast enough"

    @workflow(name="steps_step_timeout")
    async def body(ctx: WorkflowContext) -> str:
        result: str = await slow()
        return result

    handle = await client.submit("steps_step_timeout")
    assert await drive(handle) == RunStatus.COMPLETE
    assert await handle.result() == "fast enough"
    assert calls["n"] == 2
    events = await handle.events()
    errors = step_events(events, EventKind.STEP_ERROR, "steps_slow")
    assert len(errors) == 1
    assert errors[0].payload["attempt"] == 1
    assert "TimeoutError" in errors[0].payload["error"]["type"]


async def test_a_step_that_always_times_out_fails_the_run(
    client: WorkflowClient, drive: Drive
) -> None:
    @step(name="steps_hung", timeout=0.05, retry=RetryPolicy(max_attempts=2, **NO_BACKOFF))
    async def hung() -> None:
        await asyncio.sleep(5)

    @workflow(name="steps_step_timeout_final")
    async def body(ctx: WorkflowContext) -> None:
        await hung()

    handle = await client.submit("steps_step_timeout_final")
    assert await drive(handle) == RunStatus.ERROR
    events = await handle.events()
    assert [
        e.payload["final"] for e in step_events(events, EventKind.STEP_ERROR, "steps_hung")
    ] == [
        False,
        True,
    ]
    assert events[-1].kind == EventKind.RUN_ERROR


# -- where durable calls may be made ---------------------------------------------------------


async def test_steps_and_ctx_apis_outside_a_run_raise_unbound_context_error(
    client: WorkflowClient, drive: Drive
) -> None:
    calls = {"n": 0}
    contexts: list[WorkflowContext] = []

    @step
    async def effect() -> int:
        calls["n"] += 1
        return 1

    @workflow(name="steps_unbound")
    async def body(ctx: WorkflowContext) -> None:
        contexts.append(ctx)

    with pytest.raises(UnboundContextError):
        await effect()
    assert calls["n"] == 0

    handle = await client.submit("steps_unbound")
    assert await drive(handle) == RunStatus.COMPLETE
    ctx = contexts[0]
    with pytest.raises(UnboundContextError):
        ctx.now()
    with pytest.raises(UnboundContextError):
        ctx.uuid4()
    with pytest.raises(UnboundContextError):
        ctx.random()
    with pytest.raises(UnboundContextError):
        await ctx.sleep(1)
    with pytest.raises(UnboundContextError):
        await ctx.wait_for_signal("go")
    with pytest.raises(UnboundContextError):
        await ctx.emit("custom.kind", {})
    with pytest.raises(UnboundContextError):
        await ctx.step(lambda: 1)
    assert calls["n"] == 0


async def test_durable_operations_inside_a_step_raise_nested_durable_operation_error(
    client: WorkflowClient, drive: Drive
) -> None:
    calls = {"inner": 0}

    @step(name="steps_inner")
    async def inner() -> int:
        calls["inner"] += 1
        return 1

    @step(name="steps_outer")
    async def outer(ctx: WorkflowContext) -> list[str]:
        refused = []
        try:
            await inner()
        except NestedDurableOperationError as exc:
            refused.append(f"{exc.operation}:{exc.operation_name}:{exc.boundary_name}")
        try:
            await ctx.sleep(10)
        except NestedDurableOperationError as exc:
            refused.append(f"{exc.operation}:{exc.boundary_name}")
        try:
            ctx.now()
        except NestedDurableOperationError as exc:
            refused.append(exc.operation)
        return refused

    @workflow(name="steps_nested")
    async def body(ctx: WorkflowContext) -> list[str]:
        result: list[str] = await outer(ctx)
        return result

    handle = await client.submit("steps_nested")
    assert await drive(handle) == RunStatus.COMPLETE
    assert await handle.result() == [
        "step:steps_inner:steps_outer",
        "sleep:steps_outer",
        "now",
    ]
    assert calls["inner"] == 0
    events = await handle.events()
    assert step_events(events, EventKind.STEP_PENDING, "steps_inner") == []


async def test_an_uncaught_nested_operation_fails_the_run(
    client: WorkflowClient, drive: Drive
) -> None:
    @step(name="steps_nested_inner")
    async def inner() -> int:
        return 1

    @step(name="steps_nested_outer", retry=RetryPolicy(max_attempts=1))
    async def outer() -> int:
        value: int = await inner()
        return value

    @workflow(name="steps_nested_uncaught")
    async def body(ctx: WorkflowContext) -> int:
        value: int = await outer()
        return value

    handle = await client.submit("steps_nested_uncaught")
    assert await drive(handle) == RunStatus.ERROR
    events = await handle.events()
    assert events[-1].payload["code"] == "nested_durable_operation"


# -- deterministic values and custom events ------------------------------------------------


async def test_now_uuid4_and_random_are_journaled_and_equal_on_replay(
    runner: InlineWorkflowRunner, client: WorkflowClient, clock: ManualClock, drive: Drive
) -> None:
    seen: list[tuple[datetime, uuid.UUID, float]] = []
    calls = {"crash": 0}

    @step(name="steps_det_crash")
    async def crash_once() -> None:
        calls["crash"] += 1
        if calls["crash"] == 1:
            raise Crash()

    @workflow(name="steps_deterministic")
    async def body(ctx: WorkflowContext) -> dict[str, Any]:
        values = (ctx.now(), ctx.uuid4(), ctx.random())
        seen.append(values)
        await crash_once()
        return {"now": values[0].isoformat(), "uuid": str(values[1]), "random": values[2]}

    started = clock()
    handle = await client.submit("steps_deterministic")
    await crash_then_recover(runner, clock, handle)
    assert await drive(handle) == RunStatus.COMPLETE
    assert len(seen) == 2
    assert seen[0] == seen[1]
    now, uid, rnd = seen[0]
    assert now.timestamp() == started
    assert now.tzinfo is not None
    assert isinstance(uid, uuid.UUID)
    assert uid.version == 4
    assert 0.0 <= rnd < 1.0
    assert clock() > started + 30  # the replay really happened later
    events = await handle.events()
    deterministic = [
        e.payload["step_id"]
        for e in events
        if e.kind == EventKind.STEP_DONE and e.payload.get("kind") == "deterministic"
    ]
    assert deterministic == ["now", "uuid4", "random"]


async def test_emit_writes_a_custom_event_once(
    runner: InlineWorkflowRunner, client: WorkflowClient, clock: ManualClock, drive: Drive
) -> None:
    calls = {"crash": 0}

    @step(name="steps_emit_crash")
    async def crash_once() -> None:
        calls["crash"] += 1
        if calls["crash"] == 1:
            raise Crash()

    @workflow(name="steps_emit")
    async def body(ctx: WorkflowContext) -> str:
        await ctx.emit("order.placed", {"order_id": "A-1", "total": 12})
        await crash_once()
        await ctx.emit("order.done", {"order_id": "A-1"})
        return "ok"

    handle = await client.submit("steps_emit")
    await crash_then_recover(runner, clock, handle)
    assert await drive(handle) == RunStatus.COMPLETE
    events = await handle.events()
    placed = [e for e in events if e.kind == "order.placed"]
    assert len(placed) == 1
    assert placed[0].payload["data"] == {"order_id": "A-1", "total": 12}
    assert placed[0].payload["call_index"] == 0
    assert placed[0].headers.get("lg-emit") == "1"
    assert [e.kind for e in events if e.kind.startswith("order.")] == ["order.placed", "order.done"]


async def test_emit_refuses_reserved_or_empty_kinds_and_bad_payloads(
    client: WorkflowClient, drive: Drive
) -> None:
    @workflow(name="steps_emit_reserved")
    async def body(ctx: WorkflowContext) -> list[str]:
        refused = []
        for kind in ("run:complete", "step:done", "stream:overflow", ""):
            try:
                await ctx.emit(kind, {"x": 1})
            except ValueError:
                refused.append(kind)
        try:
            await ctx.emit("custom.bad", {"x": object()})
        except TypeError:
            refused.append("custom.bad")
        return refused

    handle = await client.submit("steps_emit_reserved")
    assert await drive(handle) == RunStatus.COMPLETE
    assert await handle.result() == [
        "run:complete",
        "step:done",
        "stream:overflow",
        "",
        "custom.bad",
    ]
    events = await handle.events()
    assert kinds(events) == [EventKind.RUN_INIT, EventKind.RUN_COMPLETE]


# -- caps ------------------------------------------------------------------------------------


async def test_event_count_overflow_ends_the_run_with_stream_overflow(
    client: WorkflowClient, drive: Drive
) -> None:
    calls = {"n": 0}

    @step(name="steps_overflow_step")
    async def tick(i: int) -> int:
        calls["n"] += 1
        return i

    @workflow(name="steps_overflow", max_event_count_per_run=6)
    async def body(ctx: WorkflowContext) -> int:
        for i in range(10):
            await tick(i)
        return 10

    handle = await client.submit("steps_overflow")
    assert await drive(handle) == RunStatus.ERROR
    events = await handle.events()
    assert events[0].kind == EventKind.RUN_INIT
    assert kinds(events)[-2:] == [EventKind.STREAM_OVERFLOW, EventKind.RUN_ERROR]
    assert events[-2].payload["limit"] == 6
    assert events[-1].payload["code"] == "stream_overflow"
    assert calls["n"] < 10
    assert EventKind.RUN_COMPLETE not in kinds(events)
    with pytest.raises(DurableInvocationError):
        await handle.result()


async def test_an_oversized_step_result_ends_the_run_naming_the_step(
    client: WorkflowClient, drive: Drive
) -> None:
    @step(name="steps_big_result")
    async def big() -> str:
        return "x" * 500

    @workflow(name="steps_payload_cap", max_event_payload_bytes=200)
    async def body(ctx: WorkflowContext) -> int:
        return len(await big())

    handle = await client.submit("steps_payload_cap")
    assert await drive(handle) == RunStatus.ERROR
    events = await handle.events()
    assert step_events(events, EventKind.STEP_DONE, "steps_big_result") == []
    assert events[-1].payload["code"] == "payload_too_large"
    assert "steps_big_result" in events[-1].payload["message"]


async def test_an_oversized_workflow_result_ends_the_run_in_error(
    client: WorkflowClient, drive: Drive
) -> None:
    @workflow(name="steps_big_workflow_result", max_event_payload_bytes=100)
    async def body(ctx: WorkflowContext) -> str:
        return "y" * 300

    handle = await client.submit("steps_big_workflow_result")
    assert await drive(handle) == RunStatus.ERROR
    events = await handle.events()
    assert events[-1].payload["code"] == "payload_too_large"


async def test_an_oversized_submit_is_refused_and_queues_nothing(
    runner: InlineWorkflowRunner, client: WorkflowClient
) -> None:
    @workflow(name="steps_submit_cap", max_event_payload_bytes=100)
    async def body(ctx: WorkflowContext, blob: str) -> int:
        return len(blob)

    with pytest.raises(PayloadTooLarge) as raised:
        await client.submit("steps_submit_cap", {"blob": "z" * 500})
    assert raised.value.limit == 100
    assert raised.value.size > 100
    assert runner.store.get_pending_count("steps_submit_cap") == 0
    assert runner.store.list_runs("steps_submit_cap") == ([], None)


# -- the body's own outcome ------------------------------------------------------------------


async def test_a_workflow_timeout_ends_the_run_with_run_timeout(
    client: WorkflowClient, drive: Drive
) -> None:
    @workflow(name="steps_run_timeout", timeout=0.2)
    async def body(ctx: WorkflowContext) -> None:
        await asyncio.sleep(10)

    handle = await client.submit("steps_run_timeout")
    assert await drive(handle) == RunStatus.ERROR
    events = await handle.events()
    assert events[-1].payload["code"] == "run_timeout"
    with pytest.raises(DurableInvocationError, match="timeout"):
        await handle.result()


async def test_an_exception_in_the_body_ends_the_run_with_user_error(
    client: WorkflowClient, drive: Drive
) -> None:
    @workflow(name="steps_body_raises")
    async def body(ctx: WorkflowContext, n: int) -> None:
        raise RuntimeError(f"cannot handle {n}")

    handle = await client.submit("steps_body_raises", {"n": 3})
    assert await drive(handle) == RunStatus.ERROR
    events = await handle.events()
    assert events[-1].kind == EventKind.RUN_ERROR
    assert events[-1].payload["code"] == "user_error"
    assert events[-1].payload["error"]["type"] == "builtins:RuntimeError"
    with pytest.raises(DurableInvocationError, match="cannot handle 3") as raised:
        await client.result("steps_body_raises", handle.run_id)
    assert raised.value.run_id == handle.run_id
    assert raised.value.error["type"] == "builtins:RuntimeError"


async def test_a_body_that_no_longer_matches_its_journal_fails_with_nondeterminism(
    runner: InlineWorkflowRunner, client: WorkflowClient, clock: ManualClock, drive: Drive
) -> None:
    calls = {"a": 0, "b": 0, "crash": 0}

    @step(name="steps_nd_step_a")
    async def step_a() -> str:
        calls["a"] += 1
        return "a"

    @step(name="steps_nd_step_b")
    async def step_b() -> str:
        calls["b"] += 1
        return "b"

    @step(name="steps_nd_crash")
    async def crash_once() -> None:
        calls["crash"] += 1
        if calls["crash"] == 1:
            raise Crash()

    async def original(ctx: WorkflowContext) -> str:
        first: str = await step_a()
        await crash_once()
        return first

    async def changed(ctx: WorkflowContext) -> str:
        first: str = await step_b()
        await crash_once()
        return first

    workflow(name="steps_nondeterminism")(original)
    handle = await client.submit("steps_nondeterminism")
    await crash_then_recover(runner, clock, handle)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DuplicateWorkflowWarning)
        workflow(name="steps_nondeterminism")(changed)
    assert await drive(handle) == RunStatus.ERROR
    events = await handle.events()
    terminal = events[-1]
    assert terminal.payload["code"] == "nondeterminism"
    assert "steps_nd_step_a" in terminal.payload["message"]
    assert "steps_nd_step_b" in terminal.payload["message"]
    assert calls == {"a": 1, "b": 0, "crash": 1}
