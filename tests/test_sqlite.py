"""What is particular to SQLiteStore: the file it will and will not open, many connections and
processes on one file, backups, retention and info. The store contract itself is checked by
the conformance suite in tests/stores, which runs on SQLite too."""

from __future__ import annotations

import os
import sqlite3
import stat
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from lockgate import (
    ConfigurationError,
    EventKind,
    LockLost,
    ManualClock,
    MemoryStore,
    RunEvent,
    RunStatus,
    SQLiteStore,
    StoreFileError,
)
from lockgate.stores.sqlite._file import (
    FORMAT_GENERATION,
    check_library,
    check_local,
    filesystem_type,
)

NAME = "orders"


def snapshot(path: Path) -> tuple[bytes, int]:
    return path.read_bytes(), path.stat().st_mtime_ns


def test_a_new_file_is_created_and_survives_reopening(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    store = SQLiteStore(path)
    store.submit_run(NAME, "r1", {"n": 1})
    store.close()
    reopened = SQLiteStore(path)
    info = reopened.get_run(NAME, "r1")
    assert info is not None
    assert info.params == {"n": 1}
    assert info.status == RunStatus.PENDING
    assert [e.kind for e in reopened.load_run(NAME, "r1")] == [EventKind.RUN_INIT]


def test_a_corrupted_file_is_refused_and_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    path.write_bytes(b"this is not a database, it is a shopping list\n" * 200)
    before = snapshot(path)
    with pytest.raises(StoreFileError, match="not an SQLite database"):
        SQLiteStore(path)
    assert snapshot(path) == before
    assert not (tmp_path / "store.db-wal").exists()


def test_another_applications_database_is_refused_and_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    foreign = sqlite3.connect(path)
    foreign.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)")
    foreign.execute("INSERT INTO invoices (total) VALUES (12.5)")
    foreign.commit()
    foreign.close()
    before = snapshot(path)
    with pytest.raises(StoreFileError, match="another application"):
        SQLiteStore(path)
    assert snapshot(path) == before


def test_a_database_marked_by_another_application_id_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    foreign = sqlite3.connect(path)
    foreign.execute("PRAGMA application_id = 1234")
    foreign.execute("CREATE TABLE t (x)")
    foreign.commit()
    foreign.close()
    before = snapshot(path)
    with pytest.raises(StoreFileError, match="another application"):
        SQLiteStore(path)
    assert snapshot(path) == before


def test_a_file_from_a_newer_lockgate_is_refused_and_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    SQLiteStore(path).close()
    raw = sqlite3.connect(path)
    raw.execute(
        "UPDATE lg_meta SET value = ? WHERE key = 'format_generation'",
        (str(FORMAT_GENERATION + 1),),
    )
    raw.commit()
    raw.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    raw.close()
    before = snapshot(path)
    with pytest.raises(StoreFileError, match="newer lockgate"):
        SQLiteStore(path)
    assert snapshot(path) == before


@pytest.mark.parametrize("bad", ["", ":memory:", "file:store.db?mode=memory"])
def test_a_path_that_names_no_file_is_refused(bad: str) -> None:
    with pytest.raises(StoreFileError, match="path of a file"):
        SQLiteStore(bad)


def test_a_directory_or_a_missing_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(StoreFileError, match="is a directory"):
        SQLiteStore(tmp_path)
    with pytest.raises(StoreFileError, match="does not exist"):
        SQLiteStore(tmp_path / "missing" / "store.db")


MOUNTS = [
    "/dev/sda1 / ext4 rw,relatime 0 0",
    "server:/export /mnt/shared nfs4 rw,relatime 0 0",
    "//nas/share /mnt/smb cifs rw 0 0",
    "/dev/sdb1 /mnt/shared/local ext4 rw 0 0",
]


def test_the_filesystem_is_read_from_the_longest_matching_mount(tmp_path: Path) -> None:
    assert filesystem_type(Path("/mnt/shared/x.db"), MOUNTS) == "nfs4"
    assert filesystem_type(Path("/mnt/shared/local/x.db"), MOUNTS) == "ext4"
    assert filesystem_type(Path("/mnt/smb/deep/x.db"), MOUNTS) == "cifs"
    assert filesystem_type(Path("/home/me/x.db"), MOUNTS) == "ext4"


@pytest.mark.parametrize("where", ["/mnt/shared/x.db", "/mnt/smb/x.db"])
def test_a_network_filesystem_is_refused(where: str) -> None:
    with pytest.raises(StoreFileError, match="network filesystem"):
        check_local(Path(where), MOUNTS)


def test_a_local_filesystem_is_accepted() -> None:
    check_local(Path("/mnt/shared/local/x.db"), MOUNTS)
    check_local(Path("/home/me/x.db"), MOUNTS)


def test_an_old_sqlite_library_is_refused() -> None:
    with pytest.raises(StoreFileError, match=r"3\.20\.0"):
        check_library((3, 20, 0))
    check_library((3, 45, 1))


def test_from_url_takes_relative_and_absolute_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    relative = SQLiteStore.from_url("sqlite:///rel.db", synchronous="normal")
    assert relative.path == tmp_path / "rel.db"
    assert relative.synchronous == "normal"
    absolute = SQLiteStore.from_url(f"sqlite:///{tmp_path / 'abs.db'}")
    assert absolute.path == tmp_path / "abs.db"


def test_a_stale_lease_on_another_connection_is_refused(tmp_path: Path) -> None:
    clock = ManualClock()
    first = SQLiteStore(tmp_path / "s.db", clock=clock, lock_ttl=5)
    second = SQLiteStore(tmp_path / "s.db", clock=clock, lock_ttl=5)
    first.submit_run(NAME, "r1", {})
    assert first.claim_next_run(NAME, "lease-a") == "r1"
    clock.advance(6)
    second.claim_run(NAME, "r1", "lease-b")
    done = RunEvent("step:done", {"call_index": 0, "step_id": "s", "result": 1}, "r1")
    with pytest.raises(LockLost):
        first.append_events(NAME, "r1", [done], fence="lease-a")
    second.append_events(NAME, "r1", [done], fence="lease-b")
    journal = first.load_run(NAME, "r1")
    assert [e.kind for e in journal].count("step:done") == 1
    assert journal[-1].headers["lg-epoch"] == "2"


CLAIMER = textwrap.dedent(
    """
    import sys
    from lockgate import SQLiteStore
    store = SQLiteStore(sys.argv[1], busy_timeout_s=60)
    worker = sys.argv[2]
    claimed = []
    while True:
        run_id = store.claim_next_run("orders", f"{worker}/{len(claimed)}")
        if run_id is None:
            break
        claimed.append(run_id)
    print("\\n".join(claimed))
    """
)


def test_processes_racing_on_one_file_claim_each_run_exactly_once(tmp_path: Path) -> None:
    path = tmp_path / "race.db"
    store = SQLiteStore(path, synchronous="normal")
    runs = [f"r{i:03d}" for i in range(300)]
    for run_id in runs:
        store.submit_run(NAME, run_id, {})
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", CLAIMER, str(path), f"w{n}"],
            stdout=subprocess.PIPE,
            text=True,
        )
        for n in range(4)
    ]
    claimed: list[str] = []
    for process in processes:
        out, _ = process.communicate(timeout=120)
        assert process.returncode == 0
        claimed += [line for line in out.splitlines() if line]
    assert sorted(claimed) == runs
    assert store.get_pending_count(NAME) == 0
    holders = {store.lock_holder(NAME, run_id) for run_id in runs}
    assert None not in holders
    assert len(holders) == len(runs)


def test_a_backup_is_consistent_while_writers_run_and_is_owner_only(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "live.db", synchronous="normal")
    writer_store = SQLiteStore(tmp_path / "live.db", synchronous="normal")
    stop = threading.Event()

    def write() -> None:
        n = 0
        while not stop.is_set():
            writer_store.submit_run(NAME, f"w{n}", {"n": n})
            n += 1

    writer = threading.Thread(target=write)
    writer.start()
    try:
        while writer_store.get_pending_count(NAME) < 50:
            pass
        copy = store.backup(tmp_path / "copy.db")
    finally:
        stop.set()
        writer.join()
    assert stat.S_IMODE(os.stat(copy).st_mode) == 0o600
    restored = SQLiteStore(copy)
    runs, _ = restored.list_runs(NAME, limit=100_000)
    assert len(runs) >= 50
    for info in runs:  # every run in the copy has its run:init: nothing half-written
        assert [e.kind for e in restored.load_run(NAME, info.run_id)] == [EventKind.RUN_INIT]
    with pytest.raises(ConfigurationError, match="already exists"):
        store.backup(copy)


def test_retention_deletes_finished_runs_after_retention_seconds(tmp_path: Path) -> None:
    clock = ManualClock()
    store = SQLiteStore(tmp_path / "s.db", clock=clock, retention_seconds=3600)

    def finish(run_id: str) -> None:
        store.claim_run(NAME, run_id, f"lease-{run_id}")
        complete = RunEvent("run:complete", {"result": 1}, run_id)
        store.append_events(NAME, run_id, [complete], fence=f"lease-{run_id}")

    for run_id in ("old", "recent", "running"):
        store.submit_run(NAME, run_id, {})
    finish("old")
    clock.advance(3000)
    finish("recent")
    assert store.run_maintenance() == 0
    clock.advance(1000)  # "old" ended 4000 s ago, "recent" 1000 s ago
    assert store.run_maintenance() == 1
    assert store.get_run(NAME, "old") is None
    assert store.load_run(NAME, "old") == []
    assert store.get_run(NAME, "recent") is not None
    clock.advance(10**6)
    store.run_maintenance()
    assert store.get_run(NAME, "recent") is None
    assert store.get_run(NAME, "running") is not None  # an unfinished run is never deleted


def test_no_retention_keeps_finished_runs(tmp_path: Path) -> None:
    clock = ManualClock()
    store = SQLiteStore(tmp_path / "s.db", clock=clock, retention_seconds=None)
    store.submit_run(NAME, "r1", {})
    store.claim_run(NAME, "r1", "l")
    store.append_events(NAME, "r1", [RunEvent("run:complete", {}, "r1")], fence="l")
    clock.advance(10**8)
    store.run_maintenance()
    assert store.get_run(NAME, "r1") is not None


def test_info_describes_the_file_and_what_it_holds(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db", synchronous="normal")
    store.submit_run(NAME, "a", {})
    store.submit_run(NAME, "b", {})
    store.claim_run(NAME, "b", "l")
    info = store.info()
    assert info["path"] == str(tmp_path / "s.db")
    assert info["format_generation"] == FORMAT_GENERATION
    assert info["journal_mode"] == "wal"
    assert info["synchronous"] == "normal"
    assert info["size_bytes"] > 0
    assert info["workflows"] == {NAME: {"in_progress": 1, "pending": 1}}


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_both_stores_tell_pending_updates_in_the_poll(backend: str, tmp_path: Path) -> None:
    store = MemoryStore() if backend == "memory" else SQLiteStore(tmp_path / "s.db")
    store.submit_run(NAME, "r1", {})
    assert store.poll_run(NAME, "r1").updates_pending is False
    store.deliver_update(NAME, "r1", "set", {"v": 1}, "u1", "t")
    assert store.poll_run(NAME, "r1").updates_pending is True


OPENER = "import sys; from lockgate import SQLiteStore; SQLiteStore(sys.argv[1]).close()"


def test_processes_opening_a_new_file_at_once_all_see_a_whole_store(tmp_path: Path) -> None:
    for attempt in range(3):
        path = tmp_path / f"new-{attempt}.db"
        openers = [
            subprocess.Popen([sys.executable, "-c", OPENER, str(path)], stderr=subprocess.PIPE)
            for _ in range(4)
        ]
        while any(p.poll() is None for p in openers):
            if path.exists():
                SQLiteStore(path).close()  # would raise StoreFileError on a half-made file
        for opener in openers:
            _, err = opener.communicate(timeout=60)
            assert opener.returncode == 0, err.decode()
        assert SQLiteStore(path).info()["format_generation"] == FORMAT_GENERATION
        assert not list(tmp_path.glob(".new-*")), "a scratch file was left behind"


def test_a_generation_2_file_gains_the_poison_columns(tmp_path: Path) -> None:
    from lockgate.stores import PoisonPolicy

    path = tmp_path / "store.db"
    old = SQLiteStore(path, lock_ttl=1.0)
    old.submit_run(NAME, "r1", {})
    old.close()
    raw = sqlite3.connect(path)
    for column in ("crashes", "blocked_lease", "blocked_until"):
        raw.execute(f"ALTER TABLE lg_runs DROP COLUMN {column}")
    raw.execute("UPDATE lg_meta SET value = '2' WHERE key = 'format_generation'")
    raw.commit()
    raw.close()
    now = [1000.0]
    store = SQLiteStore(path, lock_ttl=1.0, clock=lambda: now[0])
    assert store.info()["format_generation"] == FORMAT_GENERATION == 3
    assert store.claim_next_run(NAME, "lease-a") == "r1"
    now[0] += 2.0
    store.recover_pending_runs(NAME, poison=PoisonPolicy(max_retries=0))
    assert store.get_run(NAME, "r1").status == RunStatus.QUARANTINED  # type: ignore[union-attr]
