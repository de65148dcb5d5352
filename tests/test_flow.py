"""Flow control through the engine: declarations checked at decoration, keys resolved at
submit, gates obeyed by the inline runner, and submits by name stamped from what workers
recorded."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from lockgate import (
    Collect,
    ConfigurationError,
    Debounce,
    InlineWorkflowRunner,
    InvalidParamsError,
    Limit,
    ManualClock,
    MemoryStore,
    Rate,
    RunGatedError,
    RunStatus,
    WorkerOptions,
    WorkflowClient,
    WorkflowContext,
    WorkflowWorker,
    workflow,
)
from lockgate.worker._registration import policy_record
from lockgate.workflow._spec import spec_of


def test_a_key_naming_a_parameter_the_body_does_not_take_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="'tenant'"):

        @workflow(name="flow_bad_key", concurrency=Limit(key="tenant", max=2))
        async def bad(ctx: WorkflowContext, tenant_id: str) -> None:
            return None

    with pytest.raises(ConfigurationError, match="rate_limit"):

        @workflow(name="flow_bad_rate_key", rate_limit=Rate(key="org", per_second=1))
        async def bad_rate(ctx: WorkflowContext, tenant_id: str) -> None:
            return None


@workflow(name="flow_keyed", concurrency=Limit(key=lambda p: p["org"] + ":" + p["region"], max=1))
async def keyed(ctx: WorkflowContext, org: Any, region: Any = "eu") -> str:
    return f"{org}:{region}"


@workflow(name="flow_numbered", concurrency=Limit(key=lambda p: p["n"], max=1))
async def numbered(ctx: WorkflowContext, n: int) -> int:
    return n


async def test_a_key_function_that_raises_or_returns_no_string_fails_the_submit(
    client: WorkflowClient, store: MemoryStore
) -> None:
    with pytest.raises(InvalidParamsError, match="concurrency key of 'flow_keyed'"):
        await client.submit("flow_keyed", {"org": None})  # None + str raises
    with pytest.raises(InvalidParamsError, match="must return a string"):
        await client.submit("flow_numbered", {"n": 5})
    assert store.list_runs("flow_keyed")[0] == []
    assert store.list_runs("flow_numbered")[0] == []
    handle = await client.submit("flow_keyed", {"org": "acme", "region": "eu"})
    gates = (await handle.events())[0].payload["gates"]
    assert gates == {"concurrency": {"key": "acme:eu", "max": 1}}


@workflow(name="flow_tenant", concurrency=Limit(key="tenant_id", max=1))
async def per_tenant(ctx: WorkflowContext, tenant_id: str = "", n: int = 0) -> int:
    await ctx.wait_for_signal("go")
    return n


async def test_runs_without_the_key_parameter_share_the_empty_bucket(
    client: WorkflowClient, runner: InlineWorkflowRunner, store: MemoryStore
) -> None:
    first = await client.submit("flow_tenant", {"n": 1})
    second = await client.submit("flow_tenant", {"n": 2})
    for handle in (first, second):
        assert (await handle.events())[0].payload["gates"]["concurrency"]["key"] == ""
    assert await runner.run_next("flow_tenant") is not None
    assert await first.status() == RunStatus.SIGNAL_WAITING  # parked: its slot is free
    assert await runner.run_next("flow_tenant") is not None
    assert await second.status() == RunStatus.SIGNAL_WAITING


@workflow(name="flow_slow", concurrency=Limit(key="tenant_id", max=1))
async def slow(ctx: WorkflowContext, tenant_id: str) -> str:
    await ctx.sleep(60)
    return tenant_id


async def test_the_inline_runner_waits_for_room_then_raises_after_gate_timeout(
    store: MemoryStore, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    runner = InlineWorkflowRunner(store=store, clock=clock, gate_timeout=30)
    holder = await runner.client.submit("flow_slow", {"tenant_id": "acme"})
    waiting = await runner.client.submit("flow_slow", {"tenant_id": "acme"})
    assert store.claim_next_run("flow_slow", "other-worker") == holder.run_id
    attempt = asyncio.create_task(runner.run("flow_slow", waiting.run_id))
    with caplog.at_level(logging.WARNING, logger="lockgate.inline"):
        for _ in range(40):  # move the clock in steps, letting the runner poll
            await asyncio.sleep(0)
            clock.advance(1)
            await asyncio.sleep(0)
        with pytest.raises(RunGatedError, match="gate_timeout=30"):
            await attempt
    assert any("Limit 'acme'" in r.getMessage() for r in caplog.records)
    assert await waiting.status() == RunStatus.PENDING  # still queued, never dropped


async def test_the_inline_runner_runs_a_gated_run_once_room_frees(
    store: MemoryStore, clock: ManualClock
) -> None:
    runner = InlineWorkflowRunner(store=store, clock=clock, gate_timeout=None)
    holder = await runner.client.submit("flow_slow", {"tenant_id": "acme"})
    waiting = await runner.client.submit("flow_slow", {"tenant_id": "acme"})
    lease = "other-worker"
    assert store.claim_next_run("flow_slow", lease) == holder.run_id
    attempt = asyncio.create_task(runner.run("flow_slow", waiting.run_id))
    for _ in range(5):
        await asyncio.sleep(0)
        clock.advance(0.1)
    assert not attempt.done()
    store.release_run("flow_slow", holder.run_id, lease)
    store.claim_run("flow_slow", holder.run_id, "held-again")
    store.hand_back_run("flow_slow", holder.run_id, "held-again")  # the slot is free now
    for _ in range(5):
        await asyncio.sleep(0)
        clock.advance(0.1)
    await attempt
    assert await waiting.status() == RunStatus.SLEEPING


@workflow(
    name="flow_recorded",
    concurrency=Limit(key="tenant_id", max=3),
    rate_limit=Rate(key="tenant_id", per_second=2.5, burst=4),
)
async def recorded(ctx: WorkflowContext, tenant_id: str) -> str:
    return tenant_id


@workflow(name="flow_recorded_fn", concurrency=Limit(key=lambda p: str(p["tenant_id"]), max=3))
async def recorded_fn(ctx: WorkflowContext, tenant_id: str) -> str:
    return tenant_id


async def test_a_submit_by_name_is_stamped_with_the_gates_its_workers_recorded(
    store: MemoryStore,
) -> None:
    client = WorkflowClient(store)
    store.record_workflow_policy("flow_by_name", policy_record(spec_of(recorded)))
    handle = await client.submit("flow_by_name", {"tenant_id": "acme"})
    assert (await handle.events())[0].payload["gates"] == {
        "concurrency": {"key": "acme", "max": 3},
        "rate": {"key": "acme", "per_second": 2.5, "burst": 4},
    }
    store.record_workflow_policy("flow_by_name_fn", policy_record(spec_of(recorded_fn)))
    with pytest.raises(ConfigurationError, match="function"):
        await client.submit("flow_by_name_fn", {"tenant_id": "acme"})
    assert store.list_runs("flow_by_name_fn")[0] == []


async def test_why_waiting_names_the_gate_with_its_parameter(
    client: WorkflowClient, store: MemoryStore
) -> None:
    handles = [await client.submit("flow_slow", {"tenant_id": "acme"}) for _ in range(3)]
    assert await handles[0].why_waiting() == "a worker to claim it, 1st in line"
    assert store.claim_next_run("flow_slow", "w/1") == handles[0].run_id
    assert await handles[2].why_waiting() == 'Limit tenant_id="acme" 1/1 running, 2nd in line'
    assert await handles[0].why_waiting() is None


async def test_the_first_run_missing_its_key_parameter_is_logged_once(
    client: WorkflowClient, caplog: pytest.LogCaptureFixture
) -> None:
    @workflow(name="flow_warn_empty", concurrency=Limit(key="tenant_id", max=1))
    async def warned(ctx: WorkflowContext, tenant_id: str = "") -> None:
        return None

    with caplog.at_level(logging.WARNING, logger="lockgate.flow"):
        for _ in range(3):
            await client.submit("flow_warn_empty", {})
        await client.submit("flow_warn_empty", {"tenant_id": "acme"})
    warnings = [r.getMessage() for r in caplog.records if "flow_warn_empty" in r.getMessage()]
    assert len(warnings) == 1
    assert "'tenant_id'" in warnings[0]
    assert 'key is ""' in warnings[0]


# -- Collect and Debounce through the engine ---------------------------------------------------

DIGESTS: list[dict[str, Any]] = []


@workflow(name="digest", trigger=Collect(key="user_id", max_events=3, window_seconds=60))
async def digest(ctx: WorkflowContext, key: str, events: list[dict[str, Any]], count: int) -> int:
    DIGESTS.append({"key": key, "kinds": [e["kind"] for e in events], "count": count})
    return count


async def test_trigger_returns_a_handle_when_an_event_completes_a_collect_batch(
    client: WorkflowClient, runner: InlineWorkflowRunner
) -> None:
    DIGESTS.clear()
    assert await client.trigger("digest", {"user_id": "u1", "kind": "comment"}) is None
    assert await client.trigger("digest", {"user_id": "u2", "kind": "like"}) is None
    assert await client.trigger("digest", {"user_id": "u1", "kind": "like"}) is None
    handle = await client.trigger("digest", {"user_id": "u1", "kind": "share"})
    assert handle is not None
    assert await handle.result() == 3
    assert DIGESTS == [{"key": "u1", "kinds": ["comment", "like", "share"], "count": 3}]


async def test_a_collect_window_fires_through_fire_due_triggers(
    client: WorkflowClient, runner: InlineWorkflowRunner, clock: ManualClock
) -> None:
    DIGESTS.clear()
    await client.trigger("digest", {"user_id": "u9", "kind": "comment"})
    clock.advance(59)
    assert await runner.fire_due_triggers("digest") == []
    clock.advance(1)
    (handle,) = await runner.fire_due_triggers("digest")
    assert await handle.result() == 1
    assert DIGESTS == [{"key": "u9", "kinds": ["comment"], "count": 1}]
    assert await runner.fire_due_triggers("digest") == []


async def test_trigger_refuses_what_it_cannot_buffer(
    client: WorkflowClient, store: MemoryStore
) -> None:
    with pytest.raises(ConfigurationError, match="no Collect or Debounce"):
        await client.trigger("flow_slow", {"tenant_id": "acme"})
    with pytest.raises(ValueError, match="JSON object"):
        await client.trigger("digest", ["not", "an", "object"])  # type: ignore[arg-type]
    assert store.due_triggers("digest", 10**12) == []


QUIET: list[int] = []


@workflow(name="flow_quiet", trigger=Debounce(key="doc", window_seconds=5, max_wait_seconds=12))
async def quiet(ctx: WorkflowContext, key: str, events: list[dict[str, Any]], count: int) -> int:
    QUIET.append(count)
    return count


async def test_a_worker_fires_debounced_runs_through_its_trigger_loop() -> None:
    QUIET.clear()
    clock = ManualClock()
    store = MemoryStore(clock=clock)
    options = WorkerOptions(timer_poll_interval_s=0.5, claim_poll_interval=0.1)
    worker = WorkflowWorker(workflows=[quiet], store=store, options=options, clock=clock)
    task = asyncio.create_task(worker.run())

    async def move(seconds: float) -> None:
        for _ in range(int(seconds / 0.1)):
            clock.advance(0.1)
            for _ in range(20):
                await asyncio.sleep(0)

    try:
        await move(0.5)
        for edit in range(3):  # an edit every 2 s: never quiet for 5 s
            await worker.client.trigger("flow_quiet", {"doc": "d1", "edit": edit})
            await move(2)
        assert QUIET == []
        await move(5.5)  # quiet for 5 s after the last edit
        assert QUIET == [3]
        for edit in range(8):  # a steady stream: max_wait_seconds=12 fires it anyway
            await worker.client.trigger("flow_quiet", {"doc": "d1", "edit": edit})
            await move(2)
        # Edits at 0, 2, ..., 12 s after the batch's first: due at 12 s, it takes the edit
        # sent at that instant too, then fires; the eighth edit starts the next batch.
        assert QUIET == [3, 7]
    finally:
        worker.stop()
        await task


async def test_the_guides_digest_runs_through_a_worker() -> None:
    DIGESTS.clear()
    store = MemoryStore()
    worker = WorkflowWorker(
        workflows=[digest],
        store=store,
        options=WorkerOptions(timer_poll_interval_s=0.01, claim_poll_interval=0.01),
    )
    task = asyncio.create_task(worker.run())
    try:
        handle = None
        for kind in ("comment", "like", "share"):
            handle = await worker.client.trigger("digest", {"user_id": "u7", "kind": kind})
        assert handle is not None
        assert await handle.result(timeout=10) == 3
        assert DIGESTS == [{"key": "u7", "kinds": ["comment", "like", "share"], "count": 3}]
    finally:
        worker.stop()
        await task


async def test_trigger_by_name_uses_the_trigger_its_workers_recorded(
    store: MemoryStore, clock: ManualClock
) -> None:
    client = WorkflowClient(store, clock=clock)
    with pytest.raises(ConfigurationError, match="no worker serving it recorded"):
        await client.trigger("flow_digest_elsewhere", {"user_id": "u1"})
    record = policy_record(spec_of(digest))
    store.record_workflow_policy("flow_digest_elsewhere", record)
    assert await client.trigger("flow_digest_elsewhere", {"user_id": "u1", "n": 1}) is None
    assert await client.trigger("flow_digest_elsewhere", {"user_id": "u1", "n": 2}) is None
    handle = await client.trigger("flow_digest_elsewhere", {"user_id": "u1", "n": 3})
    assert handle is not None
    (init,) = await handle.events()
    assert init.payload["params"]["count"] == 3
    assert init.payload["version"] == spec_of(digest).version
    # A Debounce recorded by a worker fires on its quiet period.
    store.record_workflow_policy("flow_quiet_elsewhere", policy_record(spec_of(quiet)))
    assert await client.trigger("flow_quiet_elsewhere", {"doc": "d1"}) is None
    assert store.due_triggers("flow_quiet_elsewhere", clock() + 4.9) == []
    assert store.due_triggers("flow_quiet_elsewhere", clock() + 5) == ["d1"]


async def test_a_submit_by_name_missing_the_key_parameter_warns_once(
    store: MemoryStore, caplog: pytest.LogCaptureFixture
) -> None:
    client = WorkflowClient(store)
    store.record_workflow_policy("flow_by_name_empty", policy_record(spec_of(recorded)))
    with caplog.at_level(logging.WARNING, logger="lockgate.flow"):
        await client.submit("flow_by_name_empty", {})
        await client.submit("flow_by_name_empty", {})
    warned = [r.getMessage() for r in caplog.records if "flow_by_name_empty" in r.getMessage()]
    assert len(warned) == 2  # once for its Limit, once for its Rate
    assert all("'tenant_id'" in message for message in warned)
