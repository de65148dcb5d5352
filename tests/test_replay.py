"""Replay tested like a feature: committed journals that must replay cleanly through today's
body, and journals that must be refused, with the reason named.

Regenerate the clean journals (only when the workflow below changes on purpose) with
``python tests/test_replay.py``.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from lockgate import (
    InlineWorkflowRunner,
    JournalNeedsNewerRuntime,
    ManualClock,
    MemoryStore,
    NonDeterminismError,
    ReplayState,
    RunEvent,
    SchemaVersionMismatch,
    WorkflowContext,
    check_replay,
    reconstruct_state,
    step,
    workflow,
)

JOURNALS = Path(__file__).parent / "journals"


@step(name="replay_fetch")
async def fetch(x: int) -> int:
    return x * 2


@workflow(name="replay_order")
async def replay_order(ctx: WorkflowContext, n: int) -> dict[str, Any]:
    a = await fetch(n)
    stamped = ctx.now().isoformat()
    await ctx.sleep(5)
    ctx.on_query("doubled", lambda: a)
    signal = await ctx.wait_for_signal("go")
    b = await fetch(a)
    return {"a": a, "b": b, "signal": signal, "stamped": stamped}


def load(path: Path) -> list[RunEvent]:
    return [RunEvent.from_json(line) for line in path.read_text().splitlines() if line.strip()]


def journals(folder: str) -> list[Path]:
    return sorted((JOURNALS / folder).glob("*.jsonl"))


@pytest.mark.parametrize("folder", ["clean", "refused", "nondeterministic"])
def test_journal_folders_hold_journals(folder: str) -> None:
    assert journals(folder), f"tests/journals/{folder} is empty; run python tests/test_replay.py"


@pytest.mark.parametrize("path", journals("clean"), ids=lambda p: p.stem)
async def test_clean_journal_replays_through_todays_body(path: Path) -> None:
    events = load(path)
    state = await check_replay(replay_order, events)
    assert state.run_id == events[0].run_id
    assert state.event_count == len(events)
    assert state.calls[0].done
    assert state.calls[0].result == 2 * state.params["n"]


@pytest.mark.parametrize("path", journals("clean"), ids=lambda p: p.stem)
def test_events_round_trip_through_json(path: Path) -> None:
    for event in load(path):
        assert RunEvent.from_json(event.to_json()) == event


REFUSED = {
    "unknown_event_kind": (JournalNeedsNewerRuntime, "event kind run:teleported"),
    "unknown_step_kind": (JournalNeedsNewerRuntime, "step kind quantum"),
    "newer_schema": (SchemaVersionMismatch, "schema_version 2"),
    "required_feature": (JournalNeedsNewerRuntime, "feature sealed-inboxes"),
}


@pytest.mark.parametrize("path", journals("refused"), ids=lambda p: p.stem)
def test_unreadable_journal_is_refused_before_folding(path: Path) -> None:
    error_type, missing = REFUSED[path.stem]
    state = ReplayState()
    with pytest.raises(error_type) as caught:
        reconstruct_state(load(path), state=state)
    assert missing in caught.value.missing
    assert missing in str(caught.value)
    assert state.event_count == 0
    assert state.calls == {}
    assert state.init == {}


async def test_journal_of_an_older_body_is_refused_as_nondeterministic() -> None:
    (path,) = journals("nondeterministic")
    with pytest.raises(NonDeterminismError) as caught:
        await check_replay(replay_order, load(path))
    assert caught.value.call_index == 0
    assert "replay_fetch_v0" in caught.value.expected
    assert "replay_fetch" in caught.value.actual
    assert "call 0" in str(caught.value)


async def test_a_body_that_stopped_early_is_refused() -> None:
    @workflow(name="replay_order_truncated")
    async def truncated(ctx: WorkflowContext, n: int) -> dict[str, Any]:
        return {"a": await fetch(n)}

    (path,) = [p for p in journals("clean") if "complete" in p.stem]
    events = [
        RunEvent(e.kind, {**e.payload, "name": "replay_order_truncated"}, e.run_id)
        if e.kind == "run:init"
        else e
        for e in load(path)
    ]
    with pytest.raises(NonDeterminismError, match="no longer makes"):
        await check_replay(truncated, events)


def _event(kind: str, payload: dict[str, Any], epoch: int | None = None) -> RunEvent:
    headers = {"lg-epoch": str(epoch)} if epoch is not None else {}
    return RunEvent(kind, payload, "r1", headers=headers)


def test_fold_drops_events_of_a_stale_epoch_and_stops_at_the_terminal() -> None:
    init = _event("run:init", {"name": "w", "params": {}})
    done = {"kind": "named", "step_id": "s"}
    events = [
        init,
        _event("step:done", {**done, "call_index": 0, "result": "first holder"}, epoch=1),
        _event("step:done", {**done, "call_index": 1, "result": "new holder"}, epoch=2),
        _event("step:done", {**done, "call_index": 1, "result": "stale holder"}, epoch=1),
        _event(
            "run:signal_received",
            {
                "call_index": 2,
                "wait_id": "w",
                "signal": "go",
                "payload": {"v": 1},
                "signal_id": "s1",
            },
        ),
        _event("run:complete", {"result": 1}, epoch=2),
        _event("step:done", {**done, "call_index": 3, "result": "after the end"}, epoch=2),
    ]
    state = reconstruct_state(events)
    assert state.calls[1].result == "new holder"
    assert state.dropped_stale == 1
    assert state.highest_epoch == 2
    assert state.calls[2].payload == {"v": 1}
    assert state.terminal is not None
    assert state.terminal.kind == "run:complete"
    assert 3 not in state.calls


def test_custom_event_kinds_outside_reserved_prefixes_are_readable() -> None:
    events = [_event("run:init", {"name": "w", "params": {}}), _event("billing.note", {"x": 1})]
    assert reconstruct_state(events).event_count == 2


async def _generate() -> None:
    clock = ManualClock()
    store = MemoryStore(clock=clock)
    runner = InlineWorkflowRunner(store=store, clock=clock)
    (JOURNALS / "clean").mkdir(parents=True, exist_ok=True)

    def dump(path: Path, events: list[RunEvent]) -> None:
        path.write_text("".join(e.to_json() + "\n" for e in events))

    parked = await runner.client.submit("replay_order", {"n": 3})
    await runner.run("replay_order", parked.run_id)
    clock.advance(6)
    await runner.fire_due_timers()
    await runner.run("replay_order", parked.run_id)
    dump(JOURNALS / "clean" / "replay_order_parked_on_signal.jsonl", await parked.events())

    done = await runner.client.submit("replay_order", {"n": 7})
    await done.signal("go", {"by": "ops"}, signal_id="go-1")
    await runner.run("replay_order", done.run_id)
    clock.advance(6)
    await runner.fire_due_timers()
    await runner.run("replay_order", done.run_id)
    complete = await done.events()
    dump(JOURNALS / "clean" / "replay_order_complete.jsonl", complete)

    (JOURNALS / "nondeterministic").mkdir(exist_ok=True)
    renamed = [
        RunEvent(
            e.kind,
            {**e.payload, "step_id": "replay_fetch_v0"},
            e.run_id,
            e.schema_version,
            e.run_seq,
            e.headers,
        )
        if e.payload.get("step_id") == "replay_fetch" and e.payload.get("call_index") == 0
        else e
        for e in complete
    ]
    dump(JOURNALS / "nondeterministic" / "replay_order_renamed_first_step.jsonl", renamed)

    (JOURNALS / "refused").mkdir(exist_ok=True)
    init, rest = complete[0], complete[1:]
    odd = {
        "unknown_event_kind": [init, RunEvent("run:teleported", {"to": "mars"}, init.run_id)],
        "unknown_step_kind": [
            init,
            RunEvent(
                "step:done", {"call_index": 0, "kind": "quantum", "step_id": "q"}, init.run_id
            ),
        ],
        "newer_schema": [init, RunEvent("step:done", rest[1].payload, init.run_id, "2")],
        "required_feature": [
            RunEvent(
                init.kind,
                init.payload,
                init.run_id,
                headers={"lg-requires": "epochs,sealed-inboxes"},
            ),
            *rest,
        ],
    }
    for stem, events in odd.items():
        dump(JOURNALS / "refused" / f"{stem}.jsonl", events)
    print(json.dumps({"written": str(JOURNALS)}))


if __name__ == "__main__":
    asyncio.run(_generate())
