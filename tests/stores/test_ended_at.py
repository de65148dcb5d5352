"""``RunInfo.ended_at``: when a run ended, on the store's clock (what the console's durations
are made of); None while it is live."""

from __future__ import annotations

from lockgate import EventKind, ManualClock, Store

from ._support import NAME, claimed, event


def test_a_run_reports_when_it_ended(store: Store, clock: ManualClock) -> None:
    run_id = claimed(store)
    listed, _ = store.list_runs(NAME)
    assert [i.ended_at for i in listed] == [None]
    info = store.get_run(NAME, run_id)
    assert info is not None
    assert info.ended_at is None
    clock.advance(7.0)
    ended_at = clock()
    store.append_event(NAME, run_id, event(EventKind.RUN_COMPLETE, run_id), fence="lease-a")
    info = store.get_run(NAME, run_id)
    assert info is not None
    assert info.ended_at is not None
    assert abs(info.ended_at - ended_at) < 1e-3
    listed, _ = store.list_runs(NAME)
    assert listed[0].ended_at == info.ended_at
