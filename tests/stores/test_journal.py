"""The journal: run_seq numbering, fenced appends and epochs, the terminal rule, reads."""

from __future__ import annotations

from typing import Any

import pytest

from lockgate import (
    EventAfterTerminal,
    EventKind,
    LockLost,
    ManualClock,
    RunEvent,
    Store,
)
from lockgate.journal._events import EPOCH_HEADER

from ._support import NAME, claimed, event, kinds
from .conftest import LOCK_TTL


def epoch_of(e: RunEvent) -> int:
    return int(e.headers[EPOCH_HEADER])


def step_done(run_id: str, index: int) -> RunEvent:
    return event(EventKind.STEP_DONE, run_id, call_index=index, result=index)


# -- numbering and reads -----------------------------------------------------------------------


def test_submit_journals_run_init_as_run_seq_1(store: Store) -> None:
    store.submit_run(NAME, "r1", {"a": 1})
    journal = store.load_run(NAME, "r1")
    assert [(e.kind, e.run_seq, e.run_id) for e in journal] == [(EventKind.RUN_INIT, 1, "r1")]


def test_run_seq_counts_from_1_without_gaps_across_appends(store: Store) -> None:
    claimed(store)
    store.append_event(NAME, "r1", step_done("r1", 0), fence="lease-a")
    store.append_event(NAME, "r1", event("test:note", "r1", n=1))
    store.append_events(NAME, "r1", [step_done("r1", 1), step_done("r1", 2)], fence="lease-a")
    assert [e.run_seq for e in store.load_run(NAME, "r1")] == [1, 2, 3, 4, 5]


def test_run_seq_is_counted_per_run(store: Store) -> None:
    claimed(store, "r1")
    claimed(store, "r2", lease="lease-b")
    store.append_event(NAME, "r1", step_done("r1", 0), fence="lease-a")
    store.append_event(NAME, "r2", step_done("r2", 0), fence="lease-b")
    assert [e.run_seq for e in store.load_run(NAME, "r1")] == [1, 2]
    assert [e.run_seq for e in store.load_run(NAME, "r2")] == [1, 2]


def test_batch_append_keeps_its_order(store: Store) -> None:
    claimed(store)
    batch = [step_done("r1", i) for i in range(4)]
    store.append_events(NAME, "r1", batch, fence="lease-a")
    journal = store.load_run(NAME, "r1")
    assert [e.payload["call_index"] for e in journal[1:]] == [0, 1, 2, 3]


def test_event_fields_round_trip(store: Store) -> None:
    claimed(store)
    payload = {
        "text": "grüße ✓",
        "int": 2**40,
        "float": 1.5,
        "none": None,
        "flag": False,
        "list": [1, "two", {"three": [3]}],
        "nested": {"a": {"b": {"c": []}}},
    }
    sent = RunEvent(kind="step:done", payload=payload, run_id="r1", headers={"x-trace": "t-1"})
    store.append_event(NAME, "r1", sent)
    got = store.load_run(NAME, "r1")[-1]
    assert (got.kind, got.payload, got.run_id) == ("step:done", payload, "r1")
    assert got.schema_version == sent.schema_version
    assert got.headers.get("x-trace") == "t-1"


def test_a_kind_outside_the_core_set_round_trips(store: Store) -> None:
    claimed(store)
    store.append_event(NAME, "r1", event("orders:shipped", "r1", box=7), fence="lease-a")
    last = store.get_last_event(NAME, "r1")
    assert last is not None
    assert (last.kind, last.payload) == ("orders:shipped", {"box": 7})


def test_unknown_run_has_an_empty_journal_and_no_last_event(store: Store) -> None:
    assert store.load_run(NAME, "nope") == []
    assert store.get_last_event(NAME, "nope") is None


def test_journals_are_scoped_by_workflow_name(store: Store) -> None:
    store.submit_run(NAME, "r1", {})
    assert store.load_run("other", "r1") == []


def test_get_last_event_is_the_newest(store: Store) -> None:
    claimed(store)
    store.append_events(NAME, "r1", [step_done("r1", 0), step_done("r1", 1)], fence="lease-a")
    last = store.get_last_event(NAME, "r1")
    assert last is not None
    assert (last.run_seq, last.payload["call_index"]) == (3, 1)


def test_load_run_returns_at_most_max_events_oldest_first(store: Store) -> None:
    claimed(store)
    store.append_events(NAME, "r1", [step_done("r1", i) for i in range(4)], fence="lease-a")
    assert [e.run_seq for e in store.load_run(NAME, "r1", max_events=2)] == [1, 2]


def test_load_run_with_max_events_zero_returns_nothing(store: Store) -> None:
    claimed(store)
    store.append_events(NAME, "r1", [step_done("r1", i) for i in range(3)], fence="lease-a")
    assert store.load_run(NAME, "r1", max_events=0) == []


def test_replay_run_pages_after_its_cursor(store: Store) -> None:
    claimed(store)
    store.append_events(NAME, "r1", [step_done("r1", i) for i in range(4)], fence="lease-a")
    seen: list[int] = []
    cursor: Any = None
    for _ in range(10):
        page, cursor = store.replay_run(NAME, "r1", cursor=cursor, count=2)
        seen.extend(e.run_seq or 0 for e in page)
        if cursor is None:
            break
    assert seen == [1, 2, 3, 4, 5]
    rest, _ = store.replay_run(NAME, "r1", cursor=3)
    assert [e.run_seq for e in rest] == [4, 5]


def test_read_entries_from_continues_from_its_cursor(store: Store) -> None:
    claimed(store)
    store.append_events(NAME, "r1", [step_done("r1", i) for i in range(4)], fence="lease-a")
    first, cursor = store.read_entries_from(NAME, "r1", None, 3)
    assert [e.run_seq for _, e in first] == [1, 2, 3]
    assert cursor is not None
    second, _ = store.read_entries_from(NAME, "r1", cursor, 10)
    assert [e.run_seq for _, e in second] == [4, 5]
    entry_ids = [entry_id for entry_id, _ in first + second]
    assert len(set(entry_ids)) == 5


def test_journal_keeps_what_was_appended_when_the_caller_mutates_its_payload(
    store: Store,
) -> None:
    claimed(store)
    result = {"items": [1, 2]}
    store.append_event(NAME, "r1", event(EventKind.STEP_DONE, "r1", result=result))
    result["items"].append(3)
    result["extra"] = True
    assert store.load_run(NAME, "r1")[-1].payload == {"result": {"items": [1, 2]}}


def test_mutating_a_loaded_event_does_not_change_the_journal(store: Store) -> None:
    claimed(store)
    store.append_event(NAME, "r1", event(EventKind.STEP_DONE, "r1", result={"n": 1}))
    loaded = store.load_run(NAME, "r1")[-1]
    loaded.payload["result"]["n"] = 99
    assert store.load_run(NAME, "r1")[-1].payload == {"result": {"n": 1}}


# -- fencing and epochs ------------------------------------------------------------------------


def test_fenced_appends_within_one_claim_carry_one_epoch(store: Store) -> None:
    claimed(store)
    store.append_event(NAME, "r1", step_done("r1", 0), fence="lease-a")
    store.append_events(NAME, "r1", [step_done("r1", 1), step_done("r1", 2)], fence="lease-a")
    epochs = {epoch_of(e) for e in store.load_run(NAME, "r1")[1:]}
    assert len(epochs) == 1


def test_each_new_claim_raises_the_epoch(store: Store, clock: ManualClock) -> None:
    claimed(store, lease="lease-a")
    store.append_event(NAME, "r1", step_done("r1", 0), fence="lease-a")
    store.release_run(NAME, "r1", "lease-a")
    assert store.claim_next_run(NAME, "lease-b") == "r1"
    store.append_event(NAME, "r1", step_done("r1", 1), fence="lease-b")
    clock.advance(LOCK_TTL + 1)
    store.claim_run(NAME, "r1", "lease-c")
    store.append_event(NAME, "r1", step_done("r1", 2), fence="lease-c")
    store.release_run(NAME, "r1", "lease-c")
    store.claim_run(NAME, "r1", "lease-c")
    store.append_event(NAME, "r1", step_done("r1", 3), fence="lease-c")
    steps = [e for e in store.load_run(NAME, "r1") if e.kind == EventKind.STEP_DONE]
    epochs = [epoch_of(e) for e in steps]
    assert len(epochs) == 4
    assert epochs == sorted(set(epochs))


def test_claim_run_reasserted_by_its_lease_keeps_the_epoch(store: Store) -> None:
    claimed(store)
    store.append_event(NAME, "r1", step_done("r1", 0), fence="lease-a")
    store.claim_run(NAME, "r1", "lease-a")
    store.append_event(NAME, "r1", step_done("r1", 1), fence="lease-a")
    first, second = store.load_run(NAME, "r1")[1:]
    assert epoch_of(first) == epoch_of(second)


def test_fenced_append_stamps_the_claims_epoch_over_a_forged_one(store: Store) -> None:
    claimed(store)
    store.append_event(NAME, "r1", step_done("r1", 0), fence="lease-a")
    forged = RunEvent("step:done", {"call_index": 1}, "r1", headers={EPOCH_HEADER: "999999"})
    store.append_event(NAME, "r1", forged, fence="lease-a")
    honest, stamped = store.load_run(NAME, "r1")[1:]
    assert epoch_of(stamped) == epoch_of(honest)


def test_unfenced_append_carries_no_epoch(store: Store) -> None:
    claimed(store)
    store.append_event(NAME, "r1", event("run:signal_received", "r1", signal="go"))
    assert EPOCH_HEADER not in store.load_run(NAME, "r1")[-1].headers


def test_unfenced_append_succeeds_while_another_lease_holds_the_run(store: Store) -> None:
    claimed(store)
    store.append_event(NAME, "r1", event("test:note", "r1"))
    assert kinds(store, "r1") == [EventKind.RUN_INIT, "test:note"]


def test_fenced_append_by_another_lease_raises_lock_lost_and_writes_nothing(
    store: Store,
) -> None:
    claimed(store, lease="lease-a")
    before = store.load_run(NAME, "r1")
    with pytest.raises(LockLost):
        store.append_event(NAME, "r1", step_done("r1", 0), fence="lease-b")
    assert store.load_run(NAME, "r1") == before
    assert store.lock_holder(NAME, "r1") == "lease-a"


def test_fenced_append_to_a_run_never_claimed_raises_lock_lost(store: Store) -> None:
    store.submit_run(NAME, "r1", {})
    with pytest.raises(LockLost):
        store.append_event(NAME, "r1", step_done("r1", 0), fence="lease-a")
    assert kinds(store, "r1") == [EventKind.RUN_INIT]


def test_fenced_append_by_an_expired_lease_raises_lock_lost(
    store: Store, clock: ManualClock
) -> None:
    claimed(store)
    clock.advance(LOCK_TTL + 1)
    with pytest.raises(LockLost):
        store.append_event(NAME, "r1", step_done("r1", 0), fence="lease-a")
    assert kinds(store, "r1") == [EventKind.RUN_INIT]


def test_fenced_append_by_a_released_lease_raises_lock_lost(store: Store) -> None:
    claimed(store)
    store.release_run(NAME, "r1", "lease-a")
    with pytest.raises(LockLost):
        store.append_event(NAME, "r1", step_done("r1", 0), fence="lease-a")
    assert kinds(store, "r1") == [EventKind.RUN_INIT]


def test_stale_lease_is_refused_after_another_claims_the_run(
    store: Store, clock: ManualClock
) -> None:
    claimed(store, lease="lease-a")
    clock.advance(LOCK_TTL + 1)
    store.claim_run(NAME, "r1", "lease-b")
    before = store.load_run(NAME, "r1")
    with pytest.raises(LockLost):
        store.append_events(NAME, "r1", [step_done("r1", 0)], fence="lease-a")
    assert store.load_run(NAME, "r1") == before
    store.append_event(NAME, "r1", step_done("r1", 0), fence="lease-b")
    assert kinds(store, "r1")[-1] == EventKind.STEP_DONE
    assert kinds(store, "r1").count(EventKind.STEP_DONE) == 1


def test_a_stale_batch_is_refused_whole(store: Store, clock: ManualClock) -> None:
    claimed(store, lease="lease-a")
    clock.advance(LOCK_TTL + 1)
    store.claim_run(NAME, "r1", "lease-b")
    before = store.load_run(NAME, "r1")
    with pytest.raises(LockLost):
        store.append_events(NAME, "r1", [step_done("r1", i) for i in range(3)], fence="lease-a")
    assert store.load_run(NAME, "r1") == before
    assert EventKind.STEP_DONE not in kinds(store, "r1")


# -- the terminal rule -------------------------------------------------------------------------


def test_batch_ending_in_a_terminal_commits(store: Store) -> None:
    claimed(store)
    store.append_events(
        NAME, "r1", [step_done("r1", 0), event(EventKind.RUN_COMPLETE, "r1")], fence="lease-a"
    )
    assert kinds(store, "r1") == [EventKind.RUN_INIT, EventKind.STEP_DONE, EventKind.RUN_COMPLETE]


@pytest.mark.parametrize("terminal", [EventKind.RUN_COMPLETE, EventKind.RUN_ERROR, "run:continued"])
def test_fenced_append_after_a_terminal_raises_event_after_terminal(
    store: Store, terminal: str
) -> None:
    claimed(store)
    store.append_event(NAME, "r1", event(terminal, "r1", code="boom"), fence="lease-a")
    before = store.load_run(NAME, "r1")
    with pytest.raises(EventAfterTerminal) as raised:
        store.append_event(NAME, "r1", step_done("r1", 0), fence="lease-a")
    assert isinstance(raised.value, LockLost)
    assert store.load_run(NAME, "r1") == before


def test_unfenced_append_after_a_terminal_raises_event_after_terminal(store: Store) -> None:
    claimed(store)
    store.append_event(NAME, "r1", event(EventKind.RUN_COMPLETE, "r1"), fence="lease-a")
    with pytest.raises(EventAfterTerminal):
        store.append_event(NAME, "r1", event("run:signal_received", "r1"))
    with pytest.raises(EventAfterTerminal):
        store.append_event(NAME, "r1", event(EventKind.RUN_COMPLETE, "r1"))
    assert kinds(store, "r1") == [EventKind.RUN_INIT, EventKind.RUN_COMPLETE]


@pytest.mark.parametrize("fence", ["lease-a", None], ids=["fenced", "unfenced"])
def test_batch_with_an_event_behind_its_own_terminal_is_refused_whole(
    store: Store, fence: str | None
) -> None:
    claimed(store)
    batch = [step_done("r1", 0), event(EventKind.RUN_COMPLETE, "r1"), step_done("r1", 1)]
    with pytest.raises(EventAfterTerminal):
        store.append_events(NAME, "r1", batch, fence=fence)
    assert kinds(store, "r1") == [EventKind.RUN_INIT]
    assert not store.get_run(NAME, "r1").status.is_terminal  # type: ignore[union-attr]
    store.append_event(NAME, "r1", step_done("r1", 0), fence="lease-a")
    assert [e.run_seq for e in store.load_run(NAME, "r1")] == [1, 2]


def test_a_terminal_append_drops_the_lock_and_the_release_after_it_is_a_no_op(
    store: Store,
) -> None:
    claimed(store)
    complete = event(EventKind.RUN_COMPLETE, "r1", result=1)
    store.append_events(NAME, "r1", [complete], fence="lease-a")
    assert store.lock_holder(NAME, "r1") is None
    store.release_run(NAME, "r1", "lease-a")
    assert store.get_pending_count(NAME) == 0
    assert [e.kind for e in store.load_run(NAME, "r1")][-1] == EventKind.RUN_COMPLETE
