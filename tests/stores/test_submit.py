"""Submitting runs: run:init, duplicates, idempotency, delayed starts; reading runs back."""

from __future__ import annotations

from typing import Any

import pytest

from lockgate import (
    DuplicateRunError,
    EventKind,
    IdempotencyConflict,
    InvalidCursorError,
    ManualClock,
    RunStatus,
    Store,
    WaitOutcome,
)

from ._support import NAME, kinds, status

# -- submit and run:init -----------------------------------------------------------------------


def test_submit_returns_the_run_id_and_queues_the_run(store: Store) -> None:
    assert store.submit_run(NAME, "r1", {"n": 1}) == "r1"
    assert status(store, "r1") == RunStatus.PENDING
    assert store.get_pending_count(NAME) == 1


def test_run_info_reports_what_was_submitted(store: Store, clock: ManualClock) -> None:
    store.submit_run(
        NAME,
        "r1",
        {"n": 1, "tags": ["a"]},
        metadata={"team": "blue"},
        owner="alice",
        version="v7",
        version_behavior="auto_upgrade",
    )
    info = store.get_run(NAME, "r1")
    assert info is not None
    assert (info.name, info.run_id, info.status) == (NAME, "r1", RunStatus.PENDING)
    assert info.params == {"n": 1, "tags": ["a"]}
    assert info.metadata == {"team": "blue"}
    assert (info.owner, info.version, info.version_behavior) == ("alice", "v7", "auto_upgrade")
    assert info.submitted_at == clock()
    assert (info.lock_holder, info.wait, info.cancel_requested_at) == (None, None, None)


def test_run_info_convenience_getters(store: Store, clock: ManualClock) -> None:
    store.submit_run(NAME, "r1", {}, owner="bob", version="v2")
    assert store.submitted_at(NAME, "r1") == clock()
    assert store.get_run_owner(NAME, "r1") == "bob"
    assert store.get_run_version(NAME, "r1") == ("v2", "pinned")
    assert store.submitted_at(NAME, "nope") is None
    assert store.get_run_owner(NAME, "nope") is None
    assert store.get_run_version(NAME, "nope") is None


def test_unknown_run_is_none(store: Store) -> None:
    store.submit_run(NAME, "r1", {})
    assert store.get_run(NAME, "nope") is None
    assert store.get_run("other", "r1") is None


def test_run_init_payload_records_the_submit(store: Store, clock: ManualClock) -> None:
    store.submit_run(
        NAME,
        "r1",
        {"n": 1},
        metadata={"m": True},
        owner="alice",
        version="v1",
        version_behavior="pinned",
        concurrency_key="tenant-1",
        concurrency_max=2,
        rate_key="tenant-1",
        rate_per_second=5.0,
        rate_burst=10,
        provenance={"parent": "p1"},
    )
    (init,) = store.load_run(NAME, "r1")
    assert init.kind == EventKind.RUN_INIT
    assert init.run_id == "r1"
    payload = init.payload
    assert payload["name"] == NAME
    assert payload["params"] == {"n": 1}
    assert payload["metadata"] == {"m": True}
    assert (payload["owner"], payload["version"], payload["version_behavior"]) == (
        "alice",
        "v1",
        "pinned",
    )
    assert payload["submitted_at"] == clock()
    assert payload["gates"] == {
        "concurrency": {"key": "tenant-1", "max": 2},
        "rate": {"key": "tenant-1", "per_second": 5.0, "burst": 10},
    }
    assert payload["provenance"] == {"parent": "p1"}


def test_run_init_of_an_ungated_run_has_no_gates(store: Store) -> None:
    store.submit_run(NAME, "r1", {})
    (init,) = store.load_run(NAME, "r1")
    assert init.payload["gates"] == {}
    assert "start_at" not in init.payload


def test_submit_headers_round_trip_on_run_init(store: Store) -> None:
    headers = {"lg-requires": "epochs", "x-trace": "abc-123"}
    store.submit_run(NAME, "r1", {}, headers=headers)
    (init,) = store.load_run(NAME, "r1")
    assert {k: init.headers.get(k) for k in headers} == headers


def test_a_taken_run_id_raises_duplicate_run_and_writes_nothing(store: Store) -> None:
    store.submit_run(NAME, "r1", {"first": True})
    before = store.load_run(NAME, "r1")
    with pytest.raises(DuplicateRunError):
        store.submit_run(NAME, "r1", {"first": False})
    assert store.load_run(NAME, "r1") == before
    assert store.get_run(NAME, "r1").params == {"first": True}  # type: ignore[union-attr]
    assert store.get_pending_count(NAME) == 1


# -- idempotency -------------------------------------------------------------------------------


def test_idempotency_key_repeat_returns_the_first_run(store: Store) -> None:
    first = store.submit_run(NAME, "r1", {}, idempotency_key="k", idempotency_body_hash="h1")
    again = store.submit_run(NAME, "r2", {}, idempotency_key="k", idempotency_body_hash="h1")
    assert (first, again) == ("r1", "r1")
    assert store.get_run(NAME, "r2") is None
    assert store.get_pending_count(NAME) == 1
    assert kinds(store, "r1") == [EventKind.RUN_INIT]


def test_idempotency_key_with_another_body_raises_and_keeps_the_first_run(
    store: Store,
) -> None:
    store.submit_run(NAME, "r1", {"a": 1}, idempotency_key="k", idempotency_body_hash="h1")
    before = store.get_run(NAME, "r1")
    journal = store.load_run(NAME, "r1")
    with pytest.raises(IdempotencyConflict):
        store.submit_run(NAME, "r2", {"a": 2}, idempotency_key="k", idempotency_body_hash="h2")
    assert store.get_run(NAME, "r1") == before
    assert store.load_run(NAME, "r1") == journal
    assert store.get_run(NAME, "r2") is None
    assert store.get_pending_count(NAME) == 1


def test_idempotency_key_expires_after_its_ttl(store: Store, clock: ManualClock) -> None:
    store.submit_run(NAME, "r1", {}, idempotency_key="k", idempotency_ttl=60)
    clock.advance(30)
    assert store.submit_run(NAME, "r2", {}, idempotency_key="k", idempotency_ttl=60) == "r1"
    clock.advance(31)
    assert store.submit_run(NAME, "r3", {}, idempotency_key="k", idempotency_ttl=60) == "r3"
    assert status(store, "r3") == RunStatus.PENDING
    assert store.get_idempotency_run(NAME, "k") == "r3"


def test_idempotency_keys_are_scoped_by_workflow(store: Store) -> None:
    store.submit_run(NAME, "r1", {}, idempotency_key="k")
    assert store.submit_run("other", "r2", {}, idempotency_key="k") == "r2"


def test_submit_records_its_idempotency_key_and_body_hash(store: Store) -> None:
    store.submit_run(NAME, "r1", {}, idempotency_key="k", idempotency_body_hash="h1")
    assert store.get_idempotency_run(NAME, "k") == "r1"
    assert store.get_idempotency_body_hash(NAME, "k") == "h1"
    assert store.get_idempotency_run(NAME, "unused") is None


def test_set_idempotency_run_sets_only_a_free_key_until_it_expires(
    store: Store, clock: ManualClock
) -> None:
    assert store.set_idempotency_run(NAME, "k", "r1", ttl=10) is True
    assert store.set_idempotency_run(NAME, "k", "r2", ttl=10) is False
    assert store.get_idempotency_run(NAME, "k") == "r1"
    clock.advance(11)
    assert store.get_idempotency_run(NAME, "k") is None
    assert store.set_idempotency_run(NAME, "k", "r2", ttl=10) is True
    assert store.get_idempotency_run(NAME, "k") == "r2"


# -- delayed start -----------------------------------------------------------------------------


def test_start_at_in_the_future_parks_the_run_on_a_start_wait(
    store: Store, clock: ManualClock
) -> None:
    start_at = clock() + 120
    store.submit_run(NAME, "r1", {}, start_at=start_at)
    info = store.get_run(NAME, "r1")
    assert info is not None
    assert info.status == RunStatus.SLEEPING
    assert info.wait is not None
    assert (info.wait.kind, info.wait.due_at) == ("start", start_at)
    assert store.get_pending_count(NAME) == 0
    assert store.claim_next_run(NAME, "lease-a") is None
    init = store.load_run(NAME, "r1")[0]
    assert (init.kind, init.payload["start_at"]) == (EventKind.RUN_INIT, start_at)


def test_a_delayed_start_is_claimable_once_woken(store: Store, clock: ManualClock) -> None:
    store.submit_run(NAME, "r1", {}, start_at=clock() + 120)
    assert store.get_sleeping_runs(clock()) == []
    clock.advance(120)
    assert store.get_sleeping_runs(clock()) == [(NAME, "r1")]
    assert store.wake_due(NAME, "r1", due_by=clock()) == WaitOutcome.RESOLVED
    assert kinds(store, "r1")[-1] == EventKind.RUN_WOKEN
    assert status(store, "r1") == RunStatus.PENDING
    assert store.claim_next_run(NAME, "lease-a") == "r1"


def test_start_at_now_or_past_queues_the_run(store: Store, clock: ManualClock) -> None:
    store.submit_run(NAME, "r1", {}, start_at=clock())
    store.submit_run(NAME, "r2", {}, start_at=clock() - 5)
    assert store.get_pending_count(NAME) == 2
    assert status(store, "r1") == status(store, "r2") == RunStatus.PENDING


# -- listing -----------------------------------------------------------------------------------


def submit_series(store: Store, clock: ManualClock, count: int, **kwargs: Any) -> list[str]:
    ids = []
    for index in range(count):
        ids.append(store.submit_run(NAME, f"r{index}", {}, **kwargs))
        clock.advance(1)
    return ids


def test_list_runs_is_newest_first(store: Store, clock: ManualClock) -> None:
    ids = submit_series(store, clock, 3)
    store.submit_run("other", "x", {})
    runs, cursor = store.list_runs(NAME)
    assert [r.run_id for r in runs] == ids[::-1]
    assert cursor is None


def test_list_runs_pages_with_its_cursor(store: Store, clock: ManualClock) -> None:
    ids = submit_series(store, clock, 5)
    seen: list[str] = []
    cursor: str | None = None
    pages = 0
    while True:
        runs, cursor = store.list_runs(NAME, limit=2, cursor=cursor)
        assert len(runs) <= 2
        seen.extend(r.run_id for r in runs)
        pages += 1
        if cursor is None or pages > 10:
            break
    assert seen == ids[::-1]
    assert pages == 3


def test_list_runs_cursor_neither_repeats_nor_skips_when_a_run_is_submitted(
    store: Store, clock: ManualClock
) -> None:
    ids = submit_series(store, clock, 4)
    first, cursor = store.list_runs(NAME, limit=2)
    store.submit_run(NAME, "newest", {})
    second, _ = store.list_runs(NAME, limit=2, cursor=cursor)
    assert [r.run_id for r in first + second] == ids[::-1]


@pytest.mark.parametrize(
    "cursor", ["99999999999999999999999999", "9223372036854775808", "abc", "-1", "1.5", "1,2,x"]
)
def test_list_runs_refuses_a_cursor_it_never_gave_out(
    store: Store, clock: ManualClock, cursor: str
) -> None:
    submit_series(store, clock, 3)
    with pytest.raises(InvalidCursorError):
        store.list_runs(NAME, limit=2, cursor=cursor)


def test_list_runs_filters_by_owner(store: Store, clock: ManualClock) -> None:
    store.submit_run(NAME, "a1", {}, owner="alice")
    clock.advance(1)
    store.submit_run(NAME, "b1", {}, owner="bob")
    clock.advance(1)
    store.submit_run(NAME, "a2", {}, owner="alice")
    runs, cursor = store.list_runs(NAME, owner="alice")
    assert [r.run_id for r in runs] == ["a2", "a1"]
    assert cursor is None
    assert all(r.owner == "alice" for r in runs)


def test_list_runs_of_an_unknown_workflow_is_empty(store: Store) -> None:
    assert store.list_runs("nothing") == ([], None)


def test_list_runs_reports_current_status(store: Store) -> None:
    store.submit_run(NAME, "r1", {})
    store.claim_run(NAME, "r1", "lease-a")
    (info,), _ = store.list_runs(NAME)
    assert (info.status, info.lock_holder) == (RunStatus.IN_PROGRESS, "lease-a")


# -- versions and housekeeping -----------------------------------------------------------------


def test_register_version_ranks_versions_in_order_of_first_sight(store: Store) -> None:
    first = store.register_version(NAME, "v1")
    second = store.register_version(NAME, "v2")
    assert second == first + 1
    assert store.register_version(NAME, "v1") == first
    assert store.version_rank(NAME, "v2") == second
    assert store.version_rank(NAME, "v3") is None


def test_version_ranks_are_per_workflow(store: Store) -> None:
    store.register_version(NAME, "v1")
    store.register_version(NAME, "v2")
    assert store.version_rank("other", "v2") is None
    assert store.register_version("other", "v2") == store.register_version(NAME, "v1")


def test_ping_answers_and_close_is_idempotent(store: Store) -> None:
    store.ping()
    store.close()
    store.close()


def test_a_recorded_workflow_policy_reads_back_and_the_newest_wins(store: Store) -> None:
    assert store.get_workflow_policy(NAME) is None
    first = {"version": "v1", "concurrency": {"key": "tenant_id", "max": 2}, "rate": None}
    store.record_workflow_policy(NAME, first)
    assert store.get_workflow_policy(NAME) == first
    first["concurrency"]["max"] = 99  # the store kept its own copy
    assert store.get_workflow_policy(NAME)["concurrency"]["max"] == 2  # type: ignore[index]
    second = {"version": "v2", "concurrency": None, "rate": {"key": "t", "per_second": 5.0}}
    store.record_workflow_policy(NAME, second)
    assert store.get_workflow_policy(NAME) == second
    assert store.get_workflow_policy("other") is None


def test_run_maintenance_on_a_fresh_store_removes_nothing(store: Store) -> None:
    store.submit_run(NAME, "r1", {})
    assert store.run_maintenance() == 0
    assert status(store, "r1") == RunStatus.PENDING
