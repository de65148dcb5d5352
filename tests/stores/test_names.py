"""Workflow names and run ids as keys: any two (name, id) pairs are two runs, however their
characters line up (``billing:eu``/``42`` and ``billing``/``eu:42`` share no state on any
backend), and names or ids the rules refuse are refused at the store's boundary with nothing
written.

Runs here on every backend of the suite, and on a Valkey store with several shards, whose
run -> shard index and timers join names and ids into one member."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from lockgate import (
    DuplicateRunError,
    EventKind,
    InvalidNameError,
    ManualClock,
    RunStatus,
    Store,
    TerminateOutcome,
)
from lockgate.stores import TriggerPolicy, ValkeyStore
from valkey_server import shared_url

from .conftest import LOCK_TTL, STORE_FACTORIES, StoreFactory


def _sharded(clock: ManualClock, tmp_path: Path) -> Store:
    return ValkeyStore(
        shared_url(),
        namespace=f"n{uuid.uuid4().hex[:12]}",
        clock=clock,
        lock_ttl=LOCK_TTL,
        shard_count=4,
        retry_attempts=0,
    )


FACTORIES = [*STORE_FACTORIES, StoreFactory("valkey-sharded", _sharded)]


@pytest.fixture(params=FACTORIES, ids=lambda factory: factory.id)
def store(request: pytest.FixtureRequest, clock: ManualClock, tmp_path: Path) -> Iterator[Store]:
    factory: StoreFactory = request.param
    backend = factory.make(clock, tmp_path)
    yield backend
    backend.close()


#: Pairs whose name and id, joined with ``:`` (or cut at a brace), read the same.
LOOKALIKES: list[tuple[tuple[str, str], tuple[str, str]]] = [
    (("billing:eu", "42"), ("billing", "eu:42")),
    (("a:b:c", "d"), ("a", "b:c:d")),
    (("x{y}", "1"), ("x", "{y}1")),
    (("t}{", "{1}"), ("t", "}{:{1}")),
    (("a/b", "c d"), ("a", "b/c d")),
    (("café:ü", "1"), ("café", "ü:1")),
    (("7#ab", "c"), ("7", "#ab:c")),
    (("2#ab", "1#c"), ("2#ab:1#c", "0")),
]
RUNS = sorted({run for pair in LOOKALIKES for run in pair})


def test_names_and_ids_that_read_alike_are_separate_runs(store: Store) -> None:
    for n, (name, run_id) in enumerate(RUNS):
        assert store.submit_run(name, run_id, {"n": n}) == run_id
    for n, (name, run_id) in enumerate(RUNS):
        info = store.get_run(name, run_id)
        assert info is not None, (name, run_id)
        assert (info.name, info.run_id, info.params) == (name, run_id, {"n": n})
        journal = store.load_run(name, run_id)
        assert [e.kind for e in journal] == [EventKind.RUN_INIT]
        assert journal[0].payload["params"] == {"n": n}
        ids = sorted(i.run_id for i in store.list_runs(name)[0])
        assert ids == [r for m, r in RUNS if m == name]
        assert store.get_pending_count(name) == len(ids)


@pytest.mark.parametrize(("first", "second"), LOOKALIKES, ids=lambda pair: "/".join(pair))
def test_a_lookalike_is_neither_a_duplicate_nor_touched_by_its_twin(
    store: Store, first: tuple[str, str], second: tuple[str, str]
) -> None:
    store.submit_run(*first, {"who": "first"})
    assert store.get_run(*second) is None
    assert store.terminate_run(*second) == TerminateOutcome.NOT_FOUND
    assert store.submit_run(*second, {"who": "second"}) == second[1]  # not a duplicate
    with pytest.raises(DuplicateRunError):
        store.submit_run(*first, {})

    assert store.terminate_run(*first) == TerminateOutcome.TERMINATED
    other = store.get_run(*second)
    assert other is not None
    assert (other.status, other.params) == (RunStatus.PENDING, {"who": "second"})
    assert [e.kind for e in store.load_run(*second)] == [EventKind.RUN_INIT]
    assert store.claim_next_run(second[0], "lease-b") == second[1]
    assert store.claim_next_run(first[0], "lease-a") is None


@pytest.mark.parametrize(("first", "second"), LOOKALIKES[:4], ids=lambda pair: "/".join(pair))
def test_signals_updates_and_controls_reach_only_their_run(
    store: Store, first: tuple[str, str], second: tuple[str, str]
) -> None:
    for run in (first, second):
        store.submit_run(*run, {})
    store.send_signal(*first, "go", {"to": "first"}, "t", idempotency_key="s:1")
    assert store.peek_signal(*second, "go") is None
    assert store.send_signal(*second, "go", {}, "t", idempotency_key="s:1") == "buffered"
    store.deliver_update(*first, "bump", {}, "u:1", "t")
    assert store.peek_pending_updates(*second) == []
    store.request_cancel(*first)
    assert store.poll_run(*second).cancel_requested_at is None
    store.request_pause(*second)
    assert store.poll_run(*first).pause_requested_at is None


@pytest.mark.parametrize(("first", "second"), LOOKALIKES[:4], ids=lambda pair: "/".join(pair))
def test_ids_not_yet_submitted_hold_their_own_controls(
    store: Store, first: tuple[str, str], second: tuple[str, str]
) -> None:
    store.request_cancel(*first)
    store.submit_run(*second, {})
    assert store.poll_run(*second).cancel_requested_at is None
    store.submit_run(*first, {})
    assert store.poll_run(*first).cancel_requested_at is not None


def test_gate_keys_that_read_alike_count_apart(store: Store) -> None:
    """Limit slots and Rate buckets are kept per (workflow, key): ``a:b``'s key ``c`` and
    ``a``'s key ``b:c`` are two keys."""
    store.submit_run("a:b", "1", {}, concurrency_key="c", concurrency_max=1)
    store.submit_run("a", "1", {}, concurrency_key="b:c", concurrency_max=1)
    assert store.claim_next_run("a:b", "lease-1") == "1"
    assert store.claim_next_run("a", "lease-2") == "1"
    store.submit_run("r:s", "1", {}, rate_key="t", rate_per_second=0.001, rate_burst=1)
    store.submit_run("r", "1", {}, rate_key="s:t", rate_per_second=0.001, rate_burst=1)
    assert store.claim_next_run("r:s", "lease-3") == "1"
    assert store.claim_next_run("r", "lease-4") == "1"


def test_owners_and_gate_keys_that_read_alike_are_separate_fairness_buckets(
    store: Store,
) -> None:
    """A claim skips the rest of a bucket whose head its gate refuses: a run whose gate is
    free must never share a bucket with one that is full."""
    store.submit_run("w", "held", {}, owner="a\x1fb", concurrency_key="c", concurrency_max=1)
    assert store.claim_next_run("w", "lease-1") == "held"
    store.submit_run("w", "blocked", {}, owner="a\x1fb", concurrency_key="c", concurrency_max=1)
    store.submit_run("w", "free", {}, owner="a", concurrency_key="b\x1fc", concurrency_max=1)
    assert store.claim_next_run("w", "lease-2") == "free"


def test_idempotency_keys_and_trigger_keys_of_lookalikes_are_apart(store: Store) -> None:
    first = store.submit_run("i:j", "1", {}, idempotency_key="k")
    second = store.submit_run("i", "2", {}, idempotency_key="j:k")
    assert (first, second) == ("1", "2")
    assert store.get_idempotency_run("i:j", "k") == "1"
    assert store.get_idempotency_run("i", "j:k") == "2"

    collect = TriggerPolicy("collect", window_seconds=60, max_events=2)
    assert store.trigger_event("t:u", "v", {"n": 1}, policy=collect) is None
    assert store.trigger_event("t", "u:v", {"n": 2}, policy=collect) is None
    fired = store.trigger_event("t:u", "v", {"n": 3}, policy=collect)
    assert fired is not None
    info = store.get_run("t:u", fired)
    assert info is not None
    assert info.params["events"] == [{"n": 1}, {"n": 3}]
    assert store.get_run("t", fired) is None


# -- refused names and ids ------------------------------------------------------------------

REFUSED = [
    pytest.param("", "r1", id="empty-name"),
    pytest.param("w", "", id="empty-id"),
    pytest.param("nul\x00name", "r1", id="nul"),
    pytest.param("w", "line\nbreak", id="newline"),
    pytest.param("w", "tab\tid", id="tab"),
    pytest.param("unit\x1fsep", "r1", id="unit-separator"),
    pytest.param("w", "del\x7f", id="del"),
    pytest.param("w", "c1\x85", id="c1-nel"),
    pytest.param("w", "ls\u2028", id="line-separator"),
    pytest.param("x" * 257, "r1", id="long-name"),
    pytest.param("w", "y" * 257, id="long-id"),
]


@pytest.mark.parametrize(("name", "run_id"), REFUSED)
def test_a_name_or_id_the_rules_refuse_is_refused_at_submit(
    store: Store, name: str, run_id: str
) -> None:
    with pytest.raises(InvalidNameError) as caught:
        store.submit_run(name, run_id, {})
    assert caught.value.code == "invalid_name"
    assert store.get_run(name, run_id) is None
    assert store.list_runs(name)[0] == []


def test_a_lone_surrogate_is_refused(store: Store) -> None:
    """It has no UTF-8 form, so it cannot even be looked up: nothing of ``w`` is kept."""
    with pytest.raises(InvalidNameError, match="U\\+D800"):
        store.submit_run("w", "lone\ud800", {})
    assert store.list_runs("w")[0] == []


def test_an_idempotency_key_the_rules_refuse_is_refused(store: Store) -> None:
    with pytest.raises(InvalidNameError, match="idempotency key"):
        store.submit_run("w", "r1", {}, idempotency_key="k\nk")
    assert store.get_run("w", "r1") is None


def test_the_longest_name_and_id_are_taken(store: Store) -> None:
    name, run_id = "n" * 256, "é" * 256
    assert store.submit_run(name, run_id, {}) == run_id
    assert store.claim_next_run(name, "lease-a") == run_id
