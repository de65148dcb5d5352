"""The caller's side: submit and its validation, idempotency, delayed starts, reading runs,
waiting for results, ``run_and_await`` and ``RunHandle``."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from lockgate import (
    ConfigurationError,
    DurableInvocationTimeout,
    EventKind,
    IdempotencyConflict,
    InlineWorkflowRunner,
    InvalidNameError,
    InvalidParamsError,
    ManualClock,
    MemoryStore,
    RunHandle,
    RunNotFoundError,
    RunStatus,
    SystemClock,
    TerminateOutcome,
    WorkflowClient,
    WorkflowContext,
    run_and_await,
    step,
    workflow,
)

Drive = Callable[..., Awaitable[RunStatus]]

GREET_RUNS = {"n": 0}


@workflow(name="client_greet")
async def client_greet(
    ctx: WorkflowContext, who: str, *, punctuation: str = "!", times: int = 1
) -> str:
    GREET_RUNS["n"] += 1
    return " ".join([f"hello {who}{punctuation}"] * times)


@workflow(name="client_flexible")
async def client_flexible(ctx: WorkflowContext, **params: Any) -> dict[str, Any]:
    return params


def assert_nothing_queued(store: Any, name: str) -> None:
    assert store.get_pending_count(name) == 0
    assert store.list_runs(name) == ([], None)


# -- submit and its validation ---------------------------------------------------------------


async def test_submit_queues_a_run_with_its_params(
    client: WorkflowClient, store: MemoryStore, drive: Drive
) -> None:
    handle = await client.submit(
        "client_greet", {"who": "ana"}, owner="tenant-1", metadata={"trace": "t-1"}
    )
    assert isinstance(handle, RunHandle)
    assert handle.name == "client_greet"
    assert await handle.status() == RunStatus.PENDING
    assert store.get_pending_count("client_greet") == 1
    init = (await handle.events())[0]
    assert init.kind == EventKind.RUN_INIT
    assert init.payload["params"] == {"who": "ana"}
    assert init.payload["owner"] == "tenant-1"
    assert init.payload["metadata"] == {"trace": "t-1"}
    assert await drive(handle) == RunStatus.COMPLETE
    assert await handle.result() == "hello ana!"


@pytest.mark.parametrize(
    ("params", "parameter"),
    [
        ({}, "who"),
        ({"punctuation": "?"}, "who"),
        ({"who": "ana", "colour": "red"}, "colour"),
        ({"who": "ana", "ctx": 1}, "ctx"),
    ],
)
async def test_submit_checks_params_against_the_body_signature(
    client: WorkflowClient, store: MemoryStore, params: dict[str, Any], parameter: str
) -> None:
    with pytest.raises(InvalidParamsError) as raised:
        await client.submit("client_greet", params)
    assert raised.value.parameter == parameter
    assert raised.value.workflow == "client_greet"
    assert repr(parameter) in str(raised.value)
    assert_nothing_queued(store, "client_greet")


async def test_a_var_keyword_body_accepts_any_param_names(
    client: WorkflowClient, drive: Drive
) -> None:
    handle = await client.submit("client_flexible", {"anything": 1, "goes": [2]})
    assert await drive(handle) == RunStatus.COMPLETE
    assert await handle.result() == {"anything": 1, "goes": [2]}


@pytest.mark.parametrize(
    "params",
    [
        {"who": object()},
        {"who": "ana", "times": {1, 2}},
        ["who", "ana"],
        {1: "ana"},
    ],
    ids=["object", "set", "list", "int-key"],
)
async def test_params_that_are_not_json_are_refused(
    client: WorkflowClient, store: MemoryStore, params: Any
) -> None:
    with pytest.raises(InvalidParamsError):
        await client.submit("client_greet", params)
    assert_nothing_queued(store, "client_greet")


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf], ids=["nan", "inf", "-inf"])
async def test_non_finite_floats_in_params_are_refused_as_not_json(
    client: WorkflowClient, store: MemoryStore, value: float
) -> None:
    # NaN and Infinity have no JSON spelling (RFC 8259); json.dumps only emits them by default.
    with pytest.raises(InvalidParamsError):
        await client.submit("client_greet", {"who": "ana", "times": value})
    assert_nothing_queued(store, "client_greet")


async def test_unregistered_workflows(client: WorkflowClient, store: MemoryStore) -> None:
    with pytest.raises(ConfigurationError, match="client_elsewhere"):
        await client.submit("client_elsewhere", {"x": 1}, allow_unregistered=False)
    assert_nothing_queued(store, "client_elsewhere")

    with pytest.raises(InvalidParamsError):
        await client.submit("client_elsewhere", {"x": object()})
    assert_nothing_queued(store, "client_elsewhere")

    handle = await client.submit("client_elsewhere", {"x": 1})
    assert await handle.status() == RunStatus.PENDING
    assert store.get_pending_count("client_elsewhere") == 1
    init = (await handle.events())[0]
    assert init.payload["params"] == {"x": 1}
    assert init.payload["version"] == ""
    assert init.payload["gates"] == {"unknown": True}  # no worker recorded a policy yet


async def test_metadata_must_be_a_json_dict(client: WorkflowClient, store: MemoryStore) -> None:
    with pytest.raises(ValueError, match="metadata"):
        await client.submit("client_greet", {"who": "a"}, metadata={"x": object()})
    with pytest.raises(ValueError, match="metadata"):
        await client.submit("client_greet", {"who": "a"}, metadata=["x"])  # type: ignore[arg-type]
    assert_nothing_queued(store, "client_greet")


# -- idempotency -----------------------------------------------------------------------------


async def test_an_idempotency_key_returns_the_same_run(
    client: WorkflowClient, store: MemoryStore, drive: Drive
) -> None:
    GREET_RUNS["n"] = 0
    first = await client.submit("client_greet", {"who": "bo"}, idempotency_key="greet-bo")
    again = await client.submit("client_greet", {"who": "bo"}, idempotency_key="greet-bo")
    assert again.run_id == first.run_id
    assert store.get_pending_count("client_greet") == 1
    assert await drive(first) == RunStatus.COMPLETE
    after = await client.submit("client_greet", {"who": "bo"}, idempotency_key="greet-bo")
    assert after.run_id == first.run_id
    assert await after.result() == "hello bo!"
    assert GREET_RUNS["n"] == 1
    other = await client.submit("client_greet", {"who": "bo"}, idempotency_key="greet-bo-2")
    assert other.run_id != first.run_id


async def test_the_same_key_for_a_different_request_conflicts(
    client: WorkflowClient, store: MemoryStore
) -> None:
    first = await client.submit("client_greet", {"who": "cy"}, idempotency_key="greet-cy")
    with pytest.raises(IdempotencyConflict):
        await client.submit("client_greet", {"who": "dee"}, idempotency_key="greet-cy")
    with pytest.raises(IdempotencyConflict):
        await client.submit("client_greet", {"who": "cy"}, idempotency_key="greet-cy", delay=5)
    runs, _ = store.list_runs("client_greet")
    assert [r.run_id for r in runs] == [first.run_id]
    assert runs[0].params == {"who": "cy"}


async def test_the_start_timing_is_part_of_the_idempotent_request(
    client: WorkflowClient, store: MemoryStore
) -> None:
    first = await client.submit("client_greet", {"who": "ed"}, idempotency_key="k-ed", delay=60)
    same = await client.submit("client_greet", {"who": "ed"}, idempotency_key="k-ed", delay=60)
    assert same.run_id == first.run_id
    as_timedelta = await client.submit(
        "client_greet", {"who": "ed"}, idempotency_key="k-ed", delay=timedelta(seconds=60)
    )
    assert as_timedelta.run_id == first.run_id
    with pytest.raises(IdempotencyConflict):
        await client.submit("client_greet", {"who": "ed"}, idempotency_key="k-ed", delay=120)
    with pytest.raises(IdempotencyConflict):
        await client.submit("client_greet", {"who": "ed"}, idempotency_key="k-ed")
    assert len(store.list_runs("client_greet")[0]) == 1


async def test_an_idempotency_key_lives_a_day_plus_the_delay(
    client: WorkflowClient, clock: ManualClock
) -> None:
    plain = await client.submit("client_greet", {"who": "jo"}, idempotency_key="k-day")
    clock.advance(86_400 - 1)
    assert (await client.submit("client_greet", {"who": "jo"}, idempotency_key="k-day")).run_id == (
        plain.run_id
    )
    clock.advance(2)
    fresh = await client.submit("client_greet", {"who": "jo"}, idempotency_key="k-day")
    assert fresh.run_id != plain.run_id

    delayed = await client.submit(
        "client_greet", {"who": "jo"}, idempotency_key="k-delayed", delay=3600
    )
    clock.advance(86_400 + 3600 - 1)
    again = await client.submit(
        "client_greet", {"who": "jo"}, idempotency_key="k-delayed", delay=3600
    )
    assert again.run_id == delayed.run_id


async def test_an_empty_idempotency_key_is_refused(
    client: WorkflowClient, store: MemoryStore
) -> None:
    with pytest.raises(ValueError, match="idempotency key must not be empty"):
        await client.submit("client_greet", {"who": "a"}, idempotency_key="")
    assert_nothing_queued(store, "client_greet")


@pytest.mark.parametrize(
    ("given", "what"),
    [
        ({"run_id": "r\n1"}, "run id"),
        ({"run_id": ""}, "run id"),
        ({"run_id": "r" * 257}, "run id"),
        ({"idempotency_key": "k\x00"}, "idempotency key"),
        ({"idempotency_key": "k" * 257}, "idempotency key"),
    ],
)
async def test_ids_the_naming_rules_refuse_are_refused_at_submit(
    client: WorkflowClient, store: MemoryStore, given: dict[str, str], what: str
) -> None:
    with pytest.raises(InvalidNameError) as refused:
        await client.submit("client_greet", {"who": "a"}, **given)
    assert refused.value.what == what
    assert "\n" not in str(refused.value)
    assert_nothing_queued(store, "client_greet")


async def test_a_workflow_name_the_rules_refuse_is_refused_at_submit_and_trigger(
    client: WorkflowClient,
) -> None:
    for name in ("bad\nname", "tab\tname", "n" * 257):
        with pytest.raises(InvalidNameError, match="workflow name"):
            await client.submit(name, {})
        with pytest.raises(InvalidNameError, match="workflow name"):
            await client.trigger(name, {})


async def test_names_and_ids_with_colons_slashes_spaces_and_accents_are_kept(
    client: WorkflowClient, store: MemoryStore
) -> None:
    for run_id in ("eu:42", "a/b", "with space", "café", "{x}", "r" * 256):
        handle = await client.submit("client_greet", {"who": "a"}, run_id=run_id)
        assert handle.run_id == run_id
        assert await client.status("client_greet", run_id) == RunStatus.PENDING


# -- delayed starts --------------------------------------------------------------------------


def _aware(clock: ManualClock, seconds: float) -> datetime:
    return datetime.fromtimestamp(clock() + seconds, UTC)


@pytest.mark.parametrize(
    "timing",
    [
        "both",
        "negative",
        "nan",
        "inf",
        "bool",
        "string",
        "naive",
        "delay_too_far",
        "start_at_too_far",
        "timedelta_too_far",
    ],
)
async def test_bad_start_timing_is_refused(
    client: WorkflowClient, store: MemoryStore, clock: ManualClock, timing: str
) -> None:
    options: dict[str, Any] = {
        "both": {"delay": 10, "start_at": _aware(clock, 10)},
        "negative": {"delay": -1},
        "nan": {"delay": math.nan},
        "inf": {"delay": math.inf},
        "bool": {"delay": True},
        "string": {"delay": "60"},
        "naive": {"start_at": datetime.fromtimestamp(clock() + 60)},
        "delay_too_far": {"delay": 366 * 86_400},
        "start_at_too_far": {"start_at": _aware(clock, 400 * 86_400)},
        "timedelta_too_far": {"delay": timedelta(days=366)},
    }[timing]
    with pytest.raises(ValueError):  # noqa: PT011 - each case has its own message
        await client.submit("client_greet", {"who": "a"}, **options)
    assert_nothing_queued(store, "client_greet")


async def test_a_delayed_run_sleeps_until_its_start(
    runner: InlineWorkflowRunner, client: WorkflowClient, clock: ManualClock, drive: Drive
) -> None:
    starts: list[float] = []

    @step(name="client_delayed_first")
    async def first(started_at: float) -> float:
        return started_at

    @workflow(name="client_delayed")
    async def body(ctx: WorkflowContext) -> float:
        starts.append(clock())
        return await first(ctx.now().timestamp())

    submitted = clock()
    handle = await client.submit("client_delayed", delay=90)
    assert await handle.status() == RunStatus.SLEEPING
    assert runner.store.get_pending_count("client_delayed") == 0
    assert await runner.run_next("client_delayed") is None  # nothing to claim yet

    # An attempt before the start time parks again without running the body.
    clock.advance(30)
    await runner.run(handle.name, handle.run_id)
    assert starts == []
    assert await handle.status() == RunStatus.SLEEPING

    assert await drive(handle) == RunStatus.COMPLETE
    assert len(starts) == 1
    assert starts[0] >= submitted + 90
    assert await handle.result() >= submitted + 90
    kinds = [e.kind for e in await handle.events()]
    assert kinds[:2] == [EventKind.RUN_INIT, EventKind.RUN_SLEEPING]
    assert EventKind.RUN_WOKEN in kinds


async def test_a_start_at_in_the_future_sleeps_and_one_in_the_past_starts_now(
    client: WorkflowClient, clock: ManualClock, drive: Drive
) -> None:
    later = await client.submit("client_greet", {"who": "fay"}, start_at=_aware(clock, 3600))
    assert await later.status() == RunStatus.SLEEPING
    init = (await later.events())[0]
    assert init.payload["start_at"] == pytest.approx(clock() + 3600)

    past = await client.submit("client_greet", {"who": "gus"}, start_at=_aware(clock, -60))
    assert await past.status() == RunStatus.PENDING
    zero = await client.submit("client_greet", {"who": "hal"}, delay=0)
    assert await zero.status() == RunStatus.PENDING

    started = clock()
    assert await drive(later) == RunStatus.COMPLETE
    assert clock() == pytest.approx(started + 3600)
    assert await later.result() == "hello fay!"


# -- reading runs ----------------------------------------------------------------------------


async def test_unknown_runs_raise_run_not_found(client: WorkflowClient) -> None:
    with pytest.raises(RunNotFoundError):
        await client.status("client_greet", "missing")
    with pytest.raises(RunNotFoundError):
        await client.events("client_greet", "missing")
    with pytest.raises(RunNotFoundError):
        await client.result("client_greet", "missing")
    with pytest.raises(RunNotFoundError):
        await client.signal("client_greet", "missing", "go")
    with pytest.raises(RunNotFoundError):
        await client.update("client_greet", "missing", "go")
    with pytest.raises(RunNotFoundError):
        await client.query("client_greet", "missing", "state")
    with pytest.raises(RunNotFoundError):
        await client.cancel("client_greet", "missing")
    with pytest.raises(RunNotFoundError):
        await client.handle("client_greet", "missing").status()


async def test_result_raises_timeout_when_the_run_does_not_end_in_time(
    client: WorkflowClient, clock: ManualClock, drive: Drive
) -> None:
    @workflow(name="client_waits_forever")
    async def body(ctx: WorkflowContext) -> Any:
        return await ctx.wait_for_signal("never")

    handle = await client.submit("client_waits_forever")
    assert await drive(handle) == RunStatus.SIGNAL_WAITING
    started = clock()
    waiting = asyncio.create_task(handle.result(timeout=5))
    for _ in range(500):
        await asyncio.sleep(0)
        if waiting.done():
            break
        clock.advance(0.5)
    with pytest.raises(DurableInvocationTimeout) as raised:
        await waiting
    assert raised.value.run_id == handle.run_id
    assert 5 <= clock() - started < 6
    assert await handle.status() == RunStatus.SIGNAL_WAITING


async def test_result_drives_a_queued_run_on_the_inline_client(client: WorkflowClient) -> None:
    handle = await client.submit("client_greet", {"who": "ivy", "times": 2})
    assert await handle.result() == "hello ivy! hello ivy!"
    assert await handle.status() == RunStatus.COMPLETE


# -- run_and_await ---------------------------------------------------------------------------


AWAITED_RUNS = {"n": 0}


@step(name="client_awaited_step")
async def client_awaited_step(x: int) -> int:
    AWAITED_RUNS["n"] += 1
    await asyncio.sleep(0.01)
    return x * 10


@workflow(name="client_awaited")
async def client_awaited(ctx: WorkflowContext, x: int) -> int:
    value: int = await client_awaited_step(x)
    return value + 1


async def _work_until(runner: InlineWorkflowRunner, name: str, stop: asyncio.Event) -> None:
    while not stop.is_set():
        await runner.run_until_idle(name)
        await asyncio.sleep(0.01)


async def test_run_and_await_gets_the_result_from_another_runner() -> None:
    AWAITED_RUNS["n"] = 0
    store = MemoryStore(clock=SystemClock(), lock_ttl=5.0, heartbeat_interval=1.0)
    worker = InlineWorkflowRunner(store=store, clock=SystemClock())
    stop = asyncio.Event()
    working = asyncio.create_task(_work_until(worker, "client_awaited", stop))
    try:
        result = await run_and_await(
            store,
            "client_awaited",
            {"x": 4},
            idempotency_key="await-4",
            poll_interval=0.01,
            timeout=1.0,
        )
        again = await run_and_await(
            store,
            "client_awaited",
            {"x": 4},
            idempotency_key="await-4",
            poll_interval=0.01,
            timeout=1.0,
        )
    finally:
        stop.set()
        await asyncio.wait_for(working, 1)
        await worker.aclose()
    assert result == again == 41
    assert AWAITED_RUNS["n"] == 1
    assert len(store.list_runs("client_awaited")[0]) == 1


async def test_run_and_await_uses_the_idempotency_key_as_the_run_id() -> None:
    store = MemoryStore(clock=SystemClock(), lock_ttl=5.0, heartbeat_interval=1.0)
    worker = InlineWorkflowRunner(store=store, clock=SystemClock())
    stop = asyncio.Event()
    working = asyncio.create_task(_work_until(worker, "client_awaited", stop))
    try:
        result = await run_and_await(
            store,
            "client_awaited",
            {"x": 2},
            idempotency_key="order-42",
            poll_interval=0.01,
            timeout=1.0,
        )
    finally:
        stop.set()
        await asyncio.wait_for(working, 1)
    assert result == 21
    info = store.get_run("client_awaited", "order-42")
    assert info is not None
    assert info.status == RunStatus.COMPLETE


async def test_run_and_await_times_out_when_no_worker_runs_it() -> None:
    store = MemoryStore(clock=SystemClock())
    with pytest.raises(DurableInvocationTimeout):
        await run_and_await(
            store,
            "client_awaited",
            {"x": 1},
            idempotency_key="nobody",
            poll_interval=0.01,
            timeout=0.05,
        )
    runs, _ = store.list_runs("client_awaited")
    assert [r.status for r in runs] == [RunStatus.PENDING]


# -- RunHandle -------------------------------------------------------------------------------


@workflow(name="client_handle_flow")
async def client_handle_flow(ctx: WorkflowContext) -> dict[str, Any]:
    notes: list[str] = []
    ctx.on_query("notes", lambda: list(notes))
    ctx.on_update("note", lambda p: notes.append(p["text"]) or len(notes))
    signal = await ctx.wait_for_signal("finish")
    return {"notes": notes, "signal": signal}


async def test_a_run_handle_mirrors_the_client(
    client: WorkflowClient, store: MemoryStore, drive: Drive
) -> None:
    handle = await client.submit("client_handle_flow")
    twin = client.handle("client_handle_flow", handle.run_id)
    assert (twin.name, twin.run_id, twin.client) == (handle.name, handle.run_id, client)
    assert handle.run_id in repr(handle)
    assert "client_handle_flow" in repr(handle)

    assert await drive(handle) == RunStatus.SIGNAL_WAITING
    assert await handle.status() == await client.status(handle.name, handle.run_id)
    assert await handle.events() == await client.events(handle.name, handle.run_id)

    assert await handle.update("note", {"text": "first"}) == 1
    assert await twin.query("notes") == ["first"]
    assert await handle.query("notes") == await client.query(handle.name, handle.run_id, "notes")

    await handle.pause()
    assert store.get_run_controls(handle.name, handle.run_id)[1] is not None
    await handle.unpause()
    assert store.get_run_controls(handle.name, handle.run_id)[1] is None

    assert await twin.signal("finish", {"ok": True}, signal_id="fin-1") == "delivered"
    assert await handle.result() == {"notes": ["first"], "signal": {"ok": True}}
    assert await client.result(handle.name, handle.run_id) == await twin.result()
    assert (await handle.terminate()).outcome == TerminateOutcome.ALREADY_ENDED


async def test_a_run_handle_cancels_and_terminates(client: WorkflowClient, drive: Drive) -> None:
    cancelled = await client.submit("client_handle_flow")
    assert await drive(cancelled) == RunStatus.SIGNAL_WAITING
    await cancelled.cancel(reason="r", requested_by="me")
    assert await drive(cancelled) == RunStatus.CANCELLED
    assert (await cancelled.events())[-1].payload["detail"] == {"reason": "r", "requested_by": "me"}

    terminated = await client.submit("client_handle_flow")
    result = await terminated.terminate(reason="t", requested_by="me")
    assert (result.outcome, result.run_id) == (TerminateOutcome.TERMINATED, terminated.run_id)
    assert await terminated.status() == RunStatus.TERMINATED


async def test_a_submit_by_name_takes_the_version_its_workers_recorded(
    store: MemoryStore,
) -> None:
    plain = WorkflowClient(store)
    unversioned = await plain.submit("client_served_elsewhere", {"x": 1})
    assert store.get_run_version("client_served_elsewhere", unversioned.run_id) == (
        "",
        "auto_upgrade",
    )
    store.record_workflow_policy(
        "client_served_elsewhere",
        {"version": "v7", "version_behavior": "pinned", "concurrency": None, "rate": None},
    )
    handle = await plain.submit("client_served_elsewhere", {"x": 2})
    assert store.get_run_version("client_served_elsewhere", handle.run_id) == ("v7", "pinned")
