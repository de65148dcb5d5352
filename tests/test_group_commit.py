"""Group commit: submits gathered into one SQLite transaction (``SQLiteStore.create_runs``)
and a client that gathers its concurrent submits (``WorkflowClient(group_submits=True)``).

Each submit keeps its own answer: a taken run id or an idempotency conflict refuses that
submit alone; a failure of the store itself writes none of the group.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from lockgate import (
    DuplicateRunError,
    IdempotencyConflict,
    InvalidNameError,
    MemoryStore,
    SQLiteStore,
    StoreUnavailable,
    WorkflowClient,
)
from lockgate._errors import LockgateError
from lockgate.journal._events import EventKind
from lockgate.stores._batch import NewRun, new_run


class CountingStore(SQLiteStore):
    """A real SQLiteStore that counts its group commits and the runs in each."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.groups: list[int] = []

    def create_runs(self, runs: Sequence[NewRun]) -> list[str | LockgateError]:
        self.groups.append(len(runs))
        return super().create_runs(runs)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[CountingStore]:
    store = CountingStore(tmp_path / "group.db")
    yield store
    store.close()


def run_ids(store: SQLiteStore, name: str) -> set[str]:
    page, _ = store.list_runs(name, limit=1000)
    return {info.run_id for info in page}


def test_each_submit_of_a_group_has_its_own_answer(store: CountingStore) -> None:
    store.submit_run("gc", "taken", {"n": 0})
    store.submit_run("gc", "keyed", {"n": 1}, idempotency_key="k1", idempotency_body_hash="h1")
    answers = store.create_runs(
        [
            new_run("gc", "a", {"n": 2}),
            new_run("gc", "taken", {"n": 3}),  # the id is another run's
            new_run("gc", "again", {"n": 1}, idempotency_key="k1", idempotency_body_hash="h1"),
            new_run("gc", "other", {"n": 9}, idempotency_key="k1", idempotency_body_hash="h9"),
            new_run("gc", "first", {"n": 4}, idempotency_key="k2", idempotency_body_hash="h4"),
            new_run("gc", "second", {"n": 4}, idempotency_key="k2", idempotency_body_hash="h4"),
            new_run("gc", "b", {"n": 5}),
        ]
    )
    assert answers[0] == "a"
    assert isinstance(answers[1], DuplicateRunError)
    assert answers[2] == "keyed"  # the key's first run
    assert isinstance(answers[3], IdempotencyConflict)
    assert answers[4:] == ["first", "first", "b"]  # a key seen earlier in the same group
    assert run_ids(store, "gc") == {"taken", "keyed", "a", "first", "b"}
    # The refused submits wrote nothing; the others are whole runs, queued in order.
    info = store.get_run("gc", "taken")
    assert info is not None
    assert store.load_run("gc", "taken")[0].payload["params"] == {"n": 0}
    for run_id in ("a", "first", "b"):
        events = store.load_run("gc", run_id)
        assert events[0].kind == EventKind.RUN_INIT
    claimed = [store.claim_next_run("gc", f"w{i}") for i in range(6)]
    assert claimed == ["taken", "keyed", "a", "first", "b", None]


def test_a_store_failure_in_a_group_writes_none_of_it(store: CountingStore, tmp_path: Path) -> None:
    # Another connection makes the file refuse one of the group's rows, as a full disk or a
    # corrupt page would refuse a write: SQLite itself fails, not the submit.
    raw = sqlite3.connect(tmp_path / "group.db")
    raw.execute(
        "CREATE TRIGGER refuse AFTER INSERT ON lg_runs WHEN NEW.run_id = 'poison' "
        "BEGIN SELECT RAISE(ABORT, 'refused'); END"
    )
    raw.commit()
    raw.close()
    with pytest.raises(StoreUnavailable):
        store.create_runs(
            [new_run("gc", "a", {}), new_run("gc", "poison", {}), new_run("gc", "b", {})]
        )
    assert run_ids(store, "gc") == set()
    assert store.create_runs([new_run("gc", "c", {})]) == ["c"]


def test_a_bad_name_is_refused_before_the_store() -> None:
    with pytest.raises(InvalidNameError):
        new_run("gc", "bad\nid", {})


async def test_a_grouping_client_gathers_concurrent_submits(store: CountingStore) -> None:
    client = WorkflowClient(store, group_submits=True)
    store.submit_run("gcc", "taken", {})
    handles = await asyncio.gather(
        *(client.submit("gcc", {"n": n}, run_id=f"r{n}") for n in range(200)),
        client.submit("gcc", {}, run_id="taken"),
        *(client.submit("gcc", {"n": 7}, idempotency_key="same") for _ in range(3)),
        return_exceptions=True,
    )
    assert [h.run_id for h in handles[:200]] == [f"r{n}" for n in range(200)]  # type: ignore[union-attr]
    assert isinstance(handles[200], DuplicateRunError)
    keyed = {h.run_id for h in handles[201:]}  # type: ignore[union-attr]
    assert len(keyed) == 1
    assert run_ids(store, "gcc") == {"taken", *(f"r{n}" for n in range(200)), *keyed}
    # Gathered: fewer store calls than submits, none over the cap, every submit in one.
    assert sum(store.groups) == 204
    assert len(store.groups) < 204 / 4
    # A submit alone still goes at once, in a group of one.
    alone = await client.submit("gcc", {"n": -1})
    assert store.groups[-1] == 1
    assert alone.run_id in run_ids(store, "gcc")


async def test_a_cancelled_submit_leaves_the_rest_of_its_group(store: CountingStore) -> None:
    client = WorkflowClient(store, group_submits=True)
    tasks = [asyncio.create_task(client.submit("gcx", {"n": n}, run_id=f"x{n}")) for n in range(20)]
    await asyncio.sleep(0)  # every submit is waiting for the store now
    tasks[5].cancel()
    done = await asyncio.gather(*tasks, return_exceptions=True)
    assert isinstance(done[5], asyncio.CancelledError)
    assert [h.run_id for i, h in enumerate(done) if i != 5] == [  # type: ignore[union-attr]
        f"x{n}" for n in range(20) if n != 5
    ]
    # A cancelled caller stops waiting; its run may still be written, as with any submit.
    assert run_ids(store, "gcx") >= {f"x{n}" for n in range(20) if n != 5}


async def test_a_store_without_group_commit_submits_one_by_one() -> None:
    store = MemoryStore()
    client = WorkflowClient(store, group_submits=True)
    handles = await asyncio.gather(*(client.submit("gcm", {"n": n}) for n in range(10)))
    assert len({h.run_id for h in handles}) == 10
    page, _ = store.list_runs("gcm", limit=100)
    assert len(page) == 10
