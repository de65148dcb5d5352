"""The rows behind SQLiteStore: transactions, reading and writing a run, and the state
changes several operations share. Every helper runs inside a transaction its caller opened."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from lockgate._clock import iso
from lockgate._errors import (
    DuplicateRunError,
    EventAfterTerminal,
    LockLost,
    RunNotFoundError,
    StoreFileGone,
)
from lockgate.journal._events import EPOCH_HEADER, EventKind, RunEvent, RunStatus, terminal_status
from lockgate.stores._gates import Gates, Refusal, fair_bucket, refill, token_wait
from lockgate.stores._poison import PoisonPolicy, judge_lapse
from lockgate.stores._records import PROGRESS_KINDS, Submit, derive_status, requeue_outcome
from lockgate.stores._types import RunInfo, WaitSpec
from lockgate.stores.sqlite._file import FileIdentity

#: Between claims (which check every time), a call checks that the store's path still names
#: the file it opened at most this often. A check is three ``stat`` calls, 5-10 us: made on
#: every write it cost a busy store 15-25% of its throughput; this often, nothing measurable,
#: and a write in the window goes to a file already lost, which one more write does not change.
FILE_CHECK_SECONDS = 0.1


def dumps(value: Any) -> str:
    return json.dumps(value, allow_nan=False, separators=(",", ":"))


class SQLiteRows:
    """Row-level helpers shared by SQLiteStore's operations."""

    _mutex: threading.RLock
    _conn: sqlite3.Connection
    _clock: Callable[[], float]
    lock_ttl: float
    held_ttl: float
    max_retries: int
    max_store_requeues: int
    _identity: FileIdentity
    _file_checked_at: float = float("-inf")
    _file_lost: StoreFileGone | None = None

    def _check_file(self, *, now: bool = False) -> None:
        """Raise :class:`StoreFileGone` if the path no longer names the file the store opened
        (nor its ``-wal`` and ``-shm``): at once when ``now``, else at most every
        ``FILE_CHECK_SECONDS``. Once lost, always lost: every later call raises it too."""
        with self._mutex:
            lost = self._file_lost
            if lost is None:
                moment = time.monotonic()
                if not now and moment - self._file_checked_at < FILE_CHECK_SECONDS:
                    return
                self._file_checked_at = moment
                lost = self._file_lost = self._identity.lost()
                if lost is None:
                    return
        raise StoreFileGone(str(lost), path=lost.path, reason=lost.reason)

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._mutex:
            self._check_file()
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
            self._check_file()
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
            # ``queued IS NOT NULL`` lets the partial index lg_runs_queue answer the MAX from
            # its last entry; without it SQLite walks every run of the workflow.
            "UPDATE lg_runs SET queued = (SELECT COALESCE(MAX(queued), 0) + 1 FROM lg_runs "
            "WHERE name = ? AND queued IS NOT NULL) WHERE name = ? AND run_id = ? "
            "AND queued IS NULL "
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
                    dumps(event.payload),
                    event.schema_version,
                    dumps(headers),
                ),
            )
            progress = progress or event.kind in PROGRESS_KINDS
        fields: dict[str, Any] = {"last_seq": seq}
        if progress:
            fields.update(owner_gone=0, store_requeues=0)
        if events and events[-1].is_terminal:
            # A run that has ended holds nothing: its lock goes with its queue place and wait,
            # so the holder needs no release after it.
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
            ended_at=row["ended_at"],
        )

    def _claim(
        self, db: sqlite3.Connection, row: sqlite3.Row, lease: str, now: float | None = None
    ) -> None:
        """Lock the run under ``lease`` for ``lock_ttl`` from ``now`` (the claim's time, when
        its gates were judged)."""
        same = row["lock"] == lease and self._live(row)
        self._set(
            db,
            row,
            queued=None,
            lock=lease,
            lock_expires=(self._clock() if now is None else now) + self.lock_ttl,
            epoch=row["epoch"] if same else row["epoch"] + 1,
        )

    def _lapsed(
        self, db: sqlite3.Connection, row: sqlite3.Row, poison: PoisonPolicy | None
    ) -> None:
        """Requeue (or quarantine) a run whose holder's lease lapsed: see ``_poison.py``."""
        if row["terminal"] is not None:
            self._set(db, row, lock=None)
            return
        blocked = (
            row["lock"] is not None
            and row["blocked_lease"] == row["lock"]
            and row["blocked_until"] == row["lock_expires"]
        )
        crashes = json.loads(row["crashes"]) if row["crashes"] else []
        lapse = judge_lapse(crashes, self._clock(), poison, loop_blocked=blocked)
        self._set(db, row, crashes=dumps(lapse.crashes), blocked_lease=None, blocked_until=None)
        if lapse.quarantine is None:
            self._requeue(db, row, "owner_gone", lapse.requeued)
            return
        self._set(db, row, lock=None)
        self._append(db, row, [self._event(row, EventKind.RUN_ERROR, lapse.quarantine)], None)

    def _requeue(
        self,
        db: sqlite3.Connection,
        row: sqlite3.Row,
        reason: str,
        extra: dict[str, Any] | None = None,
    ) -> None:
        self._set(db, row, lock=None)
        if row["terminal"] is not None:
            return
        owner_gone, store_requeues, kind, payload = requeue_outcome(
            reason,
            row["owner_gone"],
            row["store_requeues"],
            self.max_retries,
            self.max_store_requeues,
            extra,
        )
        self._set(db, row, owner_gone=owner_gone, store_requeues=store_requeues)
        self._append(db, row, [self._event(row, kind, payload)], None)
        if kind == EventKind.RUN_REQUEUED:
            self._enqueue(db, row["name"], row["run_id"])

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
                dumps(control["cancel_detail"]) if "cancel_detail" in control else None,
                at if column == "pause_at" else None,
                now + self.held_ttl,
            ),
        )
        return at

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

    def _gates(self, row: sqlite3.Row) -> Gates:
        return Gates(row["ckey"], row["cmax"], row["rkey"], row["rps"], row["rburst"])

    def _gated(self, db: sqlite3.Connection, row: sqlite3.Row, now: float) -> Refusal | None:
        """Why the run cannot start now (its Limit is full, its Rate has no token), or None,
        having then spent the token. A Limit refusal spends nothing. Slots are counted, not
        kept: a run holds one while its lock is set, until it parks, ends or is requeued."""
        gates = self._gates(row)
        if gates.limited:
            holding = db.execute(
                "SELECT COUNT(*) FROM lg_runs WHERE name = ? AND ckey = ? AND lock IS NOT NULL "
                "AND run_id != ?",
                (row["name"], gates.concurrency_key, row["run_id"]),
            ).fetchone()[0]
            assert gates.concurrency_max is not None
            if holding >= gates.concurrency_max:
                return Refusal(f"Limit {gates.concurrency_key!r} {holding}/{gates.concurrency_max}")
        if gates.rated:
            bucket = db.execute(
                "SELECT tokens, updated_at FROM lg_tokens WHERE name = ? AND key = ?",
                (row["name"], gates.rate_key),
            ).fetchone()
            tokens = (
                float(gates.rate_burst or 1)
                if bucket is None
                else refill(bucket["tokens"], bucket["updated_at"], now, gates)
            )
            if tokens < 1:
                # Nothing to write: below the burst the refill is linear, so the bucket as
                # stored gives the same tokens later. A refusal commits no change, and so
                # syncs nothing to disk.
                return Refusal(f"Rate {gates.rate_key!r}: no token", token_wait(tokens, gates))
            db.execute(
                "INSERT OR REPLACE INTO lg_tokens (name, key, tokens, updated_at) "
                "VALUES (?, ?, ?, ?)",
                (row["name"], gates.rate_key, tokens - 1, now),
            )
        return None

    def _served(self, db: sqlite3.Connection, name: str, bucket: str) -> None:
        """Mark ``bucket`` served last, so the next claim offers the others first."""
        db.execute(
            "INSERT OR REPLACE INTO lg_served (name, bucket, seq) VALUES (?, ?, (SELECT "
            "COALESCE(MAX(seq), 0) + 1 FROM lg_served WHERE name = ?))",
            (name, bucket, name),
        )

    def _insert_run(
        self,
        db: sqlite3.Connection,
        submit: Submit,
        run_id: str,
        headers: dict[str, str] | None,
        now: float,
    ) -> None:
        """Create the run and journal its opening events; the caller checked idempotency."""
        name, owner, start_at = submit.name, submit.owner, submit.start_at
        if self._row(db, name, run_id) is not None:
            raise DuplicateRunError(name, run_id)
        wait = (
            WaitSpec(kind="start", wait_id="start", call_index=-1, due_at=start_at)
            if submit.delayed(now)
            else None
        )
        db.execute(
            "INSERT INTO lg_runs (name, run_id, ord, params, metadata, owner, version, "
            "version_behavior, submitted_at, wait, wait_due, ckey, cmax, rkey, rps, rburst, "
            "bucket) VALUES (?, ?, (SELECT COALESCE(MAX(ord), 0) + 1 FROM lg_runs WHERE "
            "name = ?), ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                name,
                run_id,
                name,
                dumps(submit.params),
                dumps(submit.metadata or {}),
                owner,
                submit.version,
                submit.version_behavior,
                now,
                dumps(wait.to_dict()) if wait else None,
                wait.due_at if wait else None,
                submit.concurrency_key,
                submit.concurrency_max,
                submit.rate_key,
                submit.rate_per_second,
                submit.rate_burst,
                fair_bucket(owner, submit.gates),
            ),
        )
        row = self._require(db, name, run_id)
        self._append(db, row, submit.opening_events(run_id, now, headers), None)
        if wait is None:
            self._enqueue(db, name, run_id)
        self._apply_held(db, name, run_id, now)
