"""The store's marker: written when a store is created on purpose, read by workers to tell a
store that lost its data from one that is merely empty.

Every backend keeps one (``ensure_marker`` / ``read_marker``); only those whose data can be
lost while a store is open (an SQLite file emptied in place, a Valkey namespace flushed, the
Valkey half of a composite) are put through a loss: a MemoryStore loses its data only with
its process.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from lockgate import EventKind, ManualClock, Store
from lockgate.stores import CompositeStore, SQLiteStore, StoreMarker, ValkeyStore
from valkey_server import shared_url

from ._support import NAME, claimed, event
from .conftest import STORE_FACTORIES, StoreFactory

#: The backends whose data can be lost under an open store: every one but memory.
LOSABLE = [factory for factory in STORE_FACTORIES if factory.id != "memory"]


@pytest.fixture(params=LOSABLE, ids=lambda factory: factory.id)
def losable(request: pytest.FixtureRequest, clock: ManualClock, tmp_path: Path) -> Iterator[Store]:
    factory: StoreFactory = request.param
    backend = factory.make(clock, tmp_path)
    yield backend
    backend.close()


def test_a_new_store_carries_no_marker_until_one_is_written(store: Store) -> None:
    assert store.read_marker() is None
    assert store.ensure_marker() is True
    marker = store.read_marker()
    assert isinstance(marker, StoreMarker)
    assert len(marker.marker_id) == 32
    assert marker.layout
    assert marker.shard_count == getattr(store, "shard_count", 1)


def test_writing_the_marker_again_keeps_the_first(store: Store, clock: ManualClock) -> None:
    store.ensure_marker()
    first = store.read_marker()
    clock.advance(60)
    assert store.ensure_marker() is False
    assert store.read_marker() == first


def test_the_marker_is_stamped_with_the_stores_time(store: Store, clock: ManualClock) -> None:
    clock.advance(1234.5)
    store.ensure_marker()
    marker = store.read_marker()
    assert marker is not None
    assert marker.created_at == pytest.approx(clock())


def test_runs_their_ends_and_maintenance_leave_the_marker_alone(
    store: Store, clock: ManualClock
) -> None:
    store.ensure_marker()
    marker = store.read_marker()
    claimed(store, "r1", "lease-a")
    store.append_events(
        NAME, "r1", [event(EventKind.RUN_COMPLETE, "r1", result=1)], fence="lease-a"
    )
    store.submit_run(NAME, "r2", {})
    store.terminate_run(NAME, "r2")
    clock.advance(30 * 86_400)  # past every backend's retention of ended runs
    store.run_maintenance()
    assert store.read_marker() == marker


def _lose_everything(store: Store) -> None:
    """What a store losing its data looks like on the backend: a Valkey namespace's keys gone
    (a server restarted without persistence), an SQLite file's rows deleted in place."""
    target = store.lifecycle if isinstance(store, CompositeStore) else store
    if isinstance(target, ValkeyStore):
        import redis

        client = redis.Redis.from_url(shared_url())
        try:
            for pattern in (f"lg:{{{target.namespace}}}:*", f"lg:{{{target.namespace}:*"):
                keys = list(client.scan_iter(match=pattern, count=500))
                if keys:
                    client.delete(*keys)
        finally:
            client.close()
        return
    assert isinstance(target, SQLiteStore), type(target)
    conn = sqlite3.connect(target.path)
    try:
        tables = [
            row[0]
            for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            if row[0].startswith("lg_") and row[0] != "lg_meta"
        ]
        for table in tables:
            conn.execute(f"DELETE FROM {table}")  # names from the file itself
        conn.execute("DELETE FROM lg_meta WHERE key = 'marker'")
        conn.commit()
    finally:
        conn.close()


def test_a_store_that_lost_its_data_has_no_marker_until_it_is_written_again(
    losable: Store,
) -> None:
    store = losable
    store.ensure_marker()
    before = store.read_marker()
    assert before is not None
    claimed(store, "r1", "lease-a")
    _lose_everything(store)
    assert store.read_marker() is None
    assert store.get_run(NAME, "r1") is None
    assert store.ensure_marker() is True
    after = store.read_marker()
    assert after is not None
    assert after.marker_id != before.marker_id  # a marker written again is told from the first


@pytest.mark.parametrize(
    "factory", [f for f in STORE_FACTORIES if f.id.startswith("composite")], ids=lambda f: f.id
)
def test_a_composite_carries_its_lifecycle_backends_marker(
    factory: StoreFactory, clock: ManualClock, tmp_path: Path
) -> None:
    store = factory.make(clock, tmp_path)
    try:
        assert isinstance(store, CompositeStore)
        assert store.ensure_marker() is True
        assert store.lifecycle.read_marker() == store.read_marker()
        assert store.lifecycle.ensure_marker() is False
    finally:
        store.close()


def test_stores_of_one_valkey_namespace_share_its_marker() -> None:
    namespace = f"m{uuid.uuid4().hex[:12]}"
    first = ValkeyStore(shared_url(), namespace=namespace)
    second = ValkeyStore(shared_url(), namespace=namespace)
    try:
        assert first.ensure_marker() is True
        assert second.ensure_marker() is False
        assert second.read_marker() == first.read_marker()
    finally:
        first.close()
        second.close()
