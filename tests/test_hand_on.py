"""Out-of-date gates: a run stamped with gates other than its claiming worker's is handed on,
before its body runs, to one successor stamped with the worker's gates and version; the id the
caller holds keeps working."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from lockgate import (
    EventKind,
    InlineWorkflowRunner,
    Limit,
    ManualClock,
    MemoryStore,
    Rate,
    RunStatus,
    WorkflowClient,
    WorkflowContext,
    workflow,
)
from lockgate.cli import main
from lockgate.stores import SQLiteStore
from lockgate.worker import WorkerOptions, WorkflowWorker

BODIES: list[tuple[str, str]] = []


def build(name: str, *, sleep: float = 5, **declared: Any) -> Callable[..., Any]:
    """Declare ``name`` as a build would: later calls replace it, like a new deploy."""

    async def body(ctx: WorkflowContext, tenant_id: str, n: int = 0) -> int:
        BODIES.append((name, ctx.run_id))
        await ctx.sleep(sleep)
        return n * 10

    # One body per call, of one qualified name: the registry takes each as a reload.
    return workflow(name=name, **declared)(body)


def runner_for(
    store: MemoryStore | SQLiteStore, clock: ManualClock, fn: Any
) -> InlineWorkflowRunner:
    return InlineWorkflowRunner(store=store, workflows=[fn], clock=clock)


def kinds(events: list[Any]) -> list[str]:
    return [e.kind for e in events]


async def test_a_run_with_out_of_date_gates_is_handed_on_before_its_body_runs(
    store: MemoryStore, clock: ManualClock
) -> None:
    build("hand_basic", concurrency=Limit(key="tenant_id", max=1))
    handle = await WorkflowClient(store, clock=clock).submit(
        "hand_basic", {"tenant_id": "acme", "n": 4}
    )
    new = build(
        "hand_basic",
        sleep=0,
        concurrency=Limit(key="tenant_id", max=3),
        rate_limit=Rate("tenant_id", 2),
    )
    runner = runner_for(store, clock, new)
    BODIES.clear()
    await runner.run_next("hand_basic")
    assert BODIES == []  # the body never ran under the old gates
    own = await handle.events()
    assert kinds(own) == [EventKind.RUN_INIT, EventKind.RUN_CONTINUED]
    successor = own[-1].payload["run_id"]
    assert successor != handle.run_id
    (init,) = store.load_run("hand_basic", successor)
    assert init.payload["provenance"]["source"]["gated_from"] == handle.run_id
    assert init.payload["gates"] == {
        "concurrency": {"key": "acme", "max": 3},
        "rate": {"key": "acme", "per_second": 2.0, "burst": 2},
    }
    assert init.payload["params"] == {"tenant_id": "acme", "n": 4}
    # The id the caller holds follows the successor.
    assert await handle.status() == RunStatus.PENDING
    assert store.get_run("hand_basic", handle.run_id).status == RunStatus.CONTINUED  # type: ignore[union-attr]
    assert await runner.client.handle("hand_basic", handle.run_id).result() == 40
    assert [("hand_basic", successor)] == BODIES
    assert await handle.status() == RunStatus.COMPLETE
    assert kinds(await handle.events()) == [EventKind.RUN_INIT, EventKind.RUN_CONTINUED]


async def test_signal_cancel_and_terminate_on_the_original_id_act_on_the_successor(
    store: MemoryStore, clock: ManualClock
) -> None:
    build("hand_ops", concurrency=Limit(key="tenant_id", max=1))
    client = WorkflowClient(store, clock=clock)
    first = await client.submit("hand_ops", {"tenant_id": "acme"})
    second = await client.submit("hand_ops", {"tenant_id": "globex"})
    # Sent before the hand-on: buffered on the original, moved with it.
    assert await first.signal("early", {"x": 1}) == "buffered"
    new = build("hand_ops", concurrency=Limit(key="tenant_id", max=2))
    runner = runner_for(store, clock, new)
    await runner.run_next("hand_ops")
    await runner.run_next("hand_ops")
    tail_first = store.get_last_event("hand_ops", first.run_id).payload["run_id"]  # type: ignore[union-attr]
    tail_second = store.get_last_event("hand_ops", second.run_id).payload["run_id"]  # type: ignore[union-attr]
    assert store.peek_signal("hand_ops", tail_first, "early") is not None
    # Sent after: it lands on the successor directly.
    assert await first.signal("late", {}) == "buffered"
    assert store.peek_signal("hand_ops", tail_first, "late") is not None
    await first.cancel(reason="not needed")
    assert store.poll_run("hand_ops", tail_first).cancel_requested_at is not None
    result = await second.terminate(reason="stop")
    assert result.run_id == tail_second
    assert await second.status() == RunStatus.TERMINATED
    assert await first.pause() is None
    assert store.poll_run("hand_ops", tail_first).pause_requested_at is not None


async def test_an_older_version_never_hands_on(store: MemoryStore, clock: ManualClock) -> None:
    build(
        "hand_older",
        version="2",
        version_behavior="auto_upgrade",
        concurrency=Limit("tenant_id", 1),
    )
    store.register_version("hand_older", "1")
    store.register_version("hand_older", "2")
    handle = await WorkflowClient(store, clock=clock).submit("hand_older", {"tenant_id": "a"})
    old = build(
        "hand_older",
        version="1",
        version_behavior="auto_upgrade",
        concurrency=Limit("tenant_id", 9),
    )
    runner = runner_for(store, clock, old)
    BODIES.clear()
    await runner.run_next("hand_older")
    assert [("hand_older", handle.run_id)] == BODIES
    assert EventKind.RUN_CONTINUED not in kinds(await handle.events())


async def test_a_newer_version_hands_on_and_stamps_its_own_version(
    store: MemoryStore, clock: ManualClock
) -> None:
    build(
        "hand_newer",
        version="1",
        version_behavior="auto_upgrade",
        concurrency=Limit("tenant_id", 1),
    )
    store.register_version("hand_newer", "1")
    handle = await WorkflowClient(store, clock=clock).submit("hand_newer", {"tenant_id": "a"})
    new = build(
        "hand_newer",
        version="2",
        version_behavior="auto_upgrade",
        concurrency=Limit("tenant_id", 4),
    )
    store.register_version("hand_newer", "2")
    await runner_for(store, clock, new).run_next("hand_newer")
    continued = (await handle.events())[-1]
    assert continued.kind == EventKind.RUN_CONTINUED
    (init,) = store.load_run("hand_newer", continued.payload["run_id"])
    assert init.payload["version"] == "2"


async def test_a_run_whose_body_started_keeps_its_gates(
    store: MemoryStore, clock: ManualClock
) -> None:
    old = build("hand_started", concurrency=Limit(key="tenant_id", max=1))
    handle = await WorkflowClient(store, clock=clock).submit(
        "hand_started", {"tenant_id": "a", "n": 2}
    )
    await runner_for(store, clock, old).run_next("hand_started")
    assert await handle.status() == RunStatus.SLEEPING  # the body started, then slept
    new = build("hand_started", concurrency=Limit(key="tenant_id", max=5))
    runner = runner_for(store, clock, new)
    clock.advance(5)
    await runner.fire_due_timers()
    await runner.run_next("hand_started")
    assert await handle.status() == RunStatus.COMPLETE
    assert EventKind.RUN_CONTINUED not in kinds(await handle.events())


async def test_a_submit_by_name_before_any_policy_is_stamped_unknown_then_handed_on(
    store: MemoryStore, clock: ManualClock
) -> None:
    client = WorkflowClient(store, clock=clock)
    # Nothing is imported under this name yet and no worker has recorded a policy.
    handle = await client.submit("hand_unknown", {"tenant_id": "acme", "n": 1})
    assert (await handle.events())[0].payload["gates"] == {"unknown": True}
    served = build("hand_unknown", sleep=0, concurrency=Limit(key="tenant_id", max=2))
    runner = runner_for(store, clock, served)
    await runner.run_next("hand_unknown")
    continued = (await handle.events())[-1]
    assert continued.kind == EventKind.RUN_CONTINUED
    assert continued.payload["gates"] == {"concurrency": {"key": "acme", "max": 2}}
    assert await runner.client.handle("hand_unknown", handle.run_id).result() == 10


async def test_an_unknown_stamp_with_a_worker_declaring_no_gates_runs_as_it_is(
    store: MemoryStore, clock: ManualClock
) -> None:
    handle = await WorkflowClient(store, clock=clock).submit("hand_ungated", {"tenant_id": "a"})
    runner = runner_for(store, clock, build("hand_ungated"))
    BODIES.clear()
    await runner.run_next("hand_ungated")
    assert [("hand_ungated", handle.run_id)] == BODIES


async def test_a_successor_is_not_handed_on_again_by_a_build_of_the_same_version(
    store: MemoryStore, clock: ManualClock
) -> None:
    build("hand_pingpong", concurrency=Limit(key="tenant_id", max=1))
    handle = await WorkflowClient(store, clock=clock).submit("hand_pingpong", {"tenant_id": "a"})
    second = build("hand_pingpong", concurrency=Limit(key="tenant_id", max=2))
    await runner_for(store, clock, second).run_next("hand_pingpong")
    # Mid-deploy, a build of the same version still declaring max=1 claims the successor:
    # it runs it rather than handing it back.
    first_again = build("hand_pingpong", concurrency=Limit(key="tenant_id", max=1))
    BODIES.clear()
    await runner_for(store, clock, first_again).run_next("hand_pingpong")
    tail = (await handle.events())[-1].payload["run_id"]
    assert [("hand_pingpong", tail)] == BODIES
    assert EventKind.RUN_CONTINUED not in kinds(store.load_run("hand_pingpong", tail))


async def test_a_worker_on_sqlite_hands_on_and_runs_the_successor(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    store = SQLiteStore(tmp_path / "store.db")
    url = f"sqlite:///{tmp_path / 'store.db'}"
    try:
        build("hand_worker", sleep=0, concurrency=Limit(key="tenant_id", max=1))
        client = WorkflowClient(store, poll_interval=0.01)
        handles = [
            await client.submit("hand_worker", {"tenant_id": "acme", "n": n}) for n in range(3)
        ]
        new = build("hand_worker", sleep=0, concurrency=Limit(key="tenant_id", max=3))
        worker = WorkflowWorker(
            workflows=[new], store=store, options=WorkerOptions(claim_poll_interval=0.01)
        )
        await worker.run_until_idle()
        assert [await handle.result(timeout=5) for handle in handles] == [0, 10, 20]
        for handle in handles:
            assert kinds(await handle.events()) == [EventKind.RUN_INIT, EventKind.RUN_CONTINUED]
            assert await handle.status() == RunStatus.COMPLETE
        assert worker._pool.outcomes["handed_on"] == 3
        argv = ["runs", "show", "hand_worker", handles[0].run_id, "--store", url]
        assert await asyncio.to_thread(main, argv) == 0
        shown = capsys.readouterr().out
        assert "continued" in shown
        assert f"handed on to  {handles[0].run_id}.g" in shown
    finally:
        store.close()


async def test_a_retry_is_never_handed_on(store: MemoryStore, clock: ManualClock) -> None:
    build("hand_retry", sleep=0, concurrency=Limit(key="tenant_id", max=1))
    client = WorkflowClient(store, clock=clock)
    first = await client.submit("hand_retry", {"tenant_id": "acme", "n": 2})
    await client.terminate("hand_retry", first.run_id, reason="test")
    retry = await client.retry("hand_retry", first.run_id)  # stamped with max=1
    new = build("hand_retry", sleep=0, concurrency=Limit(key="tenant_id", max=5))
    runner = runner_for(store, clock, new)
    BODIES.clear()
    await runner.run_next("hand_retry")
    # Its gates are out of date, yet it ran as it is: a successor would start it afresh.
    assert [("hand_retry", retry.run_id)] == BODIES
    assert EventKind.RUN_CONTINUED not in kinds(await retry.events())
    assert await retry.result() == 20
