"""ValkeyStore options the conformance suite leaves at their defaults: how long finished runs
are kept, how many events a journal may hold, and how journals are read in pages."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from lockgate import ConfigurationError, EventKind, ManualClock, RunEvent, ValkeyStore
from valkey_server import shared_url

NAME = "options"


def store_with(clock: ManualClock, **options: Any) -> ValkeyStore:
    return ValkeyStore(shared_url(), namespace=f"o{uuid.uuid4().hex[:10]}", clock=clock, **options)


def finished(store: ValkeyStore, run_id: str) -> None:
    store.submit_run(NAME, run_id, {})
    store.claim_run(NAME, run_id, "lease")
    store.append_events(
        NAME, run_id, [RunEvent(EventKind.RUN_COMPLETE, {"result": 1}, run_id)], fence="lease"
    )


@pytest.mark.parametrize("shards", [1, 3])
def test_maintenance_forgets_runs_ended_longer_ago_than_completed_ttl(shards: int) -> None:
    clock = ManualClock()
    store = store_with(clock, completed_ttl=3600, shard_count=shards)
    finished(store, "old")
    clock.advance(1800)
    finished(store, "newer")
    store.submit_run(NAME, "running", {})
    clock.advance(1801)
    assert store.run_maintenance() == 1
    assert store.get_run(NAME, "old") is None
    assert store.load_run(NAME, "old") == []
    assert store.get_run(NAME, "newer") is not None
    assert sorted(info.run_id for info in store.list_runs(NAME)[0]) == ["newer", "running"]
    clock.advance(10 * 86_400)
    assert store.run_maintenance() == 1  # a run that has not ended is never forgotten
    assert [info.run_id for info in store.list_runs(NAME)[0]] == ["running"]
    store.close()


def test_completed_ttl_none_keeps_finished_runs() -> None:
    clock = ManualClock()
    store = store_with(clock, completed_ttl=None)
    finished(store, "kept")
    clock.advance(365 * 86_400)
    assert store.run_maintenance() == 0
    assert store.get_run(NAME, "kept") is not None
    store.close()


def test_a_journal_is_read_in_pages_and_whole() -> None:
    store = store_with(ManualClock(), replay_page_size=7)
    store.submit_run(NAME, "long", {})
    store.claim_run(NAME, "long", "lease")
    emitted = [RunEvent("app:tick", {"i": i}, "long") for i in range(40)]
    store.append_events(NAME, "long", emitted, fence="lease")
    journal = store.load_run(NAME, "long")
    assert [e.run_seq for e in journal] == list(range(1, 42))
    assert [e.payload["i"] for e in journal[1:]] == list(range(40))
    assert [e.run_seq for e in store.load_run(NAME, "long", max_events=10)] == list(range(1, 11))
    store.close()


def test_journal_pages_stay_within_replay_page_bytes_and_a_claim_reads_a_long_one_whole() -> None:
    store = store_with(ManualClock(), replay_page_bytes=300)
    store.submit_run(NAME, "big", {})
    store.claim_run(NAME, "big", "lease")
    emitted = [RunEvent("app:tick", {"pad": "x" * 100, "i": i}, "big") for i in range(12)]
    store.append_events(NAME, "big", emitted, fence="lease")
    store.release_run(NAME, "big", "lease")
    pages: list[int] = []
    script = store._script

    def recorded(name: str, *args: Any, shard: int | None = None) -> Any:
        answer = script(name, *args, shard=shard)
        if name == "read_page":
            pages.append(len(answer[0]))
        return answer

    store._script = recorded  # type: ignore[method-assign]
    journal = store.load_run(NAME, "big")
    assert [e.run_seq for e in journal] == list(range(1, 14))
    # About 150 bytes an event: two to a 300-byte page (a third would take it past 300).
    assert max(pages) <= 2
    assert sum(pages) == 13
    # The claim finds the journal is more than a page, and reads it page by page.
    pages.clear()
    claimed = store.claim_next_run_loaded(NAME, "lease-2")
    assert claimed is not None
    assert claimed.events == journal
    assert sum(pages) == 13
    with pytest.raises(ConfigurationError, match="replay_page_bytes"):
        store_with(ManualClock(), replay_page_bytes=0)
    store.close()


def test_maxlen_is_the_engine_s_event_cap_unless_max_replay_entries_says_otherwise() -> None:
    clock = ManualClock()
    assert store_with(clock, maxlen=500).max_replay_entries == 500
    assert store_with(clock, maxlen=500, max_replay_entries=50).max_replay_entries == 50
    with pytest.raises(ConfigurationError, match="completed_ttl"):
        store_with(clock, completed_ttl=0)
    with pytest.raises(ConfigurationError, match="replay_page_size"):
        store_with(clock, replay_page_size=0)


def test_store_info_names_the_server_its_settings_and_the_runs() -> None:
    store = store_with(ManualClock(), shard_count=2)
    finished(store, "a")
    store.submit_run(NAME, "b", {})
    store.submit_run("other", "c", {})
    info = store.info()
    assert info["namespace"] == store.namespace
    assert info["shard_count"] == 2
    assert info["maxmemory_policy"] == "noeviction"
    assert str(info["server_version"]).split(".")[0].isdigit()
    assert info["workflows"] == {NAME: {"runs": 2}, "other": {"runs": 1}}
    store.close()


def test_the_namespace_comes_from_the_environment_unless_given(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LOCKGATE_VALKEY_NAMESPACE", "from-env")
    assert ValkeyStore(shared_url()).namespace == "from-env"
    assert ValkeyStore(shared_url(), namespace="given").namespace == "given"
    monkeypatch.delenv("LOCKGATE_VALKEY_NAMESPACE")
    assert ValkeyStore(shared_url()).namespace == "lockgate"
    with pytest.raises(ConfigurationError, match="namespace"):
        ValkeyStore(shared_url(), namespace="a{b}")
