"""SQLiteStore: every store guarantee in one SQLite file, shared by many processes.

Each state change is one ``BEGIN IMMEDIATE`` transaction: SQLite's write lock serializes
writers across processes, so a claim, a fenced append or a park reads and writes under one lock
and no update is lost under contention. Readers use WAL snapshots and never block writers.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal, ParamSpec, TypeVar
from urllib.parse import urlsplit

from lockgate._clock import iso
from lockgate._errors import (
    ConfigurationError,
    LockgateError,
    LockLost,
    RunFinishedError,
    RunGatedError,
    RunNotFoundError,
    RunOwnedError,
    StoreUnavailable,
)
from lockgate.journal._events import (
    RunEvent,
)
from lockgate.stores._base import Store, loaded_claim
from lockgate.stores._batch import NewRun
from lockgate.stores._gates import WaitReason, refill, wait_reason
from lockgate.stores._poison import PoisonPolicy
from lockgate.stores._records import (
    Submit,
    idempotency_conflict,
)
from lockgate.stores._types import Claims, RunControls, RunInfo, StoreMarker, list_cursor
from lockgate.stores._urls import JOURNAL_URL_ENV, construct, split_url, sqlite_path
from lockgate.stores.sqlite._chains import SQLiteChains
from lockgate.stores.sqlite._claims import SQLiteClaims
from lockgate.stores.sqlite._file import (
    SCHEMA,
    FileIdentity,
    check_library,
    check_local,
    create_if_missing,
    inspect_existing,
    migrate,
    open_failure,
    require_existing,
    resolve_path,
)
from lockgate.stores.sqlite._insight import INSIGHT_SCHEMA, SQLiteInsight
from lockgate.stores.sqlite._rows import dumps
from lockgate.stores.sqlite._translate import translated
from lockgate.stores.sqlite._triggers import TRIGGERS_SCHEMA, SQLiteTriggers
from lockgate.stores.sqlite._waits import SQLiteWaits

P = ParamSpec("P")
R = TypeVar("R")

DEFAULT_RETENTION_SECONDS = 7 * 86_400


def _event_from(row: sqlite3.Row, run_id: str) -> RunEvent:
    return RunEvent(
        kind=row["kind"],
        payload=json.loads(row["payload"]),
        run_id=run_id,
        schema_version=row["schema_version"],
        run_seq=row["seq"],
        headers=json.loads(row["headers"]),
    )


class SQLiteStore(SQLiteClaims, SQLiteWaits, SQLiteTriggers, SQLiteChains, SQLiteInsight, Store):
    """Durable store in one SQLite file, for any number of processes on one machine.

    The file is opened in WAL mode with ``synchronous`` ``full`` (a committed transaction
    survives a power cut) or ``normal`` (it survives a process crash; the last commits may be
    lost with the machine). ``retention_seconds`` is how long a finished run is kept before
    :meth:`run_maintenance` deletes it (None keeps it for good). ``held_ttl`` is how long a
    cancel or pause for a run id not yet submitted waits for that submit. ``clock`` judges
    leases, timers and retention: every process on one file must share it, so anything but the
    default is for tests.

    A missing (or empty) file is created, whole, when ``create`` is true (the default for a
    store opened in code; the ``lockgate`` commands other than ``worker`` and ``store init``
    pass false); ``created`` says whether this open made it. With ``create=False`` a missing
    file is refused, and nothing is created.

    The constructor refuses, with :class:`StoreFileError` and without writing to the file: a
    path that names no file, a file on a network filesystem, a database of another application
    or a damaged one, a file written by a newer lockgate, and an SQLite library too old.

    Once open, the store checks that its path still names the file it opened, and its
    ``-wal`` and ``-shm`` (by device and inode): before every claim, and at most 0.1 s apart
    on other calls. When one was deleted, moved or replaced, that call and every one
    after it raise :class:`StoreFileGone`, so nothing more goes to a file no other process
    sees, and a worker stops.
    """

    blocking_io = True

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        retention_seconds: int | None = DEFAULT_RETENTION_SECONDS,
        synchronous: Literal["full", "normal"] = "full",
        busy_timeout_s: float | None = None,
        lock_ttl: float = 30.0,
        held_ttl: float = 86_400.0,
        heartbeat_interval: float | None = None,
        max_replay_entries: int = 200_000,
        max_retries: int = 3,
        max_store_requeues: int = 20,
        create: bool = True,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if synchronous not in ("full", "normal"):
            raise ConfigurationError(
                f"SQLiteStore(synchronous=...) must be 'full' or 'normal', got {synchronous!r}"
            )
        if lock_ttl <= 0 or (heartbeat_interval is not None and heartbeat_interval <= 0):
            raise ConfigurationError("SQLiteStore lock_ttl and heartbeat_interval must be > 0")
        check_library()
        self.path = resolve_path(path)
        check_local(self.path)
        inspect_existing(self.path)
        if create:
            self.created = create_if_missing(self.path)
        else:
            require_existing(self.path)
            self.created = False
        self.retention_seconds = retention_seconds
        self.synchronous = synchronous
        self.busy_timeout_s = 30.0 if busy_timeout_s is None else busy_timeout_s
        self.lock_ttl = lock_ttl
        self.held_ttl = held_ttl
        self.heartbeat_interval = heartbeat_interval or lock_ttl / 3
        self.max_replay_entries = max_replay_entries
        self.max_retries = max_retries
        self.max_store_requeues = max_store_requeues
        self._clock = clock
        self._mutex = threading.RLock()
        self._conn = self._connect()
        self._identity = FileIdentity.of(self.path)

    @classmethod
    def from_url(cls, url: str, **options: Any) -> SQLiteStore:
        """``sqlite:///relative.db`` or ``sqlite:////absolute.db``, with constructor options
        in the query string or as keywords, parsed and checked as :func:`open_store` does."""
        if urlsplit(url).scheme != "sqlite":
            raise ConfigurationError(
                f"not an SQLite store URL: {url!r} (use sqlite:///relative.db or "
                f"sqlite:////absolute/path.db)"
            )
        if os.environ.get(JOURNAL_URL_ENV, "").strip():
            raise ConfigurationError(
                f"{JOURNAL_URL_ENV} is set: a journal URL keeps the journals of a Valkey store; "
                f"sqlite:// stores keep their own: unset {JOURNAL_URL_ENV}, or use a valkey:// "
                f"store"
            )
        _scheme, location, query = split_url(url)
        defaults = options.pop("option_defaults", None)
        return construct("sqlite", cls, (sqlite_path(url, location),), query, options, defaults)

    def _connect(self) -> sqlite3.Connection:
        try:
            # mode=rw: the file was made whole above, so this connection never creates one
            # (if the file went in between, this fails instead of starting an empty store).
            conn = sqlite3.connect(
                f"{self.path.as_uri()}?mode=rw",
                uri=True,
                timeout=self.busy_timeout_s,
                isolation_level=None,
                check_same_thread=False,
            )
            conn.row_factory = sqlite3.Row
            mode = self._enter_wal(conn)
            if str(mode).lower() != "wal":
                raise ConfigurationError(f"{self.path}: SQLite refused WAL mode ({mode})")
            conn.execute(f"PRAGMA synchronous = {self.synchronous.upper()}")
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_s * 1000)}")
            # One write transaction, so processes opening a new file at once create it once.
            migrate(conn)
            conn.executescript(
                f"BEGIN IMMEDIATE;\n{SCHEMA}\n{TRIGGERS_SCHEMA}\n{INSIGHT_SCHEMA}\nCOMMIT;"
            )
        except sqlite3.Error as exc:
            raise open_failure(self.path, exc) from exc
        return conn

    def _enter_wal(self, conn: sqlite3.Connection) -> str:
        """Switch to WAL. Processes opening a new file at the same moment can find it locked
        while one of them converts it, and SQLite answers that at once rather than after the
        busy timeout: wait and try again within the timeout."""
        deadline = time.monotonic() + self.busy_timeout_s
        delay = 0.005
        while True:
            try:
                return str(conn.execute("PRAGMA journal_mode = WAL").fetchone()[0])
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() >= deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 0.2)

    def close(self) -> None:
        with self._mutex:
            self._conn.close()

    @translated
    def create_run(
        self,
        submit: Submit,
        run_id: str,
        *,
        headers: dict[str, str] | None = None,
        idempotency_key: str | None = None,
        idempotency_body_hash: str | None = None,
        idempotency_ttl: int = 86_400,
    ) -> str:
        with self._write() as db:
            run = NewRun(
                submit, run_id, headers, idempotency_key, idempotency_body_hash, idempotency_ttl
            )
            return self._create_in(db, run, self._clock())

    @translated
    def create_runs(self, runs: Sequence[NewRun]) -> list[str | LockgateError]:
        """Group commit (:class:`~lockgate.stores._batch.GroupCommitStore`): every run in one
        transaction, each in a savepoint its own refusal rolls back."""
        answers: list[str | LockgateError] = []
        with self._write() as db:
            now = self._clock()
            for run in runs:
                db.execute("SAVEPOINT lg_new_run")
                try:
                    answers.append(self._create_in(db, run, now))
                except LockgateError as exc:
                    db.execute("ROLLBACK TO lg_new_run")
                    answers.append(exc)
                db.execute("RELEASE lg_new_run")
        return answers

    def _create_in(self, db: sqlite3.Connection, run: NewRun, now: float) -> str:
        """Create ``run`` in the open transaction ``db``; its id, or the first run's for an
        idempotency key seen before."""
        submit, run_id, key = run.submit, run.run_id, run.idempotency_key
        name = submit.name
        if key is not None:
            record = db.execute(
                "SELECT run_id, body_hash FROM lg_idempotency WHERE name = ? AND key = ? "
                "AND expires_at > ?",
                (name, key, now),
            ).fetchone()
            if record is not None:
                first_hash = record["body_hash"]
                if (
                    run.idempotency_body_hash is not None
                    and first_hash is not None
                    and first_hash != run.idempotency_body_hash
                ):
                    raise idempotency_conflict(name, key, record["run_id"])
                return str(record["run_id"])
        self._insert_run(db, submit, run_id, run.headers, now)
        if key is not None:
            db.execute(
                "INSERT OR REPLACE INTO lg_idempotency (name, key, run_id, body_hash, "
                "expires_at) VALUES (?, ?, ?, ?, ?)",
                (
                    name,
                    key,
                    run_id,
                    run.idempotency_body_hash,
                    now + submit.keep_key_for(run.idempotency_ttl, now),
                ),
            )
        return run_id

    @translated
    def claim_next_run(
        self,
        name: str,
        worker_id: str,
        worker_version: str | None = None,
        *,
        prefer: Sequence[int] = (),
    ) -> str | None:
        claimed = self._claim_many(name, [worker_id], worker_version)
        return claimed[0] if claimed else None

    @translated
    def claim_next_runs_loaded(
        self,
        name: str,
        leases: Sequence[str],
        worker_version: str | None = None,
        *,
        prefer: Sequence[int] = (),
    ) -> Claims:
        claimed = self._claim_many(name, leases, worker_version)
        return Claims(
            (loaded_claim(self, name, run_id) for run_id in claimed), claimed.next_token_in
        )

    @translated
    def claim_run(
        self, name: str, run_id: str, worker_id: str, *, poison: PoisonPolicy | None = None
    ) -> None:
        self._check_file(now=True)  # never claim from a file its path no longer names
        with self._write() as db:
            row = self._require(db, name, run_id)
            if row["terminal"] is not None:
                raise RunFinishedError(f"run {run_id!r} of {name!r} has ended")
            if self._live(row) and row["lock"] != worker_id:
                raise RunOwnedError(f"run {run_id!r} is held by another lease")
            if row["lock"] is not None and row["lock"] != worker_id:
                # The last holder's lease lapsed: that attempt is gone, and counts as one.
                self._lapsed(db, row, poison)
                row = self._require(db, name, run_id)
            if row["terminal"] is None:
                if not (self._live(row) and row["lock"] == worker_id):
                    refused = self._gated(db, row, self._clock())
                    if refused is not None:
                        raise RunGatedError(
                            f"run {run_id!r} of {name!r} waits on its gate: {refused.reason}"
                        )
                self._claim(db, row, worker_id)
        if row["terminal"] is not None:  # the requeue spent the budget (and is committed)
            raise RunFinishedError(f"run {run_id!r} of {name!r} ran out of retries")

    @translated
    def release_run(self, name: str, run_id: str, worker_id: str | None = None) -> None:
        with self._read() as db:
            row = self._row(db, name, run_id)
        if row is None or (
            row["lock"] is None and (row["terminal"] is not None or row["queued"] is not None)
        ):
            return  # nothing to release: spare the write lock (the usual case after a terminal)
        with self._write() as db:
            row = self._row(db, name, run_id)
            if row is None or (worker_id is not None and row["lock"] != worker_id):
                return
            if row["lock"] is not None:
                self._set(db, row, lock=None)
            if row["terminal"] is None and row["wait"] is None:
                self._enqueue(db, name, run_id)

    @translated
    def requeue_run(
        self,
        name: str,
        run_id: str,
        worker_id: str | None = None,
        *,
        reason: str = "owner_gone",
    ) -> None:
        with self._write() as db:
            row = self._row(db, name, run_id)
            if row is None or (worker_id is not None and row["lock"] != worker_id):
                return
            self._requeue(db, row, reason)

    @translated
    def recover_pending_runs(
        self, name: str, now: float | None = None, *, poison: PoisonPolicy | None = None
    ) -> list[str]:
        recovered = []
        with self._write() as db:
            now = self._clock() if now is None else now
            rows = db.execute(
                "SELECT * FROM lg_runs WHERE name = ? AND lock IS NOT NULL AND lock_expires <= ?",
                (name, now),
            ).fetchall()
            for row in rows:
                if row["terminal"] is None:
                    recovered.append(str(row["run_id"]))
                self._lapsed(db, row, poison)
        return recovered

    @translated
    def note_loop_blocked(self, name: str, run_id: str, lease: str) -> bool:
        with self._write() as db:
            cursor = db.execute(
                "UPDATE lg_runs SET blocked_lease = lock, blocked_until = lock_expires "
                "WHERE name = ? AND run_id = ? AND lock = ? AND terminal IS NULL",
                (name, run_id, lease),
            )
            return cursor.rowcount > 0

    @translated
    def explain_wait(self, name: str, run_id: str) -> WaitReason | None:
        with self._read() as db:
            row = self._require(db, name, run_id)
            if row["queued"] is None:
                return None
            position = (
                1
                + db.execute(
                    "SELECT COUNT(*) FROM lg_runs WHERE name = ? AND bucket = ? AND queued < ?",
                    (name, row["bucket"], row["queued"]),
                ).fetchone()[0]
            )
            gates = self._gates(row)
            holding = db.execute(
                "SELECT COUNT(*) FROM lg_runs WHERE name = ? AND ckey = ? AND lock IS NOT NULL",
                (name, gates.concurrency_key),
            ).fetchone()[0]
            tokens = None
            if gates.rated:
                bucket = db.execute(
                    "SELECT tokens, updated_at FROM lg_tokens WHERE name = ? AND key = ?",
                    (name, gates.rate_key),
                ).fetchone()
                tokens = (
                    float(gates.rate_burst or 1)
                    if bucket is None
                    else refill(bucket["tokens"], bucket["updated_at"], self._clock(), gates)
                )
        return wait_reason(gates, int(position), int(holding), tokens)

    @translated
    def get_pending_count(self, name: str) -> int:
        with self._read() as db:
            row = db.execute(
                "SELECT COUNT(*) FROM lg_runs WHERE name = ? AND queued IS NOT NULL", (name,)
            ).fetchone()
        return int(row[0])

    @translated
    def heartbeat(self, name: str, run_id: str, worker_id: str) -> tuple[str | None, str | None]:
        with self._write() as db:
            row = self._require(db, name, run_id)
            if row["lock"] != worker_id or not self._live(row):
                raise LockLost(f"lease {worker_id!r} no longer holds run {run_id!r}")
            self._set(db, row, lock_expires=self._clock() + self.lock_ttl)
            return row["cancel_at"], row["pause_at"]

    @translated
    def lock_holder(self, name: str, run_id: str) -> str | None:
        with self._read() as db:
            row = self._row(db, name, run_id)
        return str(row["lock"]) if row is not None and self._live(row) else None

    @translated
    def request_cancel(
        self, name: str, run_id: str, *, detail: dict[str, Any] | None = None
    ) -> str:
        with self._write() as db:
            row = self._row(db, name, run_id)
            if row is None:
                return self._hold(db, name, run_id, cancel_detail=dict(detail or {}))
            if row["cancel_at"] is not None or row["terminal"] is not None:
                return str(row["cancel_at"] or iso(self._clock()))
            at = iso(self._clock())
            self._latch_cancel(db, row, at, dict(detail or {}))
            return at

    @translated
    def get_run_controls(self, name: str, run_id: str) -> tuple[str | None, str | None]:
        with self._read() as db:
            row = db.execute(
                "SELECT cancel_at, pause_at FROM lg_runs WHERE name = ? AND run_id = ?",
                (name, run_id),
            ).fetchone()
        if row is None:
            raise RunNotFoundError(name, run_id)
        return row["cancel_at"], row["pause_at"]

    @translated
    def poll_run(self, name: str, run_id: str) -> RunControls:
        with self._read() as db:
            row = db.execute(
                "SELECT cancel_at, pause_at, EXISTS (SELECT 1 FROM lg_updates u WHERE u.name = "
                "r.name AND u.run_id = r.run_id) AS updates FROM lg_runs r WHERE r.name = ? AND "
                "r.run_id = ?",
                (name, run_id),
            ).fetchone()
        if row is None:
            raise RunNotFoundError(name, run_id)
        return RunControls(row["cancel_at"], row["pause_at"], bool(row["updates"]))

    @translated
    def get_run(self, name: str, run_id: str) -> RunInfo | None:
        with self._read() as db:
            row = self._row(db, name, run_id)
        return self._info(row) if row is not None else None

    @translated
    def list_runs(
        self,
        name: str,
        *,
        limit: int = 50,
        cursor: str | None = None,
        owner: str | None = None,
    ) -> tuple[list[RunInfo], str | None]:
        query = "SELECT * FROM lg_runs WHERE name = ?"
        args: list[Any] = [name]
        if owner is not None:
            query += " AND owner = ?"
            args.append(owner)
        if cursor:
            query += " AND ord < ?"
            args.append(list_cursor(cursor))
        query += " ORDER BY ord DESC LIMIT ?"
        args.append(limit + 1)
        with self._read() as db:
            rows = db.execute(query, args).fetchall()
        page = rows[:limit]
        more = len(rows) > limit
        return [self._info(r) for r in page], (str(page[-1]["ord"]) if more and page else None)

    @translated
    def ping(self) -> None:
        self._check_file(now=True)
        with self._read() as db:
            db.execute("SELECT 1").fetchone()

    @translated
    def ensure_marker(self) -> bool:
        """The marker is the ``marker`` row of ``lg_meta``. A file deleted or replaced is
        :class:`StoreFileGone` already; a file whose marker row is gone was emptied in place
        (its rows deleted), which is this store losing its data."""
        with self._write() as db:
            if db.execute("SELECT 1 FROM lg_meta WHERE key = 'marker'").fetchone() is not None:
                return False
            generation = db.execute(
                "SELECT value FROM lg_meta WHERE key = 'format_generation'"
            ).fetchone()
            layout = f"sqlite-{generation['value'] if generation is not None else ''}"
            import uuid  # here: uuid imports platform, a cost for every reader of the store

            marker = StoreMarker(uuid.uuid4().hex, self._clock(), layout)
            db.execute(
                "INSERT INTO lg_meta (key, value) VALUES ('marker', ?)",
                (json.dumps(marker.to_fields()),),
            )
            return True

    @translated
    def read_marker(self) -> StoreMarker | None:
        with self._read() as db:
            row = db.execute("SELECT value FROM lg_meta WHERE key = 'marker'").fetchone()
        return StoreMarker.from_fields(json.loads(row["value"])) if row is not None else None

    @translated
    def run_maintenance(self, now: float | None = None) -> int:
        """Delete finished runs older than ``retention_seconds`` (with their journals, signals
        and updates), expired idempotency records and expired held controls. Returns how many
        rows went."""
        with self._write() as db:
            now = self._clock() if now is None else now
            removed = 0
            if self.retention_seconds is not None:
                cutoff = now - self.retention_seconds
                old = db.execute(
                    "SELECT name, run_id FROM lg_runs WHERE ended_at IS NOT NULL AND ended_at < ?",
                    (cutoff,),
                ).fetchall()
                for row in old:
                    key = (row["name"], row["run_id"])
                    for table in (
                        "lg_events",
                        "lg_signals",
                        "lg_signal_keys",
                        "lg_updates",
                        "lg_update_results",
                        "lg_runs",
                    ):
                        db.execute(f"DELETE FROM {table} WHERE name = ? AND run_id = ?", key)
                removed += len(old)
            removed += db.execute(
                "DELETE FROM lg_idempotency WHERE expires_at <= ?", (now,)
            ).rowcount
            removed += db.execute("DELETE FROM lg_held WHERE expires_at <= ?", (now,)).rowcount
        return removed

    @translated
    def append_events(
        self, name: str, run_id: str, events: list[RunEvent], *, fence: str | None = None
    ) -> None:
        with self._write() as db:
            row = self._require(db, name, run_id)
            if not events:
                return
            if fence is not None:
                self._check_fence(row, fence)
            self._append(db, row, events, row["epoch"] if fence is not None else None)

    @translated
    def load_run(self, name: str, run_id: str, *, max_events: int | None = None) -> list[RunEvent]:
        query = "SELECT * FROM lg_events WHERE name = ? AND run_id = ? ORDER BY seq"
        args: list[Any] = [name, run_id]
        if max_events is not None:
            query += " LIMIT ?"
            args.append(max_events)
        with self._read() as db:
            rows = db.execute(query, args).fetchall()
        return [_event_from(r, run_id) for r in rows]

    @translated
    def replay_run(
        self, name: str, run_id: str, *, cursor: Any | None = None, count: int | None = None
    ) -> tuple[list[RunEvent], Any | None]:
        after = int(cursor) if cursor is not None else 0
        query = "SELECT * FROM lg_events WHERE name = ? AND run_id = ? AND seq > ? ORDER BY seq"
        args: list[Any] = [name, run_id, after]
        if count is not None:
            query += " LIMIT ?"
            args.append(count + 1)
        with self._read() as db:
            rows = db.execute(query, args).fetchall()
        page = rows[:count] if count is not None else rows
        more = count is not None and len(rows) > count
        events = [_event_from(r, run_id) for r in page]
        return events, (events[-1].run_seq if more and events else None)

    @translated
    def append_copies(self, name: str, run_id: str, events: Sequence[RunEvent]) -> None:
        """Keep copies of another store's events, each at its own ``run_seq`` and with its
        headers, once: a copy already kept is skipped. This is how SQLiteStore serves as the
        event log of a :class:`CompositeStore`; the run needs no row here."""
        with self._write() as db:
            db.executemany(
                "INSERT OR IGNORE INTO lg_events (name, run_id, seq, kind, payload, "
                "schema_version, headers) VALUES (?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        name,
                        run_id,
                        event.run_seq,
                        event.kind,
                        dumps(event.payload),
                        event.schema_version,
                        dumps(dict(event.headers)),
                    )
                    for event in events
                ],
            )

    @translated
    def read_events_from(self, name: str, run_id: str, after_seq: int = 0) -> list[RunEvent]:
        """The run's events after ``run_seq`` ``after_seq``: a suffix read."""
        return self.replay_run(name, run_id, cursor=after_seq)[0]

    @translated
    def get_last_event(self, name: str, run_id: str) -> RunEvent | None:
        with self._read() as db:
            row = db.execute(
                "SELECT * FROM lg_events WHERE name = ? AND run_id = ? ORDER BY seq DESC LIMIT 1",
                (name, run_id),
            ).fetchone()
        return _event_from(row, run_id) if row is not None else None

    @translated
    def get_idempotency_run(self, name: str, key: str) -> str | None:
        with self._read() as db:
            row = db.execute(
                "SELECT run_id FROM lg_idempotency WHERE name = ? AND key = ? AND expires_at > ?",
                (name, key, self._clock()),
            ).fetchone()
        return str(row["run_id"]) if row is not None else None

    @translated
    def set_idempotency_run(self, name: str, key: str, run_id: str, ttl: int = 86_400) -> bool:
        with self._write() as db:
            now = self._clock()
            taken = db.execute(
                "SELECT 1 FROM lg_idempotency WHERE name = ? AND key = ? AND expires_at > ?",
                (name, key, now),
            ).fetchone()
            if taken is not None:
                return False
            db.execute(
                "INSERT OR REPLACE INTO lg_idempotency (name, key, run_id, body_hash, "
                "expires_at) VALUES (?, ?, ?, NULL, ?)",
                (name, key, run_id, now + ttl),
            )
            return True

    @translated
    def get_idempotency_body_hash(self, name: str, key: str) -> str | None:
        with self._read() as db:
            row = db.execute(
                "SELECT body_hash FROM lg_idempotency WHERE name = ? AND key = ? "
                "AND expires_at > ?",
                (name, key, self._clock()),
            ).fetchone()
        return row["body_hash"] if row is not None else None

    @translated
    def register_version(self, name: str, version: str) -> int:
        with self._write() as db:
            db.execute(
                "INSERT OR IGNORE INTO lg_versions (name, version, rank) VALUES (?, ?, (SELECT "
                "COALESCE(MAX(rank), 0) + 1 FROM lg_versions WHERE name = ?))",
                (name, version, name),
            )
            row = db.execute(
                "SELECT rank FROM lg_versions WHERE name = ? AND version = ?", (name, version)
            ).fetchone()
        return int(row["rank"])

    @translated
    def version_rank(self, name: str, version: str) -> int | None:
        with self._read() as db:
            row = db.execute(
                "SELECT rank FROM lg_versions WHERE name = ? AND version = ?", (name, version)
            ).fetchone()
        return int(row["rank"]) if row is not None else None

    @translated
    def record_workflow_policy(self, name: str, policy: dict[str, Any]) -> None:
        with self._write() as db:
            db.execute(
                "INSERT OR REPLACE INTO lg_policies (name, policy, recorded_at) VALUES (?, ?, ?)",
                (name, dumps(policy), self._clock()),
            )

    @translated
    def get_workflow_policy(self, name: str) -> dict[str, Any] | None:
        with self._read() as db:
            row = db.execute("SELECT policy FROM lg_policies WHERE name = ?", (name,)).fetchone()
        return json.loads(row["policy"]) if row is not None else None

    @translated
    def info(self) -> dict[str, Any]:
        """What an operator asks first: the file, its format, its size and what it holds."""
        with self._read() as db:
            counts = db.execute(
                "SELECT name, COALESCE(terminal, CASE WHEN queued IS NOT NULL THEN 'pending' "
                "WHEN wait IS NOT NULL THEN 'parked' ELSE 'in_progress' END) AS state, COUNT(*) "
                "AS n FROM lg_runs GROUP BY name, state ORDER BY name, state"
            ).fetchall()
            generation = db.execute(
                "SELECT value FROM lg_meta WHERE key = 'format_generation'"
            ).fetchone()
            pages = db.execute("PRAGMA page_count").fetchone()[0]
            page_size = db.execute("PRAGMA page_size").fetchone()[0]
        workflows: dict[str, dict[str, int]] = {}
        for row in counts:
            workflows.setdefault(row["name"], {})[row["state"]] = int(row["n"])
        return {
            "path": str(self.path),
            "format_generation": int(generation["value"]),
            "sqlite_version": sqlite3.sqlite_version,
            "journal_mode": "wal",
            "synchronous": self.synchronous,
            "size_bytes": int(pages) * int(page_size),
            "retention_seconds": self.retention_seconds,
            "workflows": workflows,
        }

    def backup(self, dest: str | os.PathLike[str]) -> Path:
        """Copy the store, consistently, while workers keep running, to a new file ``dest``
        readable only by its owner. ``dest`` must not exist."""
        target = Path(os.fspath(dest)).expanduser().absolute()
        if not target.parent.is_dir():
            raise ConfigurationError(f"the directory {target.parent} does not exist")
        try:
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            raise ConfigurationError(
                f"{target} already exists; a backup is written to a new file only"
            ) from None
        os.close(fd)
        try:
            copy = sqlite3.connect(target)
            try:
                with self._mutex:
                    self._conn.backup(copy)
            finally:
                copy.close()
        except sqlite3.Error as exc:
            target.unlink(missing_ok=True)
            raise StoreUnavailable(f"backup of {self.path} to {target} failed: {exc}") from exc
        except BaseException:
            target.unlink(missing_ok=True)
            raise
        return target
