"""``rebuild_lifecycle``: the Valkey tier of a Valkey + Kafka composite lost (its namespace's keys
deleted) and restored from the journal topic, on a real Valkey server and a real broker.

Runs are brought into every state a run can be in when Valkey goes (queued, running under a
lease, sleeping, waiting on a signal, paused, cancel requested, finished each way, gated
behind a Limit, submitted with an idempotency key); after the rebuild each reads back as it
was, the gates count again, a second rebuild restores nothing, and every run then completes
with no step run twice and no new event dropped as stale.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from lockgate import (
    EventKind,
    IdempotencyConflict,
    InlineWorkflowRunner,
    Limit,
    ManualClock,
    RunEvent,
    RunNotFoundError,
    RunStatus,
    WorkflowContext,
    reconstruct_state,
    step,
    workflow,
)
from lockgate.stores import (
    BatchToFire,
    CompositeStore,
    KafkaEventLogStore,
    RebuildReport,
    SQLiteStore,
    TriggerPolicy,
    ValkeyLifecycleStore,
    rebuild_lifecycle,
)
from lockgate.stores._types import Written
from lockgate.stores.valkey._keys import key
from valkey_server import shared_url

#: Step executions, by (tag, step).
EXECUTED: Counter[tuple[str, str]] = Counter()
#: Tags whose second step blocks until its event is set (a run caught mid-step).
BLOCKED: dict[str, asyncio.Event] = {}
#: Set as such a step starts.
STARTED: dict[str, asyncio.Event] = {}


@step(name="rb_one")
async def one(tag: str) -> str:
    EXECUTED[(tag, "one")] += 1
    return f"one:{tag}"


@step(name="rb_two")
async def two(tag: str) -> str:
    EXECUTED[(tag, "two")] += 1
    if tag in BLOCKED:
        STARTED[tag].set()
        await BLOCKED[tag].wait()
    return f"two:{tag}"


@workflow(name="rb_flow")
async def rb_flow(ctx: WorkflowContext, tag: str, mode: str = "plain") -> list[Any]:
    got: list[Any] = [await one(tag)]
    if mode == "sleep":
        await ctx.sleep(600)
    elif mode == "signal":
        got.append(await ctx.wait_for_signal("go"))
    elif mode == "signals":
        got.append(await ctx.wait_for_signal("a"))
        got.append(await ctx.wait_for_signal("b", timeout=900))
    elif mode == "fail":
        raise RuntimeError("this run fails")
    got.append(await two(tag))
    return got


@workflow(name="rb_gated", concurrency=Limit(key="org", max=1))
async def rb_gated(ctx: WorkflowContext, tag: str, org: str) -> str:
    await one(tag)
    return await two(tag)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def composite(clock: ManualClock, kafka_bootstrap: str) -> Iterator[CompositeStore]:
    lifecycle = ValkeyLifecycleStore(
        shared_url(), namespace=f"rb{uuid.uuid4().hex[:10]}", clock=clock, lock_ttl=30.0
    )
    events = KafkaEventLogStore(
        kafka_bootstrap, topic_prefix=f"rb{uuid.uuid4().hex[:10]}", shard_count=1
    )
    store = CompositeStore(lifecycle=lifecycle, events=events)
    EXECUTED.clear()
    BLOCKED.clear()
    STARTED.clear()
    yield store
    store.close()


def lose_valkey(lifecycle: ValkeyLifecycleStore) -> None:
    """Delete every key of the store's namespace, as a FLUSHALL does to it."""
    pattern = f"lg:{{{lifecycle.namespace}[:}}]*"  # the namespace's prefix and its shards'
    doomed = list(lifecycle._redis.scan_iter(match=pattern))
    assert doomed
    for found in doomed:
        lifecycle._redis.delete(found)
    assert not list(lifecycle._redis.scan_iter(match=pattern))


def fields_of(lifecycle: ValkeyLifecycleStore, name: str, run_id: str) -> dict[str, str]:
    raw = lifecycle._redis.hgetall(key(lifecycle.prefix, "r", name, run_id))
    return {k.decode(): v.decode() for k, v in raw.items()}


def journal_epochs(store: CompositeStore, name: str, run_id: str) -> list[int]:
    return [
        int(e.headers["lg-epoch"]) for e in store.load_run(name, run_id) if "lg-epoch" in e.headers
    ]


async def test_a_lost_valkey_tier_comes_back_from_the_journal(
    composite: CompositeStore, clock: ManualClock
) -> None:
    lifecycle = composite.lifecycle
    assert isinstance(lifecycle, ValkeyLifecycleStore)
    runner = InlineWorkflowRunner(store=composite, clock=clock, gate_timeout=None)
    client = runner.client
    submit = client.submit

    # Finished, each way.
    done = await submit("rb_flow", {"tag": "done"})
    await runner.run("rb_flow", done.run_id)
    failed = await submit("rb_flow", {"tag": "failed", "mode": "fail"})
    await runner.run("rb_flow", failed.run_id)
    cancelled = await submit("rb_flow", {"tag": "cancelled"})
    await cancelled.cancel()
    await runner.run("rb_flow", cancelled.run_id)
    # Queued, never run; one with an idempotency key.
    queued = await submit("rb_flow", {"tag": "queued"})
    keyed = await submit("rb_flow", {"tag": "keyed"}, idempotency_key="order-7")
    # Sleeping with a deadline; waiting on a signal, without and with one already received.
    sleeping = await submit("rb_flow", {"tag": "sleeping", "mode": "sleep"})
    await runner.run("rb_flow", sleeping.run_id)
    waiting = await submit("rb_flow", {"tag": "waiting", "mode": "signal"})
    await runner.run("rb_flow", waiting.run_id)
    second = await submit("rb_flow", {"tag": "second", "mode": "signals"})
    await runner.run("rb_flow", second.run_id)
    await second.signal("a", {"n": 1})
    await runner.run("rb_flow", second.run_id)  # receives "a", parks on "b"
    # Paused on its pause wait; cancel requested while sleeping.
    paused = await submit("rb_flow", {"tag": "paused"})
    await paused.pause()
    await runner.run("rb_flow", paused.run_id)
    doomed = await submit("rb_flow", {"tag": "doomed", "mode": "sleep"})
    await runner.run("rb_flow", doomed.run_id)
    await doomed.cancel()
    # Gated: three runs of one Limit key, queued behind one another.
    gated = [await submit("rb_gated", {"tag": f"g{i}", "org": "acme"}) for i in range(3)]
    # Running, mid-step, under its second claim (epoch 2): a first lease lapsed.
    BLOCKED["running"], STARTED["running"] = asyncio.Event(), asyncio.Event()
    running = await submit("rb_flow", {"tag": "running"})
    composite.claim_run("rb_flow", running.run_id, "ghost-lease")
    clock.advance(31)
    attempt = asyncio.create_task(runner.run("rb_flow", running.run_id))
    await asyncio.wait_for(STARTED["running"].wait(), timeout=30)
    assert journal_epochs(composite, "rb_flow", running.run_id)[-1] == 2

    before = {
        h.run_id: composite.get_run(h.name, h.run_id)
        for h in [
            done,
            failed,
            cancelled,
            queued,
            keyed,
            sleeping,
            waiting,
            second,
            paused,
            doomed,
            *gated,
        ]
    }
    expected_status = {
        done.run_id: RunStatus.COMPLETE,
        failed.run_id: RunStatus.ERROR,
        cancelled.run_id: RunStatus.CANCELLED,
        queued.run_id: RunStatus.PENDING,
        keyed.run_id: RunStatus.PENDING,
        sleeping.run_id: RunStatus.SLEEPING,
        waiting.run_id: RunStatus.SIGNAL_WAITING,
        second.run_id: RunStatus.SIGNAL_WAITING,
        paused.run_id: RunStatus.PAUSED,
        doomed.run_id: RunStatus.PENDING,  # a latched cancel queues it, wait and all
        **{g.run_id: RunStatus.PENDING for g in gated},
    }
    assert {r: i.status for r, i in before.items() if i} == expected_status
    positions = {r: lifecycle.journal_position(before[r].name, r) for r in before}

    lose_valkey(lifecycle)
    BLOCKED["running"].set()
    await asyncio.gather(attempt, return_exceptions=True)  # its lease went with Valkey
    assert composite.get_run("rb_flow", done.run_id) is None

    report = rebuild_lifecycle(composite)
    assert isinstance(report, RebuildReport)
    statuses = report.by_status()
    assert statuses == Counter(
        {
            "pending": 7,  # queued, keyed, doomed, three gated, running
            "sleeping": 1,
            "signal_waiting": 2,
            "paused": 1,
            "complete": 1,
            "error": 1,
            "cancelled": 1,
        }
    )
    assert report.present == 0
    assert report.positions_kept == 14
    assert report.not_restored == []
    assert report.idempotency_keys == 1
    text = "\n".join(report.lines())
    assert "restored 14 runs: 7 queued, 1 sleeping, 2 waiting for a signal, 1 paused" in text
    assert "Rate token buckets" in text
    assert "Collect/Debounce" in text

    # Every run reads back as it was.
    for run_id, was in before.items():
        now = composite.get_run(was.name, run_id)
        assert now is not None, run_id
        assert (now.status, now.params, now.submitted_at, now.wait) == (
            was.status,
            was.params,
            was.submitted_at,
            was.wait,
        ), run_id
        assert now.cancel_requested_at == was.cancel_requested_at, run_id
        assert lifecycle.journal_position(was.name, run_id) == positions[run_id], run_id
    assert composite.get_run("rb_flow", running.run_id).status == RunStatus.PENDING
    assert composite.get_run_controls("rb_flow", paused.run_id)[1] is not None
    listed, _ = composite.list_runs("rb_flow", limit=100)
    assert [i.run_id for i in listed][-3:] == [cancelled.run_id, failed.run_id, done.run_id]
    assert await client.result("rb_flow", done.run_id) == ["one:done", "two:done"]
    # The sleep keeps its deadline; the epoch counter is where the journal left it.
    assert composite.next_wait_due(clock()) == before[sleeping.run_id].wait.due_at
    assert fields_of(lifecycle, "rb_flow", running.run_id)["epoch"] == "2"
    assert int(fields_of(lifecycle, "rb_flow", running.run_id)["last_seq"]) == max(
        e.run_seq or 0 for e in composite.events.load_run("rb_flow", running.run_id)
    )
    # The idempotency key answers again: the same run, or a conflict for other params.
    again = await submit("rb_flow", {"tag": "keyed"}, idempotency_key="order-7")
    assert again.run_id == keyed.run_id
    with pytest.raises(IdempotencyConflict):
        await submit("rb_flow", {"tag": "other"}, idempotency_key="order-7")
    # The Limit counts again: one of the gated runs at a time.
    first = composite.claim_next_run("rb_gated", "lease-a")
    assert first == gated[0].run_id
    assert composite.claim_next_run("rb_gated", "lease-b") is None
    composite.release_run("rb_gated", first, "lease-a")

    # A second rebuild restores nothing, and says so.
    repeat = rebuild_lifecycle(composite)
    assert repeat.restored_total == 0
    assert repeat.present == 14
    assert repeat.idempotency_keys == 0
    assert "restored nothing" in "\n".join(repeat.lines())

    # Every run completes from where its journal left it.
    await waiting.signal("go", {"ok": True})
    await second.signal("b", {"n": 2})
    await paused.unpause()
    for run_id in [running.run_id, queued.run_id, keyed.run_id, waiting.run_id, second.run_id]:
        await runner.run("rb_flow", run_id)
    await runner.run("rb_flow", paused.run_id)
    await runner.run("rb_flow", doomed.run_id)
    clock.advance(601)
    await runner.fire_due_timers()
    await runner.run("rb_flow", sleeping.run_id)
    for g in gated:
        await runner.run("rb_gated", g.run_id)
    assert await client.result("rb_flow", running.run_id) == ["one:running", "two:running"]
    assert await client.result("rb_flow", second.run_id) == [
        "one:second",
        {"n": 1},
        {"n": 2},
        "two:second",
    ]
    for run_id in [queued.run_id, keyed.run_id, waiting.run_id, paused.run_id, sleeping.run_id]:
        assert composite.get_run("rb_flow", run_id).status == RunStatus.COMPLETE, run_id
    assert composite.get_run("rb_flow", doomed.run_id).status == RunStatus.CANCELLED
    assert all(composite.get_run("rb_gated", g.run_id).status == RunStatus.COMPLETE for g in gated)
    # No step ran twice; the running run's second step ran again (it never completed).
    assert {k: n for k, n in EXECUTED.items() if n != 1} == {("running", "two"): 2}
    # The new claim's events came after the journaled ones and were kept.
    journal = composite.events.load_run("rb_flow", running.run_id)
    state = reconstruct_state(journal)
    assert state.terminal is not None
    assert state.terminal.kind == EventKind.RUN_COMPLETE
    assert state.dropped_stale == 0
    assert journal_epochs(composite, "rb_flow", running.run_id)[-1] == 3
    assert [e.run_seq for e in journal] == list(range(1, len(journal) + 1))


async def test_a_run_restored_with_no_epoch_would_have_its_new_events_dropped(
    composite: CompositeStore, clock: ManualClock
) -> None:
    """Why the epoch counter is restored: without it, the next claim's epoch is below the
    journal's, and the fold drops everything the run journals after the rebuild."""
    lifecycle = composite.lifecycle
    assert isinstance(lifecycle, ValkeyLifecycleStore)
    runner = InlineWorkflowRunner(store=composite, clock=clock, gate_timeout=None)
    handle = await runner.client.submit("rb_flow", {"tag": "e", "mode": "sleep"})
    for lease in ("l1", "l2", "l3"):  # three claims whose leases lapse: epoch 3
        composite.claim_run("rb_flow", handle.run_id, lease)
        clock.advance(31)
    await runner.run("rb_flow", handle.run_id)  # epoch 4: step one, then parks on its sleep
    assert max(journal_epochs(composite, "rb_flow", handle.run_id)) == 4
    lose_valkey(lifecycle)
    assert rebuild_lifecycle(composite).restored_total == 1
    assert fields_of(lifecycle, "rb_flow", handle.run_id)["epoch"] == "4"
    clock.advance(601)
    await runner.fire_due_timers()
    await runner.run("rb_flow", handle.run_id)
    journal = composite.events.load_run("rb_flow", handle.run_id)
    assert max(journal_epochs(composite, "rb_flow", handle.run_id)) == 5
    state = reconstruct_state(journal)
    assert state.dropped_stale == 0
    assert state.terminal is not None
    assert Counter({("e", "one"): 1, ("e", "two"): 1}) == EXECUTED


def test_a_rebuild_needs_a_valkey_and_kafka_composite(tmp_path: Any) -> None:
    from lockgate import ConfigurationError

    lifecycle = ValkeyLifecycleStore(shared_url(), namespace=f"rb{uuid.uuid4().hex[:10]}")
    store = CompositeStore(lifecycle=lifecycle, events=SQLiteStore(tmp_path / "j.db"))
    with pytest.raises(ConfigurationError, match="KafkaEventLogStore"):
        rebuild_lifecycle(store)
    store.close()


class FlushedAfterAppend(ValkeyLifecycleStore):
    """Valkey losing its keys just after it answered an append, before anyone read them."""

    def append_written(
        self, name: str, run_id: str, events: list[Any], *, fence: str | None = None
    ) -> Written:
        written = super().append_written(name, run_id, events, fence=fence)
        lose_valkey(self)
        return written


async def test_an_append_valkey_answered_then_lost_is_kept_in_kafka_and_the_run_rebuilt(
    kafka_bootstrap: str, clock: ManualClock
) -> None:
    """Valkey decides an append; the composite copies the events as Valkey's answer numbered
    them, so an append Valkey answered and then lost with all its keys is in Kafka all the
    same, acknowledged. The run's next operation finds no run (RunNotFoundError: the worker
    does not go on as if nothing happened), and a rebuild brings it back with the step."""
    lifecycle = FlushedAfterAppend(
        shared_url(), namespace=f"rb{uuid.uuid4().hex[:10]}", clock=clock
    )
    events = KafkaEventLogStore(kafka_bootstrap, topic_prefix=f"rb{uuid.uuid4().hex[:10]}")
    store = CompositeStore(lifecycle=lifecycle, events=events)
    handle = await InlineWorkflowRunner(store=store, clock=clock).client.submit(
        "rb_flow", {"tag": "gone"}
    )
    store.claim_run("rb_flow", handle.run_id, "lease")
    done = RunEvent("step:done", {"call_index": 0, "step_id": "rb_one"}, handle.run_id)
    store.append_events("rb_flow", handle.run_id, [done], fence="lease")
    kinds = [e.kind for e in events.load_run("rb_flow", handle.run_id)]
    assert kinds == ["run:init", "step:done"]
    assert store.lifecycle.get_run("rb_flow", handle.run_id) is None
    with pytest.raises(RunNotFoundError):
        store.heartbeat("rb_flow", handle.run_id, "lease")
    assert rebuild_lifecycle(store).restored_total == 1
    assert [e.kind for e in store.load_run("rb_flow", handle.run_id)] == kinds
    store.close()


@pytest.mark.parametrize(
    "argv",
    [
        ["--store", "sqlite:///never-made.db", "--journal", "kafka://127.0.0.1:9"],
        ["--store", "valkey://127.0.0.1:1/0"],
        [],
    ],
)
def test_store_rebuild_without_a_valkey_store_and_a_journal_exits_2_with_one_line(
    argv: list[str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Any,
) -> None:
    from lockgate.cli._main import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LOCKGATE_JOURNAL_URL", raising=False)
    monkeypatch.delenv("LOCKGATE_STORE_URL", raising=False)
    assert main(["store", "rebuild", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "store rebuild needs --journal" in err[0]
    assert "valkey://" in err[0]
    assert not (tmp_path / "never-made.db").exists()


async def test_a_sharded_store_is_rebuilt_shard_by_shard(
    kafka_bootstrap: str, clock: ManualClock
) -> None:
    """With shards, each run comes back in its partition's shard, found by reads from any
    process, and its idempotency key in the namespace-wide slot."""
    lifecycle = ValkeyLifecycleStore(
        shared_url(), namespace=f"rb{uuid.uuid4().hex[:10]}", clock=clock, shard_count=3
    )
    events = KafkaEventLogStore(
        kafka_bootstrap, topic_prefix=f"rb{uuid.uuid4().hex[:10]}", shard_count=3
    )
    store = CompositeStore(lifecycle=lifecycle, events=events)
    runner = InlineWorkflowRunner(store=store, clock=clock, gate_timeout=None)
    EXECUTED.clear()
    plain = [await runner.client.submit("rb_flow", {"tag": f"s{i}"}) for i in range(6)]
    gated = [await runner.client.submit("rb_gated", {"tag": f"h{i}", "org": "x"}) for i in range(2)]
    keyed = await runner.client.submit("rb_flow", {"tag": "k"}, idempotency_key="once")
    for handle in plain[:3]:
        await runner.run("rb_flow", handle.run_id)
    shards = {h.run_id: lifecycle.shard_of(h.name, h.run_id) for h in [*plain, *gated, keyed]}
    assert len(set(shards.values())) > 1
    lose_valkey(lifecycle)
    report = rebuild_lifecycle(store)
    assert report.restored_total == 9
    assert report.idempotency_keys == 1
    fresh = ValkeyLifecycleStore(
        shared_url(), namespace=lifecycle.namespace, clock=clock, shard_count=3
    )
    for run_id, shard in shards.items():
        assert (
            fresh.shard_of("rb_gated" if run_id in {g.run_id for g in gated} else "rb_flow", run_id)
            == shard
        )
    again = await runner.client.submit("rb_flow", {"tag": "k"}, idempotency_key="once")
    assert again.run_id == keyed.run_id
    for handle in [*plain, keyed]:
        await runner.run("rb_flow", handle.run_id)
    for handle in gated:
        await runner.run("rb_gated", handle.run_id)
    for handle in [*plain, *gated, keyed]:
        assert store.get_run(handle.name, handle.run_id).status == RunStatus.COMPLETE
    assert set(EXECUTED.values()) == {1}
    fresh.close()
    store.close()


def test_a_rebuild_restores_the_fired_through_marks_of_trigger_topics(
    composite: CompositeStore,
) -> None:
    """A run a trigger topic's consumer fired covers records that are read again after Valkey
    is lost (the group's commit lags the fires): its key's mark comes back with the run, so
    they do not fire twice."""
    policy = TriggerPolicy("collect", window_seconds=60, max_events=3)
    lifecycle = composite.lifecycle
    assert isinstance(lifecycle, ValkeyLifecycleStore)
    fired = composite.fire_batch(
        "rb_triggered", "u1", [{"n": 1}, {"n": 2}], policy=policy, source="t/0", first=4, last=9
    )
    composite.fire_batch(
        "rb_triggered", "u2", [{"n": 3}], policy=policy, source="t/0", first=12, last=12
    )
    assert fired.run_id is not None
    keys = {"u1": policy, "u2": policy}
    lose_valkey(lifecycle)
    assert composite.fired_through("rb_triggered", "t/0", keys) == {}

    report = rebuild_lifecycle(composite)

    assert report.fired_marks == 2
    assert "trigger fired-through marks raised: 2" in report.lines()
    assert composite.fired_through("rb_triggered", "t/0", keys) == {"u1": 9, "u2": 12}
    again = composite.fire_batch(
        "rb_triggered", "u1", [{"n": 2}], policy=policy, source="t/0", first=8, last=11
    )
    assert again.run_id is None  # records up to 9 are in a run already
    assert rebuild_lifecycle(composite).fired_marks == 0  # a mark only grows


def test_runs_fired_together_and_their_marks_come_back_after_valkey_is_lost(
    composite: CompositeStore,
) -> None:
    """``fire_batches`` copies each run it made to the journal from what the fire's script
    wrote, without reading it back: every such run, its params and its key's mark are in
    Kafka once the call returns, so a rebuild after Valkey is lost restores them all."""
    policy = TriggerPolicy("collect", window_seconds=60, max_events=3)
    lifecycle = composite.lifecycle
    assert isinstance(lifecycle, ValkeyLifecycleStore)
    batches = [
        BatchToFire(f"u{n}", [{"n": n}, {"n": n + 100}], policy, "t/1", 10 * n, 10 * n + 5)
        for n in range(12)
    ]
    fired = composite.fire_batches("rb_triggered", batches)
    assert all(one.run_id is not None and one.opened for one in fired)
    keys = {batch.key: policy for batch in batches}
    lose_valkey(lifecycle)
    assert composite.fired_through("rb_triggered", "t/1", keys) == {}

    report = rebuild_lifecycle(composite)

    assert report.fired_marks == len(batches)
    assert composite.fired_through("rb_triggered", "t/1", keys) == {
        batch.key: batch.last for batch in batches
    }
    for batch, one in zip(batches, fired, strict=True):
        assert one.run_id is not None
        info = composite.get_run("rb_triggered", one.run_id)
        assert info is not None
        assert info.params == {"key": batch.key, "events": list(batch.events), "count": 2}
    again = composite.fire_batches("rb_triggered", batches[:2])
    assert [one.run_id for one in again] == [one.run_id for one in fired[:2]]  # the same runs
    assert not any(one.opened for one in again)


@workflow(name="rb_chain")
async def rb_chain(ctx: WorkflowContext, left: int) -> str:
    if left == 0:
        return "end"
    await ctx.continue_as_new({"left": left - 1})


async def test_a_rebuild_restores_the_tail_record_of_each_chain(
    composite: CompositeStore, clock: ManualClock
) -> None:
    """A chain's tail record goes with Valkey; the rebuild moves it forward again from the
    hops the topic holds, so the chain's first id resolves in three reads, not one per hop."""
    runner = InlineWorkflowRunner(store=composite, clock=clock)
    finished = await runner.client.submit("rb_chain", {"left": 4})
    going = await runner.client.submit("rb_chain", {"left": 9})
    for handle, hops in ((finished, 5), (going, 3)):
        for hop in range(hops):
            await runner.run("rb_chain", f"{handle.run_id}.c{hop}" if hop else handle.run_id)
    lifecycle = composite.lifecycle
    assert isinstance(lifecycle, ValkeyLifecycleStore)
    before = {h.run_id: lifecycle.get_chain_tail("rb_chain", h.run_id) for h in (finished, going)}
    lose_valkey(lifecycle)
    assert lifecycle.get_chain_tail("rb_chain", finished.run_id) is None
    rebuild_lifecycle(composite)
    for handle in (finished, going):
        assert lifecycle.get_chain_tail("rb_chain", handle.run_id) == before[handle.run_id]
    assert lifecycle.chain_closed("rb_chain", finished.run_id)
    assert not lifecycle.chain_closed("rb_chain", going.run_id)
    assert await finished.result() == "end"
    assert await going.status() == RunStatus.PENDING  # hop 3 is queued, as it was
