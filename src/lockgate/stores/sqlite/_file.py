"""Opening an SQLite file for lockgate: what is refused and why, the schema, and its format
generation. Nothing here writes to a file before it is known to be empty or lockgate's own,
and nothing creates one unless creating one was asked for. Once open, the file is known by its
device and inode, so a store notices when its path no longer names it."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from lockgate._errors import StoreFileError, StoreFileGone, StoreUnavailable

#: Bumped whenever the schema changes in a way an older lockgate cannot read.
FORMAT_GENERATION = 3
#: ``PRAGMA application_id`` of a lockgate file: "LKGT".
APPLICATION_ID = 0x4C4B4754
#: UPSERT (3.24) and partial indexes are needed; WAL needs a library built with it.
MIN_SQLITE_VERSION = (3, 24, 0)
#: Filesystems whose locking SQLite cannot trust across hosts or processes.
NETWORK_FILESYSTEMS = frozenset(
    {
        "nfs",
        "nfs4",
        "cifs",
        "smb",
        "smb2",
        "smbfs",
        "smb3",
        "fuse.sshfs",
        "sshfs",
        "afs",
        "ceph",
        "fuse.ceph",
        "glusterfs",
        "fuse.glusterfs",
        "lustre",
        "9p",
        "davfs",
        "fuse.s3fs",
        "fuse.gcsfuse",
    }
)


def check_library(version: tuple[int, ...] = sqlite3.sqlite_version_info) -> None:
    if tuple(version) < MIN_SQLITE_VERSION:
        have = ".".join(map(str, version))
        need = ".".join(map(str, MIN_SQLITE_VERSION))
        raise StoreFileError(
            f"the SQLite library is {have}; SQLiteStore needs {need} or newer (upgrade Python or "
            f"its sqlite3 library)"
        )


def resolve_path(path: str | os.PathLike[str]) -> Path:
    """The file ``path`` names, refusing what names no file."""
    raw = os.fspath(path)
    if not raw or raw == ":memory:" or raw.startswith("file:"):
        raise StoreFileError(
            f"SQLiteStore needs the path of a file, not {raw!r}; for a store in memory use "
            f"MemoryStore"
        )
    resolved = Path(raw).expanduser().absolute()
    if resolved.is_dir():
        raise StoreFileError(f"{resolved} is a directory; give the path of a database file")
    if not resolved.parent.is_dir():
        raise StoreFileError(f"the directory {resolved.parent} does not exist; create it first")
    return resolved


def filesystem_type(path: Path, mounts: Iterable[str] | None = None) -> str | None:
    """The type of the filesystem ``path`` lives on, from the mount table (Linux), or None."""
    if mounts is None:
        try:
            with open("/proc/mounts", encoding="utf-8") as table:
                mounts = table.read().splitlines()
        except OSError:
            return None
    best, kind = "", None
    target = str(path.resolve() if path.exists() else path.parent.resolve())
    for line in mounts:
        fields = line.split()
        if len(fields) < 3:
            continue
        point = fields[1].replace("\\040", " ")
        inside = target == point or target.startswith(point.rstrip("/") + "/") or point == "/"
        if inside and len(point) >= len(best):
            best, kind = point, fields[2]
    return kind


def check_local(path: Path, mounts: Iterable[str] | None = None) -> None:
    kind = filesystem_type(path, mounts)
    if kind is not None and kind.lower() in NETWORK_FILESYSTEMS:
        raise StoreFileError(
            f"{path} is on a network filesystem ({kind}); SQLite's locks are not reliable there, "
            f"so runs could be claimed twice. Put the file on a local disk, or use a server store"
        )


def inspect_existing(path: Path) -> None:
    """Refuse a file that is not an empty file or a lockgate store this runtime can read,
    reading it without writing a byte."""
    if not path.exists() or path.stat().st_size == 0:
        return
    try:
        probe = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise StoreFileError(f"cannot open {path}: {exc}") from exc
    try:
        application_id = probe.execute("PRAGMA application_id").fetchone()[0]
        tables = {row[0] for row in probe.execute("SELECT name FROM sqlite_master")}
        generation = None
        if "lg_meta" in tables:
            row = probe.execute(
                "SELECT value FROM lg_meta WHERE key = 'format_generation'"
            ).fetchone()
            generation = _generation(path, row[0]) if row else None
    except sqlite3.DatabaseError as exc:
        raise StoreFileError(
            f"{path} is not an SQLite database lockgate can read ({exc}); it was left untouched"
        ) from exc
    finally:
        probe.close()
    if application_id != APPLICATION_ID:
        if application_id == 0 and not tables:
            return
        raise StoreFileError(
            f"{path} is an SQLite database of another application; lockgate will not write to "
            f"it. Give a new path for the store"
        )
    if generation is None:
        raise StoreFileError(f"{path} is a lockgate store with no format generation; it is damaged")
    if generation > FORMAT_GENERATION:
        raise StoreFileError(
            f"{path} was written by a newer lockgate (format {generation}; this one reads up to "
            f"{FORMAT_GENERATION}); upgrade lockgate to open it"
        )


def require_existing(path: Path) -> None:
    """Refuse a path with no store yet (no file, or an empty one), saying how to create one."""
    if path.exists() and path.stat().st_size > 0:
        return
    what = "is empty, not a lockgate store yet" if path.exists() else "does not exist"
    raise StoreFileError(
        f"no lockgate store at {path}: the file {what}. Create the store with `lockgate store "
        f"init --store sqlite:///{path}` (a worker started on it creates it too), or open it "
        f"with create=True"
    )


def _generation(path: Path, value: object) -> int:
    """The format generation recorded as ``value``: a whole number from 1 up."""
    text = str(value).strip()
    if not (text.isascii() and text.isdigit() and int(text) >= 1):
        raise StoreFileError(
            f"{path} is a lockgate store whose format generation is damaged ({value!r} is not "
            f"a generation, a whole number from 1 up); it was left untouched"
        )
    return int(text)


def open_failure(path: Path, exc: sqlite3.Error) -> Exception:
    """What opening the store file ``path`` failing with ``exc`` is: a file this user may not
    write (StoreFileError, as no retry helps), else the store being unavailable."""
    code = getattr(exc, "sqlite_errorcode", None)
    primary = code & 0xFF if isinstance(code, int) else None
    blocked = primary == sqlite3.SQLITE_READONLY or (
        primary == sqlite3.SQLITE_CANTOPEN and not os.access(path.parent, os.W_OK)
    )
    if blocked:
        what = "is read-only" if not os.access(path, os.W_OK) else "is in a read-only directory"
        return StoreFileError(
            f"{path} {what} for this user ({exc}): lockgate writes to its store file whenever "
            f"it opens it, even for commands that only read (it brings the schema up to date "
            f"and keeps a write-ahead log beside the file). Make the file and its directory "
            f"writable, or copy the file and open the copy; it was left untouched"
        )
    return StoreUnavailable(f"cannot open SQLite store {path}: {exc}")


def create_if_missing(path: Path) -> bool:
    """Create the store file whole, so no other process can open it half made; True when this
    call created it.

    SQLite creates a new database lazily: its first transaction on an empty file is where a
    concurrent reader can see the schema being built. So a new store is built in a private
    file beside the target and linked into place only once it is complete; if another process
    linked first, its file wins and ours is dropped."""
    if path.exists() and path.stat().st_size > 0:
        return False
    import uuid  # here: uuid imports platform, a cost for every reader of the store

    scratch = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.new")
    try:
        conn = sqlite3.connect(scratch, isolation_level=None)
        try:
            conn.executescript(f"BEGIN IMMEDIATE;\n{SCHEMA}\nCOMMIT;")
        finally:
            conn.close()
        if path.exists() and path.stat().st_size == 0:
            path.unlink(missing_ok=True)  # an empty file left by an older, lazier open
        try:
            os.link(scratch, path)
        except FileExistsError:
            return False
        return True
    finally:
        scratch.unlink(missing_ok=True)


#: The files an open store depends on: the database, and the write-ahead log and its index,
#: which every process on the file must share (one that made new ones would not see the
#: commits in the old ones).
COMPANIONS = ("", "-wal", "-shm")


def _identity(name: str) -> tuple[int, int] | None:
    try:
        stat = os.stat(name)
    except (FileNotFoundError, NotADirectoryError):
        return None
    return stat.st_dev, stat.st_ino


@dataclass(frozen=True)
class FileIdentity:
    """The device and inode of each file of an open store, as it opened them. SQLite keeps
    using the files it opened whatever becomes of their names; this says when a name no
    longer leads to them."""

    files: tuple[tuple[str, tuple[int, int]], ...]

    @classmethod
    def of(cls, path: Path) -> FileIdentity:
        """The identity of ``path`` and its companions now (a companion absent is not held)."""
        found = []
        for suffix in COMPANIONS:
            name = f"{path}{suffix}"
            identity = _identity(name)
            if identity is not None:
                found.append((name, identity))
        return cls(tuple(found))

    def lost(self) -> StoreFileGone | None:
        """Why the store can no longer trust its path (the first file gone or replaced), or
        None when every name still leads to the file opened. One ``stat`` per file."""
        for name, opened in self.files:
            now = _identity(name)
            if now == opened:
                continue
            reason = "deleted" if now is None else "replaced"
            how = "deleted or moved" if now is None else "replaced by another file"
            return StoreFileGone(
                f"{name} was {how} while the store had it open; the store stops, since "
                f"whatever it did next would be in a file no other process sees. Restore the "
                f"file from a backup, or start again on a new store",
                path=name,
                reason=reason,
            )
        return None


#: Gate bookkeeping (format generation 2): the index that counts a Limit key's slots, Rate
#: buckets, and when each fairness bucket was last served.
GATES_SCHEMA = """
CREATE INDEX IF NOT EXISTS lg_runs_slots ON lg_runs (name, ckey) WHERE lock IS NOT NULL;
CREATE INDEX IF NOT EXISTS lg_runs_buckets ON lg_runs (name, bucket, queued)
    WHERE queued IS NOT NULL;
CREATE TABLE IF NOT EXISTS lg_tokens (
    name TEXT NOT NULL, key TEXT NOT NULL, tokens REAL NOT NULL, updated_at REAL NOT NULL,
    PRIMARY KEY (name, key)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS lg_served (
    name TEXT NOT NULL, bucket TEXT NOT NULL, seq INTEGER NOT NULL,
    PRIMARY KEY (name, bucket)
) WITHOUT ROWID;
"""

#: The tail record of each continue_as_new chain, by its root (also format generation 3).
CHAINS_SCHEMA = """
CREATE TABLE IF NOT EXISTS lg_chains (
    root_name TEXT NOT NULL, root_run_id TEXT NOT NULL, hop INTEGER NOT NULL,
    link TEXT NOT NULL, closed INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (root_name, root_run_id)
) WITHOUT ROWID;
"""

#: Poison bookkeeping (format generation 3): a run's counted crashes (a JSON list of times)
#: and the lease last seen with its loop blocked, with the lock expiry it had then.
POISON_COLUMNS = """
ALTER TABLE lg_runs ADD COLUMN crashes TEXT;
ALTER TABLE lg_runs ADD COLUMN blocked_lease TEXT;
ALTER TABLE lg_runs ADD COLUMN blocked_until REAL;
"""

#: What brings a file of an older generation to this one, by the generation it starts from.
MIGRATIONS = {
    1: """
ALTER TABLE lg_runs ADD COLUMN ckey TEXT;
ALTER TABLE lg_runs ADD COLUMN cmax INTEGER;
ALTER TABLE lg_runs ADD COLUMN rkey TEXT;
ALTER TABLE lg_runs ADD COLUMN rps REAL;
ALTER TABLE lg_runs ADD COLUMN rburst INTEGER;
ALTER TABLE lg_runs ADD COLUMN bucket TEXT NOT NULL DEFAULT '';
"""
    + GATES_SCHEMA,
    2: POISON_COLUMNS + CHAINS_SCHEMA,
}


def migrate(conn: sqlite3.Connection) -> None:
    """Bring the file to FORMAT_GENERATION, one generation at a time, in one transaction."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        row = conn.execute("SELECT value FROM lg_meta WHERE key = 'format_generation'").fetchone()
        generation = int(row[0])
        while generation < FORMAT_GENERATION:
            for statement in filter(str.strip, MIGRATIONS[generation].split(";")):
                conn.execute(statement)
            generation += 1
        conn.execute(
            "UPDATE lg_meta SET value = ? WHERE key = 'format_generation'", (str(generation),)
        )
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


SCHEMA = f"""
CREATE TABLE IF NOT EXISTS lg_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS lg_runs (
    name TEXT NOT NULL,
    run_id TEXT NOT NULL,
    ord INTEGER NOT NULL,
    params TEXT NOT NULL,
    metadata TEXT NOT NULL,
    owner TEXT,
    version TEXT NOT NULL,
    version_behavior TEXT NOT NULL,
    submitted_at REAL NOT NULL,
    lock TEXT,
    lock_expires REAL NOT NULL DEFAULT 0,
    epoch INTEGER NOT NULL DEFAULT 0,
    queued INTEGER,
    wait TEXT,
    wait_due REAL,
    cancel_at TEXT,
    pause_at TEXT,
    owner_gone INTEGER NOT NULL DEFAULT 0,
    store_requeues INTEGER NOT NULL DEFAULT 0,
    last_seq INTEGER NOT NULL DEFAULT 0,
    terminal TEXT,
    ended_at REAL,
    ckey TEXT,
    cmax INTEGER,
    rkey TEXT,
    rps REAL,
    rburst INTEGER,
    bucket TEXT NOT NULL DEFAULT '',
    crashes TEXT,
    blocked_lease TEXT,
    blocked_until REAL,
    PRIMARY KEY (name, run_id)
);
CREATE INDEX IF NOT EXISTS lg_runs_queue ON lg_runs (name, queued) WHERE queued IS NOT NULL;
CREATE INDEX IF NOT EXISTS lg_runs_due ON lg_runs (wait_due) WHERE wait_due IS NOT NULL;
CREATE INDEX IF NOT EXISTS lg_runs_locks ON lg_runs (name, lock_expires) WHERE lock IS NOT NULL;
CREATE INDEX IF NOT EXISTS lg_runs_order ON lg_runs (name, ord);
CREATE INDEX IF NOT EXISTS lg_runs_ended ON lg_runs (ended_at) WHERE ended_at IS NOT NULL;
{GATES_SCHEMA}
{CHAINS_SCHEMA}
CREATE TABLE IF NOT EXISTS lg_events (
    name TEXT NOT NULL,
    run_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    kind TEXT NOT NULL,
    payload TEXT NOT NULL,
    schema_version TEXT NOT NULL,
    headers TEXT NOT NULL,
    PRIMARY KEY (name, run_id, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS lg_signals (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL,
    run_id TEXT NOT NULL,
    signal TEXT NOT NULL,
    signal_id TEXT NOT NULL,
    payload TEXT NOT NULL,
    sent_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS lg_signals_run ON lg_signals (name, run_id, signal, id);
CREATE TABLE IF NOT EXISTS lg_signal_keys (
    name TEXT NOT NULL, run_id TEXT NOT NULL, key TEXT NOT NULL, result TEXT NOT NULL,
    PRIMARY KEY (name, run_id, key)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS lg_updates (
    name TEXT NOT NULL, run_id TEXT NOT NULL, update_id TEXT NOT NULL, seq INTEGER NOT NULL,
    update_name TEXT NOT NULL, payload TEXT NOT NULL, sent_at TEXT NOT NULL,
    PRIMARY KEY (name, run_id, update_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS lg_update_results (
    name TEXT NOT NULL, run_id TEXT NOT NULL, update_id TEXT NOT NULL, outcome TEXT NOT NULL,
    PRIMARY KEY (name, run_id, update_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS lg_idempotency (
    name TEXT NOT NULL, key TEXT NOT NULL, run_id TEXT NOT NULL, body_hash TEXT,
    expires_at REAL NOT NULL,
    PRIMARY KEY (name, key)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS lg_versions (
    name TEXT NOT NULL, version TEXT NOT NULL, rank INTEGER NOT NULL,
    PRIMARY KEY (name, version)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS lg_policies (
    name TEXT PRIMARY KEY, policy TEXT NOT NULL, recorded_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS lg_held (
    name TEXT NOT NULL, run_id TEXT NOT NULL, cancel_at TEXT, cancel_detail TEXT,
    pause_at TEXT, expires_at REAL NOT NULL,
    PRIMARY KEY (name, run_id)
) WITHOUT ROWID;
PRAGMA application_id = {APPLICATION_ID};
INSERT OR IGNORE INTO lg_meta (key, value) VALUES ('format_generation', '{FORMAT_GENERATION}');
"""
