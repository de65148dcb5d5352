"""Collect and Debounce buffers in the store: an event is buffered atomically, a batch is taken
together with the submit of its run, and every event ends up in exactly one run."""

from __future__ import annotations

from typing import Any

import pytest

from lockgate import CompositeStore, ManualClock, Store, ValkeyStore
from lockgate.journal import EventKind
from lockgate.stores import BatchToFire, Gates, TriggerPolicy

from ._support import NAME

COLLECT = TriggerPolicy("collect", window_seconds=60, max_events=3, version="v1")
DEBOUNCE = TriggerPolicy("debounce", window_seconds=10)
CAPPED = TriggerPolicy("debounce", window_seconds=10, max_wait_seconds=25)


def params(store: Store, run_id: str) -> dict[str, Any]:
    info = store.get_run(NAME, run_id)
    assert info is not None, f"no run {run_id}"
    return info.params


def test_a_collect_batch_fires_with_its_max_events_th_event(store: Store) -> None:
    assert store.trigger_event(NAME, "u1", {"n": 1}, policy=COLLECT) is None
    assert store.trigger_event(NAME, "u2", {"n": 9}, policy=COLLECT) is None
    assert store.trigger_event(NAME, "u1", {"n": 2}, policy=COLLECT) is None
    run_id = store.trigger_event(NAME, "u1", {"n": 3}, policy=COLLECT)
    assert run_id is not None
    assert params(store, run_id) == {
        "key": "u1",
        "events": [{"n": 1}, {"n": 2}, {"n": 3}],
        "count": 3,
    }
    assert store.get_run_version(NAME, run_id) == ("v1", "auto_upgrade")
    assert store.get_pending_count(NAME) == 1
    assert store.trigger_event(NAME, "u1", {"n": 4}, policy=COLLECT) is None  # a new batch


def test_a_collect_window_fires_what_it_has_when_it_ends(store: Store, clock: ManualClock) -> None:
    store.trigger_event(NAME, "u1", {"n": 1}, policy=COLLECT)
    clock.advance(30)
    store.trigger_event(NAME, "u1", {"n": 2}, policy=COLLECT)  # does not move the window
    clock.advance(29)
    assert store.due_triggers(NAME, clock()) == []
    assert store.fire_trigger(NAME, "u1", policy=COLLECT, due_by=clock()) is None
    clock.advance(1)
    assert store.due_triggers(NAME, clock()) == ["u1"]
    run_id = store.fire_trigger(NAME, "u1", policy=COLLECT, due_by=clock())
    assert run_id is not None
    assert params(store, run_id)["count"] == 2
    assert store.fire_trigger(NAME, "u1", policy=COLLECT, due_by=clock()) is None  # once
    assert store.due_triggers(NAME, clock() + 10**6) == []


def test_a_debounce_fires_once_its_key_goes_quiet(store: Store, clock: ManualClock) -> None:
    for n in range(4):
        store.trigger_event(NAME, "k", {"n": n}, policy=DEBOUNCE)
        clock.advance(9)  # each event restarts the quiet period
        assert store.due_triggers(NAME, clock()) == []
    clock.advance(1)
    assert store.due_triggers(NAME, clock()) == ["k"]
    run_id = store.fire_trigger(NAME, "k", policy=DEBOUNCE, due_by=clock())
    assert run_id is not None
    assert [e["n"] for e in params(store, run_id)["events"]] == [0, 1, 2, 3]


def test_max_wait_fires_a_key_that_never_goes_quiet(store: Store, clock: ManualClock) -> None:
    fired: list[str] = []
    for n in range(10):
        store.trigger_event(NAME, "busy", {"n": n}, policy=CAPPED)
        clock.advance(5)
        for key in store.due_triggers(NAME, clock()):
            run_id = store.fire_trigger(NAME, key, policy=CAPPED, due_by=clock())
            assert run_id is not None
            fired.append(run_id)
    # Each batch fires 25 s after its first event, although events keep coming every 5 s.
    assert len(fired) == 2
    assert [e["n"] for e in params(store, fired[0])["events"]] == [0, 1, 2, 3, 4]
    assert [e["n"] for e in params(store, fired[1])["events"]] == [5, 6, 7, 8, 9]


def test_two_firers_racing_on_one_due_buffer_fire_it_once(store: Store, clock: ManualClock) -> None:
    store.trigger_event(NAME, "k", {"n": 1}, policy=DEBOUNCE)
    clock.advance(10)
    first = store.fire_trigger(NAME, "k", policy=DEBOUNCE, due_by=clock())
    second = store.fire_trigger(NAME, "k", policy=DEBOUNCE, due_by=clock())
    assert first is not None
    assert second is None
    assert store.get_pending_count(NAME) == 1


def test_a_fired_run_carries_its_gates_and_a_distinct_id_per_batch(
    store: Store, clock: ManualClock
) -> None:
    gated = TriggerPolicy(
        "collect",
        window_seconds=60,
        max_events=1,
        gates=Gates(concurrency_key="u1", concurrency_max=1),
    )
    first = store.trigger_event(NAME, "u1", {"n": 1}, policy=gated)
    second = store.trigger_event(NAME, "u1", {"n": 2}, policy=gated)
    assert first is not None
    assert second is not None
    assert first != second
    init = store.load_run(NAME, first)[0]
    assert init.payload["gates"] == {"concurrency": {"key": "u1", "max": 1}}
    assert init.payload["provenance"]["trigger"]["key"] == "u1"
    assert store.claim_next_run(NAME, "l0") == first
    assert store.claim_next_run(NAME, "l1") is None  # the Limit on "key" holds the second


def test_next_trigger_due_is_the_soonest_buffer_due_after_a_time(
    store: Store, clock: ManualClock
) -> None:
    now = clock()
    assert store.next_trigger_due(NAME, now) is None
    store.trigger_event(NAME, "a", {"n": 1}, policy=DEBOUNCE)  # due at now + 10
    clock.advance(3)
    store.trigger_event(NAME, "b", {"n": 1}, policy=COLLECT)  # due at now + 63
    store.trigger_event("other", "c", {"n": 1}, policy=DEBOUNCE)  # another workflow's
    assert store.next_trigger_due(NAME, clock()) == pytest.approx(now + 10)
    store.trigger_event(NAME, "a", {"n": 2}, policy=DEBOUNCE)  # the quiet period restarts
    assert store.next_trigger_due(NAME, clock()) == pytest.approx(now + 13)
    assert store.next_trigger_due(NAME, now + 13) == pytest.approx(now + 63)
    clock.advance(10)
    assert store.fire_trigger(NAME, "a", policy=DEBOUNCE, due_by=clock()) is not None
    assert store.next_trigger_due(NAME, now) == pytest.approx(now + 63)  # a fired one is gone
    assert store.next_trigger_due("other", now) == pytest.approx(now + 13)


# -- batches buffered outside the store (trigger topics), and their fired-through marks -------

SOURCE = "app.trigger.digest/3"


def test_a_batch_fired_from_outside_is_submitted_and_moves_its_keys_mark(store: Store) -> None:
    assert store.fired_through(NAME, SOURCE, {"u1": COLLECT}) == {}
    fired = store.fire_batch(
        NAME, "u1", [{"n": 1}, {"n": 2}], policy=COLLECT, source=SOURCE, first=10, last=14
    )
    assert fired.run_id is not None
    assert fired.fired_through == 14
    assert params(store, fired.run_id) == {
        "key": "u1",
        "events": [{"n": 1}, {"n": 2}],
        "count": 2,
    }
    trigger = store.load_run(NAME, fired.run_id)[0].payload["provenance"]["trigger"]
    assert trigger == {"key": "u1", "mode": "collect", "first": 10, "last": 14, "source": SOURCE}
    assert store.get_run_version(NAME, fired.run_id) == ("v1", "auto_upgrade")
    assert store.fired_through(NAME, SOURCE, {"u1": COLLECT, "u2": COLLECT}) == {"u1": 14}
    assert store.fired_through(NAME, "app.trigger.digest/4", {"u1": COLLECT}) == {}
    assert store.fired_through("other", SOURCE, {"u1": COLLECT}) == {}


def test_a_repeated_fire_is_the_same_run_and_a_stale_one_submits_nothing(store: Store) -> None:
    first = store.fire_batch(NAME, "u1", [{"n": 1}], policy=COLLECT, source=SOURCE, first=0, last=4)
    again = store.fire_batch(NAME, "u1", [{"n": 1}], policy=COLLECT, source=SOURCE, first=0, last=4)
    assert first.run_id is not None
    assert again.run_id == first.run_id
    assert store.get_pending_count(NAME) == 1
    # Another consumer re-read from offset 2 and buffered 2..7: offsets up to 4 are taken.
    stale = store.fire_batch(
        NAME, "u1", [{"n": 2}, {"n": 3}], policy=COLLECT, source=SOURCE, first=2, last=7
    )
    assert stale.run_id is None
    assert stale.fired_through == 4
    assert store.get_pending_count(NAME) == 1
    rest = store.fire_batch(NAME, "u1", [{"n": 3}], policy=COLLECT, source=SOURCE, first=7, last=7)
    assert rest.run_id not in (None, first.run_id)
    assert rest.fired_through == 7
    assert store.get_pending_count(NAME) == 2


def test_a_batchs_run_id_names_its_source_and_positions(store: Store) -> None:
    ids = {
        store.fire_batch(
            NAME, "u1", [{"n": 1}], policy=COLLECT, source=source, first=0, last=0
        ).run_id
        for source in ("t/0", "t/1")
    }
    ids.add(
        store.fire_batch(
            NAME, "u2", [{"n": 1}], policy=COLLECT, source="t/0", first=0, last=0
        ).run_id
    )
    buffered = store.trigger_event(NAME, "u3", {"n": 1}, policy=COLLECT)
    assert None not in ids
    assert len(ids) == 3
    assert buffered is None  # a store-kept buffer is its own thing
    assert store.get_pending_count(NAME) == 3


def test_a_fired_batchs_run_takes_its_gates(store: Store) -> None:
    gated = TriggerPolicy(
        "debounce", window_seconds=1, gates=Gates(concurrency_key="u1", concurrency_max=1)
    )
    one = store.fire_batch(NAME, "u1", [{"n": 1}], policy=gated, source=SOURCE, first=0, last=0)
    two = store.fire_batch(NAME, "u1", [{"n": 2}], policy=gated, source=SOURCE, first=1, last=1)
    assert store.fired_through(NAME, SOURCE, {"u1": gated}) == {"u1": 1}
    assert store.claim_next_run(NAME, "l0") in (one.run_id, two.run_id)
    assert store.claim_next_run(NAME, "l1") is None  # the Limit on "key" holds the other


def test_marks_below_a_sources_oldest_kept_position_are_forgotten(store: Store) -> None:
    for key, last in (("u1", 4), ("u2", 9), ("u3", 15)):
        store.fire_batch(
            NAME, key, [{"n": 1}], policy=COLLECT, source=SOURCE, first=last, last=last
        )
    store.fire_batch(NAME, "u1", [{"n": 1}], policy=COLLECT, source="other/0", first=1, last=1)
    keys = {"u1": COLLECT, "u2": COLLECT, "u3": COLLECT}
    assert store.forget_marks(NAME, SOURCE, 10) == 2  # u1 at 4 and u2 at 9: never read again
    assert store.fired_through(NAME, SOURCE, keys) == {"u3": 15}
    assert store.fired_through(NAME, "other/0", {"u1": COLLECT}) == {"u1": 1}  # another source
    assert store.forget_marks(NAME, SOURCE, 10) == 0


def batch(key: str, first: int, last: int, source: str = SOURCE, **event: Any) -> BatchToFire:
    return BatchToFire(key, [{"n": first, **event}], COLLECT, source, first, last)


def test_batches_fired_together_answer_as_fired_one_by_one_in_their_order(store: Store) -> None:
    fired = store.fire_batches(
        NAME,
        [
            batch("u1", 0, 4),
            batch("u2", 0, 0),
            batch("u1", 0, 4),  # a repeat within the call: the same run
            batch("u1", 2, 7),  # another owner's stale batch: no run, the mark
            batch("u1", 7, 7),  # what the mark left of it
            batch("u3", 5, 5, source="other/1"),
        ],
    )
    assert [f.fired_through for f in fired] == [4, 0, 4, 4, 7, 5]
    first, u2, again, stale, rest, u3 = (f.run_id for f in fired)
    assert None not in (first, u2, rest, u3)
    assert rest is not None
    assert again == first
    assert stale is None
    # A backend that says what a fire put in its new run's journal says it as the store keeps
    # it (a repeat, a stale fire made nothing).
    if isinstance(store, ValkeyStore | CompositeStore):  # Valkey says it (fire_batches.lua)
        assert [bool(one.opened) for one in fired] == [True, True, False, False, True, True]
    assert not fired[2].opened
    assert not fired[3].opened
    for one in fired:
        if one.opened:
            assert one.run_id is not None
            assert list(one.opened) == store.load_run(NAME, one.run_id)[: len(one.opened)]
    assert len({first, u2, rest, u3}) == 4
    assert store.get_pending_count(NAME) == 4
    assert params(store, rest) == {"key": "u1", "events": [{"n": 7}], "count": 1}
    assert store.fired_through(NAME, SOURCE, {"u1": COLLECT, "u2": COLLECT, "u3": COLLECT}) == {
        "u1": 7,
        "u2": 0,
    }
    assert store.fired_through(NAME, "other/1", {"u3": COLLECT}) == {"u3": 5}
    # Each run is the one fire_batch makes of the same batch: a later single fire repeats it.
    one = store.fire_batch(NAME, "u1", [{"n": 7}], policy=COLLECT, source=SOURCE, first=7, last=7)
    assert one.run_id == rest
    assert store.fire_batches(NAME, []) == []
    assert store.get_pending_count(NAME) == 4


def test_batches_fired_together_take_their_gates_and_land_in_their_shards(store: Store) -> None:
    gated = TriggerPolicy(
        "debounce", window_seconds=1, gates=Gates(concurrency_key="g", concurrency_max=1)
    )
    keys = [f"k{n}" for n in range(12)]  # spread over the shards, where a store has some
    fired = store.fire_batches(
        NAME,
        [BatchToFire(key, [{"key": key}], COLLECT, SOURCE, n, n) for n, key in enumerate(keys)]
        + [BatchToFire("u1", [{"n": 1}], gated, SOURCE, 20, 20)]
        + [BatchToFire("u2", [{"n": 2}], gated, SOURCE, 21, 21)],
    )
    ids = [f.run_id for f in fired]
    assert None not in ids
    for key, run_id in zip(keys, ids, strict=False):
        assert run_id is not None
        assert params(store, run_id)["events"] == [{"key": key}]
    assert store.get_pending_count(NAME) == 14
    claimed = {store.claim_next_run(NAME, f"l{n}") for n in range(16)} - {None}
    assert len(claimed) == 13
    assert claimed <= set(ids)
    assert len(claimed & set(ids[-2:])) == 1  # the Limit on "g" holds one of the gated two


def test_a_batch_fired_together_whose_run_latches_a_held_cancel_journals_the_cancel(
    store: Store,
) -> None:
    # A cancel asked for the id a batch's run will have (ids are derived from the batch) is
    # latched when the fire makes the run: the run's journal holds it, and a backend that says
    # what a fire wrote does not say the opening events alone (a composite copies the outbox).
    held_id, _ = COLLECT.submit(NAME, "u1", [{"n": 1}], 1, 1, SOURCE)
    store.request_cancel(NAME, held_id, detail={"reason": "not wanted"})
    fired = store.fire_batches(NAME, [batch("u1", 1, 1), batch("u2", 2, 2)])
    held, plain = fired
    assert held.run_id == held_id
    assert not held.opened
    if isinstance(store, ValkeyStore | CompositeStore):
        assert plain.opened
    kinds = [e.kind for e in store.load_run(NAME, held_id)]
    assert kinds[0] == EventKind.RUN_INIT
    assert EventKind.RUN_CANCEL in kinds
    assert store.get_run_controls(NAME, held_id)[0] is not None
