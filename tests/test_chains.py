"""``ctx.continue_as_new``: a run ends ``run:continued`` and its successor carries the work on,
with its own params and gates, taking over the run's undelivered signals, updates and
controls; any id of the chain resolves to its live run in a constant number of reads."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from lockgate import (
    ContinuationChainError,
    DurableInvocationError,
    EventKind,
    InlineWorkflowRunner,
    InvalidParamsError,
    Limit,
    ManualClock,
    MemoryStore,
    RunEvent,
    RunFinishedError,
    RunHandle,
    RunStatus,
    WorkflowClient,
    WorkflowContext,
    workflow,
)
from lockgate.client import resolve_continuation
from lockgate.runs._chains import live_run
from lockgate.stores import ChainLink, Gates, chain_link

Drive = Callable[..., Awaitable[RunStatus]]


@workflow(name="chain_counter")
async def counter(ctx: WorkflowContext, total: int = 0, hop: int = 0, hops: int = 3) -> Any:
    """Adds every ``add`` signal it receives, one per hop, continuing until ``hops``."""
    if hop == hops:
        return {"total": total, "hop": hop}
    got = await ctx.wait_for_signal("add")
    await ctx.continue_as_new({"total": total + int(got["n"]), "hop": hop + 1, "hops": hops})


@workflow(name="chain_plain", concurrency=Limit(key="tenant", max=1))
async def plain(ctx: WorkflowContext, tenant: str, left: int) -> Any:
    if left == 0:
        return tenant
    await ctx.continue_as_new({"tenant": f"{tenant}+", "left": left - 1})


async def to_end(drive: Drive, handle: RunHandle, client: WorkflowClient) -> RunStatus:
    """Drive a chain from ``handle`` until its live run comes to rest."""
    for _ in range(200):
        tail, _ = await live_run(client.store, handle.name, handle.run_id)
        status = await drive(client.handle(handle.name, tail))
        if status != RunStatus.CONTINUED:
            return status
    raise AssertionError("the chain did not come to rest")


async def test_a_chain_carries_its_work_on_and_answers_from_the_root_id(
    client: WorkflowClient, drive: Drive, store: MemoryStore
) -> None:
    handle = await client.submit("chain_counter", {"hops": 3})
    for n in (1, 2, 3):
        await handle.signal("add", {"n": n}, signal_id=f"s{n}")
        assert await to_end(drive, handle, client) in (RunStatus.SIGNAL_WAITING, RunStatus.COMPLETE)
    assert await handle.result() == {"total": 6, "hop": 3}
    assert await handle.status() == RunStatus.COMPLETE
    own = await handle.events()  # the root's own journal, not followed
    assert own[-1].kind == EventKind.RUN_CONTINUED
    assert own[-1].payload["run_id"] == f"{handle.run_id}.c1"
    assert own[-1].payload["reason"] == "continue_as_new"
    last = store.load_run("chain_counter", f"{handle.run_id}.c3")
    assert last[0].payload["params"] == {"total": 6, "hop": 3, "hops": 3}
    source = last[0].payload["provenance"]["source"]
    assert source == {
        "continued_from": f"{handle.run_id}.c2",
        "chain_root_name": "chain_counter",
        "chain_root_run_id": handle.run_id,
        "chain_hop": 3,
    }
    assert store.get_chain_tail("chain_counter", handle.run_id) == ChainLink(
        "chain_counter", f"{handle.run_id}.c3", "chain_counter", handle.run_id, 3
    )
    assert store.chain_closed("chain_counter", handle.run_id)


async def test_signals_buffered_before_the_hop_move_to_the_successor_once(
    client: WorkflowClient, drive: Drive
) -> None:
    handle = await client.submit("chain_counter", {"hops": 3})
    for n in (10, 20, 30):
        await handle.signal("add", {"n": n}, signal_id=f"s{n}")
    assert await to_end(drive, handle, client) == RunStatus.COMPLETE
    assert await handle.result() == {"total": 60, "hop": 3}
    with pytest.raises(RunFinishedError):  # sent to the root id: the chain's end answers
        await handle.signal("add", {"n": 1})


async def test_a_repeated_send_id_is_applied_once_across_hops(
    client: WorkflowClient, drive: Drive
) -> None:
    handle = await client.submit("chain_counter", {"hops": 2})
    await handle.signal("add", {"n": 1}, signal_id="same")
    assert await handle.signal("add", {"n": 1}, signal_id="same") == "duplicate"
    await handle.signal("add", {"n": 5}, signal_id="other")
    assert await to_end(drive, handle, client) == RunStatus.COMPLETE
    assert await handle.result() == {"total": 6, "hop": 2}


async def test_the_successor_is_stamped_with_its_own_gates(
    client: WorkflowClient, drive: Drive, store: MemoryStore
) -> None:
    handle = await client.submit("chain_plain", {"tenant": "t", "left": 2})
    assert await to_end(drive, handle, client) == RunStatus.COMPLETE
    assert await handle.result() == "t++"
    second = store.load_run("chain_plain", f"{handle.run_id}.c2")[0]
    assert second.payload["gates"] == {"concurrency": {"key": "t++", "max": 1}}


@workflow(name="chain_bad_params")
async def bad_params(ctx: WorkflowContext, n: int) -> Any:
    try:
        await ctx.continue_as_new({"n": "not a number"})
    except InvalidParamsError as exc:
        return f"refused: {exc.parameter}"


async def test_bad_successor_params_are_refused_at_the_call_and_nothing_continues(
    client: WorkflowClient, drive: Drive, store: MemoryStore
) -> None:
    handle = await client.submit("chain_bad_params", {"n": 1})
    assert await drive(handle) == RunStatus.COMPLETE
    assert await handle.result() == "refused: n"
    assert store.get_run("chain_bad_params", f"{handle.run_id}.c1") is None


async def test_a_runner_that_rejects_continue_as_new_fails_the_run(
    store: MemoryStore, clock: ManualClock
) -> None:
    runner = InlineWorkflowRunner(store=store, clock=clock, reject_continue_as_new=True)
    handle = await runner.client.submit("chain_plain", {"tenant": "x", "left": 1})
    await runner.run(handle.name, handle.run_id)
    assert await handle.status() == RunStatus.ERROR
    with pytest.raises(DurableInvocationError, match="reject_continue_as_new"):
        await handle.result()
    assert store.get_run("chain_plain", f"{handle.run_id}.c1") is None


class CountingStore(MemoryStore):
    """A MemoryStore counting the reads a resolve makes."""

    reads = 0

    def get_last_event(self, name: str, run_id: str) -> Any:
        self.reads += 1
        return super().get_last_event(name, run_id)

    def get_chain_tail(self, root_name: str, root_run_id: str) -> Any:
        self.reads += 1
        return super().get_chain_tail(root_name, root_run_id)

    def load_run(self, name: str, run_id: str, *, max_events: int | None = None) -> Any:
        self.reads += 1
        return super().load_run(name, run_id, max_events=max_events)


async def test_resolving_costs_the_same_reads_at_hop_3_and_hop_60(clock: ManualClock) -> None:
    counted: dict[int, tuple[int, int]] = {}
    for hops in (3, 60):
        store = CountingStore(clock=clock)
        runner = InlineWorkflowRunner(store=store, clock=clock)
        handle = await runner.client.submit("chain_plain", {"tenant": "r", "left": hops})
        tail = handle.run_id
        for _ in range(hops + 1):
            await runner.run("chain_plain", tail)
            last = store.get_last_event("chain_plain", tail)
            if last is None or last.kind != EventKind.RUN_CONTINUED:
                break
            tail = last.payload["run_id"]
        store.reads = 0
        assert resolve_continuation(store, "chain_plain", handle.run_id)[1] == tail
        from_root = store.reads
        store.reads = 0
        middle = f"{handle.run_id}.c2"
        assert resolve_continuation(store, "chain_plain", middle)[1] == tail
        counted[hops] = (from_root, store.reads)
    assert counted[3] == counted[60] == (3, 5)


async def test_a_plain_run_resolves_in_one_read(clock: ManualClock) -> None:
    store = CountingStore(clock=clock)
    runner = InlineWorkflowRunner(store=store, clock=clock)
    handle = await runner.client.submit("chain_plain", {"tenant": "p", "left": 0})
    await runner.run(handle.name, handle.run_id)
    store.reads = 0
    name, run_id, last = resolve_continuation(store, handle.name, handle.run_id)
    assert (name, run_id, store.reads) == (handle.name, handle.run_id, 1)
    assert last is not None
    assert last.kind == EventKind.RUN_COMPLETE


async def test_a_record_behind_the_chain_is_followed_on(clock: ManualClock) -> None:
    store = MemoryStore(clock=clock)
    runner = InlineWorkflowRunner(store=store, clock=clock)
    handle = await runner.client.submit("chain_plain", {"tenant": "b", "left": 2})
    await runner.run(handle.name, handle.run_id)
    await runner.run(handle.name, f"{handle.run_id}.c1")
    # As if the worker died between ending hop 1 and moving the record: put it back.
    store._chains.clear()
    store.advance_chain_tail(
        ChainLink("chain_plain", f"{handle.run_id}.c1", "chain_plain", handle.run_id, 1)
    )
    assert resolve_continuation(store, handle.name, handle.run_id)[1] == f"{handle.run_id}.c2"


def test_the_tail_record_only_moves_forward() -> None:
    store = MemoryStore()
    root = ChainLink.root("w", "r")
    third = ChainLink("w", "r.c3", "w", "r", 3)
    store.advance_chain_tail(third)
    store.advance_chain_tail(root.successor("w", "r.c1"))
    assert store.get_chain_tail("w", "r") == third
    store.close_chain(root.successor("w", "r.c1"))
    assert not store.chain_closed("w", "r")
    store.close_chain(third)
    assert store.chain_closed("w", "r")
    assert store.get_chain_tail("w", "r") == third


def test_a_link_reads_back_from_its_payload_and_json() -> None:
    link = ChainLink("w", "r.c2", "w", "r", 2)
    assert ChainLink.from_continued_payload(link.continued_payload()) == link
    assert ChainLink.from_json(link.to_json()) == link
    assert chain_link(None, "w", "r") == ChainLink.root("w", "r")
    with pytest.raises(ContinuationChainError, match="hop"):
        ChainLink.from_continued_payload(
            {"name": "w", "run_id": "x", "root_name": "w", "root_run_id": "r"}
        )
    with pytest.raises(ContinuationChainError):
        ChainLink.from_json("[1]")


async def test_a_chain_whose_record_is_gone_is_walked_hop_by_hop(clock: ManualClock) -> None:
    """A tail record lost (a store that keeps none, or one that expired) costs one read per
    hop, however long the chain: it still resolves."""
    store = MemoryStore(clock=clock)
    runner = InlineWorkflowRunner(store=store, clock=clock)
    handle = await runner.client.submit("chain_plain", {"tenant": "w", "left": 120})
    tail = handle.run_id
    for _ in range(121):
        await runner.run("chain_plain", tail)
        last = store.get_last_event("chain_plain", tail)
        assert last is not None
        if last.kind != EventKind.RUN_CONTINUED:
            break
        tail = last.payload["run_id"]
    store._chains.clear()
    assert resolve_continuation(store, "chain_plain", handle.run_id)[1] == tail
    assert tail == f"{handle.run_id}.c120"


def test_links_whose_hop_does_not_increase_are_refused(store: MemoryStore) -> None:
    """A journal whose run:continued names an earlier hop (corrupt, or links in a loop)
    fails loud instead of being followed round for ever."""
    for run_id, successor, hop in (("a", "a.c1", 1), ("a.c1", "a", 0)):
        store.submit_run("w", run_id, {})
        store.claim_run("w", run_id, "lease")
        link = ChainLink("w", successor, "w", "a", hop)
        store.append_events(
            "w",
            run_id,
            [RunEvent(EventKind.RUN_CONTINUED, link.continued_payload(), run_id)],
            fence="lease",
        )
    with pytest.raises(ContinuationChainError) as raised:
        resolve_continuation(store, "w", "a")
    assert raised.value.reason == "hop_not_increasing"


async def test_runs_show_names_the_run_a_run_continued_as(
    client: WorkflowClient, drive: Drive, store: MemoryStore
) -> None:
    from lockgate._output import run_fields

    handle = await client.submit("chain_plain", {"tenant": "s", "left": 1})
    assert await to_end(drive, handle, client) == RunStatus.COMPLETE
    info = store.get_run("chain_plain", handle.run_id)
    assert info is not None
    shown = run_fields(info, store.load_run("chain_plain", handle.run_id), 0.0, 5)
    assert f"continued as  {handle.run_id}.c1 (continue_as_new, hop 1)" in shown


class ReadCounter:
    """A view of a store counting the reads a resolve makes through it."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store
        self.reads = 0

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.store, name)
        if name not in ("get_last_event", "get_chain_tail", "load_run"):
            return method

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.reads += 1
            return method(*args, **kwargs)

        return counted


@workflow(name="chain_regated")
async def regated(ctx: WorkflowContext, hop: int = 0) -> Any:
    if hop < 3:
        await ctx.continue_as_new({"hop": hop + 1})
    return await ctx.wait_for_signal("done")


@pytest.mark.parametrize("handed_on", ["root", "hop"])
async def test_a_run_handed_on_to_new_gates_keeps_its_place_in_the_chain(
    client: WorkflowClient, drive: Drive, store: MemoryStore, handed_on: str
) -> None:
    """A deploy that changes a workflow's gates hands its queued runs on (``hand_on_run``):
    the successor takes the run's place in its chain, so the chain goes on resolving from the
    id callers hold, in the same few reads."""
    handle = await client.submit("chain_regated", {})
    regated_id = handle.run_id if handed_on == "root" else f"{handle.run_id}.c1"
    if handed_on == "hop":
        assert await drive(handle) == RunStatus.CONTINUED
    store.claim_run("chain_regated", regated_id, "new-deploy")
    version = store.load_run("chain_regated", regated_id)[0].payload["version"]
    store.hand_on_run(
        "chain_regated",
        regated_id,
        "new-deploy",
        f"{regated_id}.g",
        version=version,
        version_behavior="auto_upgrade",
        gates=Gates(concurrency_key="new", concurrency_max=5),
    )
    assert await to_end(drive, handle, client) == RunStatus.SIGNAL_WAITING
    tail, _ = await live_run(client.store, "chain_regated", handle.run_id)
    assert tail == f"{handle.run_id}.c3"
    counted = ReadCounter(store)
    assert resolve_continuation(counted, "chain_regated", handle.run_id)[1] == tail
    assert counted.reads == 3  # from the root: its last event, the tail record, the tail's
    await handle.signal("done", {"ok": True})
    assert await to_end(drive, handle, client) == RunStatus.COMPLETE
    assert await handle.result() == {"ok": True}


@workflow(name="chain_updates")
async def chain_updates(ctx: WorkflowContext, total: int = 0, hop: int = 0) -> Any:
    state = {"total": total}

    def add(payload: dict[str, Any]) -> int:
        state["total"] += int(payload["n"])
        return state["total"]

    ctx.on_update("add", add)
    await ctx.wait_for_signal("next")
    if hop == 1:
        return state["total"]
    await ctx.continue_as_new({"total": state["total"], "hop": hop + 1})


async def test_an_update_retried_after_the_run_continued_is_applied_once(
    client: WorkflowClient, drive: Drive
) -> None:
    handle = await client.submit("chain_updates", {})
    assert await drive(handle) == RunStatus.SIGNAL_WAITING
    assert await handle.update("add", {"n": 5}, update_id="u1") == 5
    await handle.signal("next", signal_id="n1")
    assert await to_end(drive, handle, client) == RunStatus.SIGNAL_WAITING  # hop 1 waits
    # The sender did not see the first answer and retries: the settled outcome, once.
    assert await handle.update("add", {"n": 5}, update_id="u1") == 5
    await handle.signal("next", signal_id="n2")
    assert await to_end(drive, handle, client) == RunStatus.COMPLETE
    assert await handle.result() == 5
