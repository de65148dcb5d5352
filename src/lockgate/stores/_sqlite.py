"""SQLiteStore: every store guarantee in one SQLite file, shared by many processes.

Each state change is one ``BEGIN IMMEDIATE`` transaction: SQLite's write lock serializes
writers across processes, so a claim, a fenced append or a park reads and writes under one lock
and no update is lost under contention. Readers use WAL snapshots and never block writers.
"""

from __future__ import annotations

import functools
import json
import os
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal, ParamSpec, TypeVar
from urllib.parse import urlsplit

from lockgate._clock import iso
from lockgate._errors import (
    ConfigurationError,
    DuplicateRunError,
    EventAfterTerminal,
    IdempotencyConflict,
    LockLost,
    RunFinishedError,
    RunNotFoundError,
    RunOwnedError,
    StoreUnavailable,
)
from lockgate.journal._events import (
    EPOCH_HEADER,
    EventKind,
    RunEvent,
    RunStatus,
    terminal_status,
)
from lockgate.stores._base import Store
from lockgate.stores._records import (
    PROGRESS_KINDS,
    Submit,
    derive_status,
    requeue_outcome,
    terminated_payload,
)
from lockgate.stores._sqlite_file import (
    SCHEMA,
    check_library,
    check_local,
    inspect_existing,
    resolve_path,
)
from lockgate.stores._types import RunInfo, TerminateOutcome, WaitOutcome, WaitSpec

P = ParamSpec("P")
R = TypeVar("R")

DEFAULT_RETENTION_SECONDS = 7 * 86_400


def _translated(method: Callable[P, R]) -> Callable[P, R]:
    """Turn a failure of the SQLite library into StoreUnavailable, chained to its cause."""

    @functools.wraps(method)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return method(*args, **kwargs)
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"SQLite failed in {method.__name__}: {exc}") from exc

    return wrapper


def _dumps(value: Any) -> str:
    return json.dumps(value, allow_nan=False, separators=(",", ":"))


def _event_from(row: sqlite3.Row, run_id: str) -> RunEvent:
    return RunEvent(
        kind=row["kind"],
        payload=json.loads(row["payload"]),
        run_id=run_id,
        schema_version=row["schema_version"],
        run_seq=row["seq"],
        headers=json.loads(row["headers"]),
    )


class SQLiteStore(Store):
    """Durable store in one SQLite file, for any number of processes on one machine.

    The file is opened in WAL mode with ``synchronous`` ``full`` (a committed transaction
    survives a power cut) or ``normal`` (it survives a process crash; the last commits may be
    lost with the machine). ``retention_seconds`` is how long a finished run is kept before
    :meth:`run_maintenance` deletes it (None keeps it for good). ``held_ttl`` is how long a
    cancel or pause for a run id not yet submitted waits for that submit. ``clock`` judges
    leases, timers and retention: every process on one file must share it, so anything but the
    default is for tests.

    The constructor refuses, with :class:`StoreFileError` and without writing to the file: a
    path that names no file, a file on a network filesystem, a database of another application
    or a damaged one, a file written by a newer lockgate, and an SQLite library too old.
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

    @classmethod
    def from_url(cls, url: str, **options: Any) -> SQLiteStore:
        """``sqlite:///relative.db`` or ``sqlite:////absolute.db``; ``options`` as the
        constructor's."""
        parts = urlsplit(url)
        if parts.scheme != "sqlite" or not parts.path.startswith("/") or parts.netloc:
            raise ConfigurationError(
                f"not an SQLite store URL: {url!r} (use sqlite:///relative.db or "
                f"sqlite:////absolute/path.db)"
            )
        return cls(parts.path[1:], **options)

    def _connect(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(
                self.path,
                timeout=self.busy_timeout_s,
                isolation_level=None,
                check_same_thread=False,
            )
            conn.row_factory = sqlite3.Row
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise ConfigurationError(f"{self.path}: SQLite refused WAL mode ({mode})")
            conn.execute(f"PRAGMA synchronous = {self.synchronous.upper()}")
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_s * 1000)}")
            # One write transaction, so processes opening a new file at once create it once.
            conn.executescript(f"BEGIN IMMEDIATE;\n{SCHEMA}\nCOMMIT;")
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"cannot open SQLite store {self.path}: {exc}") from exc
        return conn

    def close(self) -> None:
        with self._mutex:
            self._conn.close()

    # -- transactions and rows -----------------------------------------------------------------

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._mutex:
            conn = self._conn
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        with self._mutex:
            conn = self._conn
            conn.execute("BEGIN")
            try:
                yield conn
            finally:
                conn.execute("COMMIT")

    def _row(self, db: sqlite3.Connection, name: str, run_id: str) -> sqlite3.Row | None:
        row: sqlite3.Row | None = db.execute(
            "SELECT * FROM lg_runs WHERE name = ? AND run_id = ?", (name, run_id)
        ).fetchone()
        return row

    def _require(self, db: sqlite3.Connection, name: str, run_id: str) -> sqlite3.Row:
        row = self._row(db, name, run_id)
        if row is None:
            raise RunNotFoundError(name, run_id)
        return row

    def _live(self, row: sqlite3.Row) -> bool:
        return row["lock"] is not None and row["lock_expires"] > self._clock()

    def _check_fence(self, row: sqlite3.Row, lease: str) -> None:
        if row["terminal"] is not None:
            raise EventAfterTerminal(f"run {row['run_id']!r} has ended; nothing more is journaled")
        if row["lock"] != lease or not self._live(row):
            raise LockLost(f"lease {lease!r} no longer holds run {row['run_id']!r}")

    def _set(self, db: sqlite3.Connection, row: sqlite3.Row, **fields: Any) -> None:
        assignments = ", ".join(f"{column} = ?" for column in fields)
        db.execute(
            f"UPDATE lg_runs SET {assignments} WHERE name = ? AND run_id = ?",
            (*fields.values(), row["name"], row["run_id"]),
        )

    def _enqueue(self, db: sqlite3.Connection, name: str, run_id: str) -> None:
        """Queue the run at the back, unless it is queued already (it keeps its place) or
        has ended."""
        db.execute(
            "UPDATE lg_runs SET queued = (SELECT COALESCE(MAX(queued), 0) + 1 FROM lg_runs "
            "WHERE name = ?) WHERE name = ? AND run_id = ? AND queued IS NULL "
            "AND terminal IS NULL",
            (name, name, run_id),
        )

    def _append(
        self,
        db: sqlite3.Connection,
        row: sqlite3.Row,
        events: Sequence[RunEvent],
        epoch: int | None,
    ) -> None:
        """Append without checks other than the terminal rule; the caller checked the fence."""
        if row["terminal"] is not None or any(e.is_terminal for e in events[:-1]):
            raise EventAfterTerminal(f"run {row['run_id']!r}: no event may follow a terminal one")
        seq = row["last_seq"]
        progress = False
        for event in events:
            seq += 1
            headers = (
                {**event.headers, EPOCH_HEADER: str(epoch)}
                if epoch is not None
                else dict(event.headers)
            )
            db.execute(
                "INSERT INTO lg_events (name, run_id, seq, kind, payload, schema_version, "
                "headers) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    row["name"],
                    row["run_id"],
                    seq,
                    event.kind,
                    _dumps(event.payload),
                    event.schema_version,
                    _dumps(headers),
                ),
            )
            progress = progress or event.kind in PROGRESS_KINDS
        fields: dict[str, Any] = {"last_seq": seq}
        if progress:
            fields.update(owner_gone=0, store_requeues=0)
        if events and events[-1].is_terminal:
            # A run that has ended holds nothing: its lock goes with its queue place and wait,
            # so the holder's release that follows needs no write.
            fields.update(
                terminal=terminal_status(events[-1]).value,
                ended_at=self._clock(),
                queued=None,
                wait=None,
                wait_due=None,
                lock=None,
            )
        self._set(db, row, **fields)

    def _event(self, row: sqlite3.Row, kind: str, payload: dict[str, Any]) -> RunEvent:
        return RunEvent(kind=kind, payload=payload, run_id=row["run_id"])

    def _wait(self, row: sqlite3.Row) -> WaitSpec | None:
        return WaitSpec.from_dict(json.loads(row["wait"])) if row["wait"] else None

    def _status(self, row: sqlite3.Row) -> RunStatus:
        wait = self._wait(row)
        return derive_status(
            terminal=RunStatus(row["terminal"]) if row["terminal"] else None,
            lock_live=self._live(row),
            lock_set=row["lock"] is not None,
            wait_kind=wait.kind if wait is not None else None,
            queued=row["queued"] is not None,
        )

    def _info(self, row: sqlite3.Row) -> RunInfo:
        return RunInfo(
            name=row["name"],
            run_id=row["run_id"],
            status=self._status(row),
            submitted_at=row["submitted_at"],
            params=json.loads(row["params"]),
            owner=row["owner"],
            metadata=json.loads(row["metadata"]),
            version=row["version"],
            version_behavior=row["version_behavior"],
            lock_holder=row["lock"] if self._live(row) else None,
            wait=self._wait(row),
            cancel_requested_at=row["cancel_at"],
        )

    def _claim(self, db: sqlite3.Connection, row: sqlite3.Row, lease: str) -> None:
        same = row["lock"] == lease and self._live(row)
        self._set(
            db,
            row,
            queued=None,
            lock=lease,
            lock_expires=self._clock() + self.lock_ttl,
            epoch=row["epoch"] if same else row["epoch"] + 1,
        )

    def _requeue(self, db: sqlite3.Connection, row: sqlite3.Row, reason: str) -> None:
        self._set(db, row, lock=None)
        if row["terminal"] is not None:
            return
        owner_gone, store_requeues, kind, payload = requeue_outcome(
            reason,
            row["owner_gone"],
            row["store_requeues"],
            self.max_retries,
            self.max_store_requeues,
        )
        self._set(db, row, owner_gone=owner_gone, store_requeues=store_requeues)
        self._append(db, row, [self._event(row, kind, payload)], None)
        if kind == EventKind.RUN_REQUEUED:
            self._enqueue(db, row["name"], row["run_id"])

    # -- lifecycle -----------------------------------------------------------------------------

    @_translated
    def submit_run(
        self,
        name: str,
        run_id: str,
        params: dict[str, Any],
        *,
        metadata: dict[str, Any] | None = None,
        owner: str | None = None,
        idempotency_key: str | None = None,
        idempotency_body_hash: str | None = None,
        idempotency_ttl: int = 86_400,
        version: str = "",
        version_behavior: str = "pinned",
        concurrency_key: str | None = None,
        concurrency_max: int | None = None,
        rate_key: str | None = None,
        rate_per_second: float | None = None,
        rate_burst: int | None = None,
        provenance: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        start_at: float | None = None,
    ) -> str:
        submit = Submit(
            name,
            params,
            metadata,
            owner,
            version,
            version_behavior,
            concurrency_key,
            concurrency_max,
            rate_key,
            rate_per_second,
            rate_burst,
            provenance,
            start_at,
        )
        with self._write() as db:
            now = self._clock()
            if idempotency_key is not None:
                record = db.execute(
                    "SELECT run_id, body_hash FROM lg_idempotency WHERE name = ? AND key = ? "
                    "AND expires_at > ?",
                    (name, idempotency_key, now),
                ).fetchone()
                if record is not None:
                    first_hash = record["body_hash"]
                    if (
                        idempotency_body_hash is not None
                        and first_hash is not None
                        and first_hash != idempotency_body_hash
                    ):
                        raise IdempotencyConflict(
                            f"idempotency key {idempotency_key!r} of {name!r} was first used "
                            f"for a different request (run {record['run_id']!r}); that run is "
                            f"unchanged"
                        )
                    return str(record["run_id"])
            if self._row(db, name, run_id) is not None:
                raise DuplicateRunError(name, run_id)
            wait = (
                WaitSpec(kind="start", wait_id="start", call_index=-1, due_at=start_at)
                if submit.delayed(now)
                else None
            )
            db.execute(
                "INSERT INTO lg_runs (name, run_id, ord, params, metadata, owner, version, "
                "version_behavior, submitted_at, wait, wait_due) VALUES (?, ?, (SELECT "
                "COALESCE(MAX(ord), 0) + 1 FROM lg_runs WHERE name = ?), ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    name,
                    run_id,
                    name,
                    _dumps(params),
                    _dumps(metadata or {}),
                    owner,
                    version,
                    version_behavior,
                    now,
                    _dumps(wait.to_dict()) if wait else None,
                    wait.due_at if wait else None,
                ),
            )
            row = self._require(db, name, run_id)
            self._append(db, row, submit.opening_events(run_id, now, headers), None)
            if wait is None:
                self._enqueue(db, name, run_id)
            self._apply_held(db, name, run_id, now)
            if idempotency_key is not None:
                delay = max(0.0, (start_at or now) - now)
                db.execute(
                    "INSERT OR REPLACE INTO lg_idempotency (name, key, run_id, body_hash, "
                    "expires_at) VALUES (?, ?, ?, ?, ?)",
                    (
                        name,
                        idempotency_key,
                        run_id,
                        idempotency_body_hash,
                        now + idempotency_ttl + delay,
                    ),
                )
        return run_id

    def _apply_held(self, db: sqlite3.Connection, name: str, run_id: str, now: float) -> None:
        """A cancel or pause asked for this id before it was submitted takes effect now."""
        held = db.execute(
            "SELECT cancel_at, cancel_detail, pause_at FROM lg_held WHERE name = ? "
            "AND run_id = ? AND expires_at > ?",
            (name, run_id, now),
        ).fetchone()
        if held is None:
            return
        db.execute("DELETE FROM lg_held WHERE name = ? AND run_id = ?", (name, run_id))
        if held["pause_at"] is not None:
            self._latch_pause(db, self._require(db, name, run_id), held["pause_at"])
        if held["cancel_at"] is not None:
            detail = json.loads(held["cancel_detail"] or "{}")
            self._latch_cancel(db, self._require(db, name, run_id), held["cancel_at"], detail)

    @_translated
    def claim_next_run(
        self,
        name: str,
        worker_id: str,
        worker_version: str | None = None,
        *,
        prefer: Sequence[int] = (),
    ) -> str | None:
        with self._read() as db:
            queued = db.execute(
                "SELECT 1 FROM lg_runs WHERE name = ? AND queued IS NOT NULL LIMIT 1", (name,)
            ).fetchone()
        if queued is None:
            return None  # an idle poll takes no write lock
        with self._write() as db:
            now = self._clock()
            rows = db.execute(
                "SELECT * FROM lg_runs WHERE name = ? AND queued IS NOT NULL ORDER BY queued",
                (name,),
            )
            for row in rows:
                if (
                    row["lock"] is not None
                    and row["lock"] != worker_id
                    and row["lock_expires"] > now
                ):
                    continue
                if (
                    worker_version is not None
                    and row["version_behavior"] == "pinned"
                    and row["version"]
                    and row["version"] != worker_version
                ):
                    continue
                self._claim(db, row, worker_id)
                return str(row["run_id"])
        return None

    @_translated
    def claim_run(self, name: str, run_id: str, worker_id: str) -> None:
        with self._write() as db:
            row = self._require(db, name, run_id)
            if row["terminal"] is not None:
                raise RunFinishedError(f"run {run_id!r} of {name!r} has ended")
            if self._live(row) and row["lock"] != worker_id:
                raise RunOwnedError(f"run {run_id!r} is held by another lease")
            if row["lock"] is not None and row["lock"] != worker_id:
                # The last holder's lease lapsed: that attempt is gone, and counts as one.
                self._requeue(db, row, "owner_gone")
                row = self._require(db, name, run_id)
            if row["terminal"] is None:
                self._claim(db, row, worker_id)
        if row["terminal"] is not None:  # the requeue spent the budget (and is committed)
            raise RunFinishedError(f"run {run_id!r} of {name!r} ran out of retries")

    @_translated
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

    @_translated
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

    @_translated
    def recover_pending_runs(self, name: str, now: float | None = None) -> list[str]:
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
                self._requeue(db, row, "owner_gone")
        return recovered

    @_translated
    def get_pending_count(self, name: str) -> int:
        with self._read() as db:
            row = db.execute(
                "SELECT COUNT(*) FROM lg_runs WHERE name = ? AND queued IS NOT NULL", (name,)
            ).fetchone()
        return int(row[0])

    @_translated
    def heartbeat(self, name: str, run_id: str, worker_id: str) -> tuple[str | None, str | None]:
        with self._write() as db:
            row = self._require(db, name, run_id)
            if row["lock"] != worker_id or not self._live(row):
                raise LockLost(f"lease {worker_id!r} no longer holds run {run_id!r}")
            self._set(db, row, lock_expires=self._clock() + self.lock_ttl)
            return row["cancel_at"], row["pause_at"]

    @_translated
    def lock_holder(self, name: str, run_id: str) -> str | None:
        with self._read() as db:
            row = self._row(db, name, run_id)
        return str(row["lock"]) if row is not None and self._live(row) else None

    def _latch_cancel(
        self, db: sqlite3.Connection, row: sqlite3.Row, at: str, detail: dict[str, Any]
    ) -> None:
        self._set(db, row, cancel_at=at)
        self._append(
            db,
            row,
            [self._event(row, EventKind.RUN_CANCEL, {"requested_at": at, "detail": detail})],
            None,
        )
        if row["wait"] is not None and not self._live(row):
            self._enqueue(db, row["name"], row["run_id"])

    def _latch_pause(self, db: sqlite3.Connection, row: sqlite3.Row, at: str) -> None:
        self._set(db, row, pause_at=at)
        self._append(
            db,
            row,
            [self._event(row, EventKind.RUN_PAUSE_REQUESTED, {"requested_at": at})],
            None,
        )

    def _hold(self, db: sqlite3.Connection, name: str, run_id: str, **control: Any) -> str:
        """Keep a control for an id not submitted yet, for ``held_ttl`` seconds."""
        now = self._clock()
        at = iso(now)
        held = db.execute(
            "SELECT * FROM lg_held WHERE name = ? AND run_id = ? AND expires_at > ?",
            (name, run_id, now),
        ).fetchone()
        column = "cancel_at" if "cancel_detail" in control else "pause_at"
        if held is not None and held[column] is not None:
            return str(held[column])
        db.execute(
            "INSERT INTO lg_held (name, run_id, cancel_at, cancel_detail, pause_at, expires_at) "
            "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (name, run_id) DO UPDATE SET "
            f"{column} = excluded.{column}, cancel_detail = COALESCE(excluded.cancel_detail, "
            "cancel_detail), expires_at = excluded.expires_at",
            (
                name,
                run_id,
                at if column == "cancel_at" else None,
                _dumps(control["cancel_detail"]) if "cancel_detail" in control else None,
                at if column == "pause_at" else None,
                now + self.held_ttl,
            ),
        )
        return at

    @_translated
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

    @_translated
    def get_run_controls(self, name: str, run_id: str) -> tuple[str | None, str | None]:
        with self._read() as db:
            row = db.execute(
                "SELECT cancel_at, pause_at FROM lg_runs WHERE name = ? AND run_id = ?",
                (name, run_id),
            ).fetchone()
        if row is None:
            raise RunNotFoundError(name, run_id)
        return row["cancel_at"], row["pause_at"]

    @_translated
    def get_run(self, name: str, run_id: str) -> RunInfo | None:
        with self._read() as db:
            row = self._row(db, name, run_id)
        return self._info(row) if row is not None else None

    @_translated
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
            args.append(int(cursor))
        query += " ORDER BY ord DESC LIMIT ?"
        args.append(limit + 1)
        with self._read() as db:
            rows = db.execute(query, args).fetchall()
        page = rows[:limit]
        more = len(rows) > limit
        return [self._info(r) for r in page], (str(page[-1]["ord"]) if more and page else None)

    @_translated
    def ping(self) -> None:
        with self._read() as db:
            db.execute("SELECT 1").fetchone()

    @_translated
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

    # -- event log -----------------------------------------------------------------------------

    @_translated
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

    @_translated
    def load_run(self, name: str, run_id: str, *, max_events: int | None = None) -> list[RunEvent]:
        query = "SELECT * FROM lg_events WHERE name = ? AND run_id = ? ORDER BY seq"
        args: list[Any] = [name, run_id]
        if max_events is not None:
            query += " LIMIT ?"
            args.append(max_events)
        with self._read() as db:
            rows = db.execute(query, args).fetchall()
        return [_event_from(r, run_id) for r in rows]

    @_translated
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

    @_translated
    def get_last_event(self, name: str, run_id: str) -> RunEvent | None:
        with self._read() as db:
            row = db.execute(
                "SELECT * FROM lg_events WHERE name = ? AND run_id = ? ORDER BY seq DESC LIMIT 1",
                (name, run_id),
            ).fetchone()
        return _event_from(row, run_id) if row is not None else None

    # -- idempotency ---------------------------------------------------------------------------

    @_translated
    def get_idempotency_run(self, name: str, key: str) -> str | None:
        with self._read() as db:
            row = db.execute(
                "SELECT run_id FROM lg_idempotency WHERE name = ? AND key = ? AND expires_at > ?",
                (name, key, self._clock()),
            ).fetchone()
        return str(row["run_id"]) if row is not None else None

    @_translated
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

    @_translated
    def get_idempotency_body_hash(self, name: str, key: str) -> str | None:
        with self._read() as db:
            row = db.execute(
                "SELECT body_hash FROM lg_idempotency WHERE name = ? AND key = ? "
                "AND expires_at > ?",
                (name, key, self._clock()),
            ).fetchone()
        return row["body_hash"] if row is not None else None

    # -- timers and waits ----------------------------------------------------------------------

    def _signal_buffered(self, db: sqlite3.Connection, row: sqlite3.Row, signal: str) -> bool:
        return (
            db.execute(
                "SELECT 1 FROM lg_signals WHERE name = ? AND run_id = ? AND signal = ? LIMIT 1",
                (row["name"], row["run_id"], signal),
            ).fetchone()
            is not None
        )

    def _updates_pending(self, db: sqlite3.Connection, row: sqlite3.Row) -> bool:
        return (
            db.execute(
                "SELECT 1 FROM lg_updates WHERE name = ? AND run_id = ? LIMIT 1",
                (row["name"], row["run_id"]),
            ).fetchone()
            is not None
        )

    @_translated
    def park_run(
        self, name: str, run_id: str, *, lease: str, events: list[RunEvent], wait: WaitSpec
    ) -> WaitOutcome:
        with self._write() as db:
            row = self._require(db, name, run_id)
            self._check_fence(row, lease)
            if (
                row["cancel_at"] is not None
                or self._updates_pending(db, row)
                or (
                    wait.kind == "signal"
                    and wait.signal is not None
                    and self._signal_buffered(db, row, wait.signal)
                )
                or (wait.kind == "pause" and row["pause_at"] is None)
            ):
                return WaitOutcome.SUPERSEDED
            self._append(db, row, events, row["epoch"])
            self._set(
                db,
                row,
                wait=_dumps(wait.to_dict()),
                wait_due=wait.due_at,
                lock=None,
                queued=None,
            )
        return WaitOutcome.PARKED

    @_translated
    def get_sleeping_runs(self, before: float, limit: int = 100) -> list[tuple[str, str]]:
        with self._read() as db:
            rows = db.execute(
                "SELECT name, run_id FROM lg_runs WHERE wait_due IS NOT NULL AND wait_due <= ? "
                "AND terminal IS NULL ORDER BY wait_due, ord LIMIT ?",
                (before, limit),
            ).fetchall()
        return [(str(r["name"]), str(r["run_id"])) for r in rows]

    def _close_wait(
        self,
        db: sqlite3.Connection,
        row: sqlite3.Row,
        kind: str,
        wait: WaitSpec,
        lease: str | None,
    ) -> None:
        self._append(
            db,
            row,
            [self._event(row, kind, {"call_index": wait.call_index, "wait_id": wait.wait_id})],
            row["epoch"] if lease is not None else None,
        )
        self._set(db, row, wait=None, wait_due=None)
        if lease is None and not self._live(row):
            self._enqueue(db, row["name"], row["run_id"])

    @_translated
    def wake_due(self, name: str, run_id: str, *, due_by: float) -> WaitOutcome:
        with self._write() as db:
            row = self._row(db, name, run_id)
            wait = self._wait(row) if row is not None else None
            if row is None or wait is None or wait.due_at is None or wait.due_at > due_by:
                return WaitOutcome.SUPERSEDED
            if wait.kind == "signal":
                if wait.signal is not None and self._signal_buffered(db, row, wait.signal):
                    return WaitOutcome.SUPERSEDED
                kind = EventKind.RUN_WAIT_TIMED_OUT
            elif wait.kind in ("sleep", "start"):
                kind = EventKind.RUN_WOKEN
            else:
                return WaitOutcome.SUPERSEDED
            self._close_wait(db, row, kind, wait, None)
        return WaitOutcome.RESOLVED

    def _end_wait(
        self, name: str, run_id: str, wait_id: str, kind: EventKind, lease: str | None
    ) -> WaitOutcome:
        with self._write() as db:
            row = self._require(db, name, run_id)
            if lease is not None:
                self._check_fence(row, lease)
            wait = self._wait(row)
            kinds = ("signal",) if kind == EventKind.RUN_WAIT_TIMED_OUT else ("sleep", "start")
            if wait is None or wait.wait_id != wait_id or wait.kind not in kinds:
                journaled = db.execute(
                    "SELECT 1 FROM lg_events WHERE name = ? AND run_id = ? AND kind = ? "
                    "AND json_extract(payload, '$.wait_id') = ? LIMIT 1",
                    (name, run_id, kind, wait_id),
                ).fetchone()
                return WaitOutcome.DUPLICATE if journaled else WaitOutcome.SUPERSEDED
            if (
                kind == EventKind.RUN_WAIT_TIMED_OUT
                and wait.signal is not None
                and self._signal_buffered(db, row, wait.signal)
            ):
                return WaitOutcome.SUPERSEDED
            self._close_wait(db, row, kind, wait, lease)
        return WaitOutcome.RESOLVED

    @_translated
    def wake_run(
        self, name: str, run_id: str, *, wait_id: str, lease: str | None = None
    ) -> WaitOutcome:
        return self._end_wait(name, run_id, wait_id, EventKind.RUN_WOKEN, lease)

    @_translated
    def time_out_wait(
        self, name: str, run_id: str, *, wait_id: str, lease: str | None = None
    ) -> WaitOutcome:
        return self._end_wait(name, run_id, wait_id, EventKind.RUN_WAIT_TIMED_OUT, lease)

    # -- signals -------------------------------------------------------------------------------

    @_translated
    def send_signal(
        self,
        name: str,
        run_id: str,
        signal_name: str,
        payload: dict[str, Any],
        sent_at: str,
        *,
        idempotency_key: str | None = None,
    ) -> str:
        with self._write() as db:
            row = self._require(db, name, run_id)
            if idempotency_key is not None:
                seen = db.execute(
                    "SELECT result FROM lg_signal_keys WHERE name = ? AND run_id = ? AND key = ?",
                    (name, run_id, idempotency_key),
                ).fetchone()
                if seen is not None:
                    return str(seen["result"])
            if row["terminal"] is not None or row["cancel_at"] is not None:
                return "rejected"
            db.execute(
                "INSERT INTO lg_signals (name, run_id, signal, signal_id, payload, sent_at) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (
                    name,
                    run_id,
                    signal_name,
                    idempotency_key or uuid.uuid4().hex,
                    _dumps(payload),
                    sent_at,
                ),
            )
            result = "buffered"
            wait = self._wait(row)
            if wait is not None and wait.kind == "signal" and wait.signal == signal_name:
                self._set(db, row, wait=None, wait_due=None)
                if not self._live(row):
                    self._enqueue(db, name, run_id)
                result = "delivered"
            if idempotency_key is not None:
                db.execute(
                    "INSERT INTO lg_signal_keys (name, run_id, key, result) VALUES (?, ?, ?, ?)",
                    (name, run_id, idempotency_key, result),
                )
        return result

    @_translated
    def peek_signal(self, name: str, run_id: str, signal_name: str) -> dict[str, Any] | None:
        with self._read() as db:
            self._require(db, name, run_id)
            row = db.execute(
                "SELECT * FROM lg_signals WHERE name = ? AND run_id = ? AND signal = ? "
                "ORDER BY id LIMIT 1",
                (name, run_id, signal_name),
            ).fetchone()
        if row is None:
            return None
        return {
            "signal_id": row["signal_id"],
            "name": row["signal"],
            "payload": json.loads(row["payload"]),
            "sent_at": row["sent_at"],
        }

    @_translated
    def pop_signal_match(self, name: str, run_id: str, signal_name: str, signal_id: str) -> bool:
        with self._write() as db:
            self._require(db, name, run_id)
            row = db.execute(
                "SELECT id FROM lg_signals WHERE name = ? AND run_id = ? AND signal = ? "
                "AND signal_id = ? ORDER BY id LIMIT 1",
                (name, run_id, signal_name, signal_id),
            ).fetchone()
            if row is None:
                return False
            db.execute("DELETE FROM lg_signals WHERE id = ?", (row["id"],))
        return True

    # -- updates -------------------------------------------------------------------------------

    @_translated
    def deliver_update(
        self,
        name: str,
        run_id: str,
        update_name: str,
        payload: dict[str, Any],
        update_id: str,
        sent_at: str,
    ) -> str:
        with self._write() as db:
            row = self._require(db, name, run_id)
            key = (name, run_id, update_id)
            if db.execute(
                "SELECT 1 FROM lg_update_results WHERE name = ? AND run_id = ? AND update_id = ?",
                key,
            ).fetchone():
                return "settled"
            if db.execute(
                "SELECT 1 FROM lg_updates WHERE name = ? AND run_id = ? AND update_id = ?", key
            ).fetchone():
                return "duplicate"
            if row["terminal"] is not None:
                return "rejected"
            db.execute(
                "INSERT INTO lg_updates (name, run_id, update_id, seq, update_name, payload, "
                "sent_at) VALUES (?, ?, ?, (SELECT COALESCE(MAX(seq), 0) + 1 FROM lg_updates "
                "WHERE name = ? AND run_id = ?), ?, ?, ?)",
                (name, run_id, update_id, name, run_id, update_name, _dumps(payload), sent_at),
            )
            wait = self._wait(row)
            if wait is not None and wait.kind != "start" and not self._live(row):
                self._enqueue(db, name, run_id)
        return "queued"

    @_translated
    def peek_pending_updates(self, name: str, run_id: str) -> list[dict[str, Any]]:
        with self._read() as db:
            self._require(db, name, run_id)
            rows = db.execute(
                "SELECT * FROM lg_updates WHERE name = ? AND run_id = ? ORDER BY seq",
                (name, run_id),
            ).fetchall()
        return [
            {
                "update_id": r["update_id"],
                "update": r["update_name"],
                "payload": json.loads(r["payload"]),
                "sent_at": r["sent_at"],
            }
            for r in rows
        ]

    @_translated
    def settle_update(
        self,
        name: str,
        run_id: str,
        update_id: str,
        outcome: dict[str, Any],
        *,
        fence: str | None = None,
        ack: bool = True,
    ) -> None:
        with self._write() as db:
            row = self._require(db, name, run_id)
            if fence is not None:
                self._check_fence(row, fence)
            db.execute(
                "INSERT OR REPLACE INTO lg_update_results (name, run_id, update_id, outcome) "
                "VALUES (?, ?, ?, ?)",
                (name, run_id, update_id, _dumps(outcome)),
            )
            if ack:
                db.execute(
                    "DELETE FROM lg_updates WHERE name = ? AND run_id = ? AND update_id = ?",
                    (name, run_id, update_id),
                )

    @_translated
    def read_update_result(self, name: str, run_id: str, update_id: str) -> dict[str, Any] | None:
        with self._read() as db:
            self._require(db, name, run_id)
            row = db.execute(
                "SELECT outcome FROM lg_update_results WHERE name = ? AND run_id = ? "
                "AND update_id = ?",
                (name, run_id, update_id),
            ).fetchone()
        return json.loads(row["outcome"]) if row is not None else None

    # -- controls ------------------------------------------------------------------------------

    @_translated
    def request_pause(self, name: str, run_id: str) -> str:
        with self._write() as db:
            row = self._row(db, name, run_id)
            if row is None:
                return self._hold(db, name, run_id)
            if row["pause_at"] is None and row["terminal"] is None:
                at = iso(self._clock())
                self._latch_pause(db, row, at)
                return at
            return str(row["pause_at"] or iso(self._clock()))

    @_translated
    def resume_paused_run(
        self, name: str, run_id: str, *, wait_id: str | None = None
    ) -> WaitOutcome:
        with self._write() as db:
            row = self._require(db, name, run_id)
            wait = self._wait(row)
            if (
                wait is not None
                and wait.kind == "pause"
                and (wait_id is None or wait.wait_id == wait_id)
            ):
                self._append(
                    db,
                    row,
                    [self._event(row, EventKind.RUN_UNPAUSED, {"wait_id": wait.wait_id})],
                    None,
                )
                self._set(db, row, pause_at=None, wait=None, wait_due=None)
                self._enqueue(db, name, run_id)
                return WaitOutcome.RESOLVED
            if row["pause_at"] is not None and wait_id is None:
                self._set(db, row, pause_at=None)
                return WaitOutcome.RESOLVED
        return WaitOutcome.SUPERSEDED

    @_translated
    def terminate_run(
        self,
        name: str,
        run_id: str,
        *,
        reason: str | None = None,
        requested_by: str | None = None,
        cause: dict[str, Any] | None = None,
    ) -> TerminateOutcome:
        with self._write() as db:
            row = self._row(db, name, run_id)
            if row is None:
                return TerminateOutcome.NOT_FOUND
            if row["terminal"] is not None:
                return TerminateOutcome.ALREADY_ENDED
            now = iso(self._clock())
            self._append(
                db,
                row,
                [
                    self._event(
                        row,
                        EventKind.RUN_ERROR,
                        terminated_payload(now, reason, requested_by, cause),
                    )
                ],
                None,
            )
            self._set(db, row, cancel_at=row["cancel_at"] or now, lock=None)
        return TerminateOutcome.TERMINATED

    @_translated
    def hand_back_run(self, name: str, run_id: str, worker_id: str | None = None) -> None:
        with self._write() as db:
            row = self._row(db, name, run_id)
            if row is None or (worker_id is not None and row["lock"] != worker_id):
                return
            self._set(db, row, lock=None)
            if row["terminal"] is None:
                self._enqueue(db, name, run_id)

    # -- versions and policies -----------------------------------------------------------------

    @_translated
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

    @_translated
    def version_rank(self, name: str, version: str) -> int | None:
        with self._read() as db:
            row = db.execute(
                "SELECT rank FROM lg_versions WHERE name = ? AND version = ?", (name, version)
            ).fetchone()
        return int(row["rank"]) if row is not None else None

    @_translated
    def record_workflow_policy(self, name: str, policy: dict[str, Any]) -> None:
        with self._write() as db:
            db.execute(
                "INSERT OR REPLACE INTO lg_policies (name, policy, recorded_at) VALUES (?, ?, ?)",
                (name, _dumps(policy), self._clock()),
            )

    @_translated
    def get_workflow_policy(self, name: str) -> dict[str, Any] | None:
        with self._read() as db:
            row = db.execute("SELECT policy FROM lg_policies WHERE name = ?", (name,)).fetchone()
        return json.loads(row["policy"]) if row is not None else None

    # -- operating the file --------------------------------------------------------------------

    @_translated
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
