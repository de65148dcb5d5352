"""Flow-control gates at claim time: Limit slots, Rate tokens, no head-of-line blocking, and
fair rotation across owners and keys."""

from __future__ import annotations

from typing import Any

import pytest

from lockgate import EventKind, ManualClock, RunGatedError, RunStatus, Store
from lockgate.stores import WaitOutcome, WaitSpec
from lockgate.stores._types import Claims

from ._support import NAME, event, status


def submit(store: Store, run_id: str, **gates: Any) -> str:
    return store.submit_run(NAME, run_id, {}, **gates)


def limited(store: Store, run_id: str, key: str = "acme", limit: int = 2, **more: Any) -> str:
    return submit(store, run_id, concurrency_key=key, concurrency_max=limit, **more)


def rated(
    store: Store,
    run_id: str,
    key: str = "acme",
    per_second: float = 1.0,
    burst: int = 2,
    **more: Any,
) -> str:
    return submit(store, run_id, rate_key=key, rate_per_second=per_second, rate_burst=burst, **more)


def finish(store: Store, run_id: str, lease: str) -> None:
    store.append_events(NAME, run_id, [event(EventKind.RUN_COMPLETE, run_id)], fence=lease)


def claim(store: Store, lease: str) -> str | None:
    return store.claim_next_run(NAME, lease)


def test_a_limit_lets_max_runs_of_a_key_execute_and_keeps_the_rest_queued(store: Store) -> None:
    for n in range(4):
        limited(store, f"a{n}")
    assert [claim(store, f"l{n}") for n in range(3)] == ["a0", "a1", None]
    assert status(store, "a2") == RunStatus.PENDING
    assert store.get_pending_count(NAME) == 2
    finish(store, "a0", "l0")
    assert claim(store, "l3") == "a2"
    assert claim(store, "l4") is None


def test_a_full_key_does_not_block_the_runs_of_other_keys_behind_it(store: Store) -> None:
    limited(store, "a0", limit=1)
    limited(store, "a1", limit=1)
    limited(store, "b0", key="globex", limit=1)
    submit(store, "free")
    assert claim(store, "l0") == "a0"
    claimed = {claim(store, "l1"), claim(store, "l2")}
    assert claimed == {"b0", "free"}
    assert claim(store, "l3") is None
    assert status(store, "a1") == RunStatus.PENDING


def test_a_parked_run_frees_its_slot_and_needs_one_again_when_woken(
    store: Store, clock: ManualClock
) -> None:
    limited(store, "a0", limit=1)
    limited(store, "a1", limit=1)
    assert claim(store, "l0") == "a0"
    wait = WaitSpec("sleep", "sleep:0", 0, due_at=clock() + 10)
    assert store.park_run(NAME, "a0", lease="l0", events=[], wait=wait) == WaitOutcome.PARKED
    assert claim(store, "l1") == "a1"
    clock.advance(10)
    assert store.wake_due(NAME, "a0", due_by=clock()) == WaitOutcome.RESOLVED
    assert claim(store, "l2") is None  # woken, but a1 holds the only slot
    finish(store, "a1", "l1")
    assert claim(store, "l3") == "a0"


def test_a_lapsed_lease_keeps_its_slot_until_the_run_is_recovered(
    store: Store, clock: ManualClock
) -> None:
    limited(store, "a0", limit=1)
    limited(store, "a1", limit=1)
    assert claim(store, "l0") == "a0"
    clock.advance(60)  # the holder may be frozen, still running: its slot is not given away
    assert claim(store, "l1") is None
    assert store.recover_pending_runs(NAME) == ["a0"]
    assert claim(store, "l2") in {"a0", "a1"}


def test_a_rate_spends_one_token_per_claim_and_refills_over_time(
    store: Store, clock: ManualClock
) -> None:
    for n in range(5):
        rated(store, f"r{n}", per_second=2.0, burst=2)
    assert [claim(store, f"l{n}") for n in range(3)] == ["r0", "r1", None]
    clock.advance(0.5)
    assert claim(store, "l3") == "r2"
    assert claim(store, "l4") is None
    clock.advance(10)  # the bucket refills to its burst, no more
    assert [claim(store, f"m{n}") for n in range(3)] == ["r3", "r4", None]


def test_a_claim_the_limit_refuses_spends_no_rate_token(store: Store) -> None:
    for n in range(2):
        limited(store, f"x{n}", limit=1, rate_key="acme", rate_per_second=0.0001, rate_burst=2)
    assert claim(store, "l0") == "x0"  # one token left
    assert claim(store, "l1") is None  # refused by the Limit: the token stays
    finish(store, "x0", "l0")
    assert claim(store, "l2") == "x1"  # the token left is there to spend


def test_claim_run_passes_the_gates_or_raises_and_leaves_the_run_queued(store: Store) -> None:
    limited(store, "a0", limit=1)
    limited(store, "a1", limit=1)
    store.claim_run(NAME, "a0", "l0")
    with pytest.raises(RunGatedError, match="Limit"):
        store.claim_run(NAME, "a1", "l1")
    assert status(store, "a1") == RunStatus.PENDING
    assert store.get_pending_count(NAME) == 1
    store.claim_run(NAME, "a0", "l0")  # re-asserting its own claim takes no slot
    finish(store, "a0", "l0")
    store.claim_run(NAME, "a1", "l1")
    assert store.lock_holder(NAME, "a1") == "l1"


def test_claims_rotate_across_owners(store: Store) -> None:
    for n in range(6):
        submit(store, f"big{n}", owner="bigco")
    for n in range(2):
        submit(store, f"small{n}", owner="smallco")
    order = [claim(store, f"l{n}") for n in range(8)]
    assert order[:4] == ["big0", "small0", "big1", "small1"]
    assert order[4:] == ["big2", "big3", "big4", "big5"]


def test_claims_rotate_across_gate_keys(store: Store) -> None:
    for n in range(3):
        limited(store, f"a{n}", key="acme", limit=10)
    limited(store, "b0", key="globex", limit=10)
    assert [claim(store, f"l{n}") for n in range(4)] == ["a0", "b0", "a1", "a2"]


def test_the_gates_are_stamped_in_run_init(store: Store) -> None:
    limited(store, "a0", limit=3, rate_key="acme", rate_per_second=5.0, rate_burst=10)
    init = store.load_run(NAME, "a0")[0]
    assert init.payload["gates"] == {
        "concurrency": {"key": "acme", "max": 3},
        "rate": {"key": "acme", "per_second": 5.0, "burst": 10},
    }


def test_runs_sharing_a_limit_key_but_not_a_rate_key_do_not_hold_each_other_up(
    store: Store,
) -> None:
    both = {"concurrency_key": "acme", "concurrency_max": 5, "rate_per_second": 0.0001}
    submit(store, "eu0", rate_key="eu", rate_burst=1, **both)
    submit(store, "eu1", rate_key="eu", rate_burst=1, **both)
    submit(store, "us0", rate_key="us", rate_burst=1, **both)
    assert claim(store, "l0") == "eu0"  # eu's only token
    assert claim(store, "l1") == "us0"  # eu1 is refused, us0 is not held up behind it
    assert claim(store, "l2") is None


def test_runs_stamped_with_a_different_max_do_not_hold_each_other_up(store: Store) -> None:
    limited(store, "old0", limit=1)
    limited(store, "old1", limit=1)
    limited(store, "new0", limit=3)
    assert claim(store, "l0") == "old0"
    assert claim(store, "l1") == "new0"  # under max=3, one slot taken: it may start
    assert claim(store, "l2") is None


# -- why a queued run waits --------------------------------------------------------------------


def test_explain_wait_names_a_full_limit_and_the_place_in_line(store: Store) -> None:
    for n in range(5):
        limited(store, f"a{n}", limit=2)
    claim(store, "l0")
    claim(store, "l1")
    reason = store.explain_wait(NAME, "a4")
    assert reason is not None
    assert (reason.gate, reason.key, reason.running, reason.max) == ("limit", "acme", 2, 2)
    assert reason.position == 3
    assert reason.describe("tenant_id") == 'Limit tenant_id="acme" 2/2 running, 3rd in line'
    assert store.explain_wait(NAME, "a2").position == 1  # type: ignore[union-attr]
    assert store.explain_wait(NAME, "a0") is None  # running, not queued


def test_explain_wait_says_when_the_next_token_comes(store: Store, clock: ManualClock) -> None:
    for n in range(3):
        rated(store, f"r{n}", per_second=4.0, burst=1)
    assert claim(store, "l0") == "r0"
    clock.advance(0.1)
    reason = store.explain_wait(NAME, "r1")
    assert reason is not None
    assert reason.gate == "rate"
    assert reason.next_token_in == pytest.approx(0.15)
    assert reason.describe() == 'Rate "acme" next token in 0.15s, 1st in line'


def test_explain_wait_of_an_ungated_run_says_it_waits_for_a_worker(store: Store) -> None:
    submit(store, "free")
    reason = store.explain_wait(NAME, "free")
    assert reason is not None
    assert reason.describe() == "a worker to claim it, 1st in line"


# -- when the next token comes, with the claim that found none ---------------------------------


def claims(store: Store, *leases: str) -> Claims:
    return store.claim_next_runs_loaded(NAME, list(leases))


def test_a_claim_a_rate_refuses_says_when_its_next_token_comes(
    store: Store, clock: ManualClock
) -> None:
    for n in range(3):
        rated(store, f"r{n}", per_second=4.0, burst=1)
    first = claims(store, "l0", "l1")  # one token: the second lease comes back empty
    assert [run.run_id for run in first] == ["r0"]
    assert first.next_token_in == pytest.approx(0.25, abs=1e-4)
    clock.advance(0.1)
    empty = claims(store, "l2")
    assert list(empty) == []
    assert empty.next_token_in == pytest.approx(0.15, abs=1e-4)
    clock.advance(0.149)  # a millisecond short of the token
    early = claims(store, "l3")
    assert list(early) == []
    assert early.next_token_in == pytest.approx(0.001, abs=1e-4)
    clock.advance(early.next_token_in)  # exactly as long as it said
    assert [run.run_id for run in claims(store, "l4")] == ["r1"]


def test_the_losers_of_a_race_for_a_token_are_told_when_the_next_one_comes(
    store: Store, clock: ManualClock
) -> None:
    for n in range(3):
        rated(store, f"r{n}", per_second=50.0, burst=1)
    first = claims(store, "w0", "w0.b")
    assert [run.run_id for run in first] == ["r0"]
    assert first.next_token_in is not None
    clock.advance(first.next_token_in)  # the next token is here; three workers ask at once
    answers = [claims(store, f"w{n}.a") for n in range(1, 4)]
    assert [len(answer) for answer in answers] == [1, 0, 0]
    for lost in answers[1:]:
        assert lost.next_token_in == pytest.approx(0.02, abs=1e-4)


def test_the_soonest_token_of_the_refused_keys_is_the_one_reported(
    store: Store, clock: ManualClock
) -> None:
    rated(store, "slow0", key="slow", per_second=1.0, burst=1)
    rated(store, "slow1", key="slow", per_second=1.0, burst=1)
    rated(store, "fast0", key="fast", per_second=10.0, burst=1)
    rated(store, "fast1", key="fast", per_second=10.0, burst=1)
    assert sorted(run.run_id for run in claims(store, "a", "b", "c")) == ["fast0", "slow0"]
    answer = claims(store, "d")
    assert answer.next_token_in == pytest.approx(0.1, abs=1e-4)
    clock.advance(answer.next_token_in)
    assert [run.run_id for run in claims(store, "e")] == ["fast1"]


def test_no_token_time_when_no_refused_run_waits_on_a_token(store: Store) -> None:
    assert claims(store, "l0").next_token_in is None  # nothing queued
    rated(store, "r0", per_second=1.0, burst=2)
    rated(store, "r1", per_second=1.0, burst=2)
    full = claims(store, "l1", "l2")
    assert len(full) == 2
    assert full.next_token_in is None  # every lease got a run
    limited(store, "a0", limit=1)
    limited(store, "a1", limit=1)
    assert [run.run_id for run in claims(store, "l3", "l4")] == ["a0"]
    refused = claims(store, "l5")
    assert list(refused) == []
    assert refused.next_token_in is None  # a Limit frees a slot at no set time


def test_a_claim_tens_of_microseconds_short_of_a_token_is_refused(
    store: Store, clock: ManualClock
) -> None:
    """The bucket keeps its times to the microsecond: one stored to a tenth of a millisecond
    (an epoch time cut to 14 digits) would let this claim pass 20 us early."""
    for n in range(2):
        rated(store, f"r{n}", per_second=50.0, burst=1)
    clock.advance(0.00004)
    assert claim(store, "l0") == "r0"
    clock.advance(0.01998)  # 20 us short of the token
    assert claim(store, "l1") is None
    clock.advance(0.00003)
    assert claim(store, "l2") == "r1"
