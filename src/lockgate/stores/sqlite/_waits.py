"""SQLiteStore's optional groups: parking and waking runs, signals, updates and run
controls, each one ``BEGIN IMMEDIATE`` transaction."""

from __future__ import annotations

import json
from typing import Any

from lockgate._clock import iso
from lockgate._errors import EventAfterTerminal
from lockgate.journal._events import EventKind, RunEvent
from lockgate.stores._records import (
    SuccessorPlan,
    handed_on_to,
    terminated_payload,
)
from lockgate.stores._types import SIGNAL_WAITS, TerminateOutcome, WaitOutcome, WaitSpec
from lockgate.stores.sqlite._rows import SQLiteRows, dumps
from lockgate.stores.sqlite._translate import translated


class SQLiteWaits(SQLiteRows):
    """Timers and waits, signals, updates, pause, terminate, hand-back and hand-on on
    SQLite."""

    @translated
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
                    wait.kind in SIGNAL_WAITS
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
                wait=dumps(wait.to_dict()),
                wait_due=wait.due_at,
                lock=None,
                queued=None,
            )
        return WaitOutcome.PARKED

    @translated
    def get_sleeping_runs(self, before: float, limit: int = 100) -> list[tuple[str, str]]:
        with self._read() as db:
            rows = db.execute(
                "SELECT name, run_id FROM lg_runs WHERE wait_due IS NOT NULL AND wait_due <= ? "
                "AND terminal IS NULL ORDER BY wait_due, ord LIMIT ?",
                (before, limit),
            ).fetchall()
        return [(str(r["name"]), str(r["run_id"])) for r in rows]

    @translated
    def next_wait_due(self, after: float) -> float | None:
        with self._read() as db:
            due = db.execute(
                "SELECT MIN(wait_due) FROM lg_runs WHERE wait_due IS NOT NULL AND wait_due > ?",
                (after,),
            ).fetchone()[0]
        return float(due) if due is not None else None

    @translated
    def wake_due(self, name: str, run_id: str, *, due_by: float) -> WaitOutcome:
        with self._write() as db:
            row = self._row(db, name, run_id)
            wait = self._wait(row) if row is not None else None
            if row is None or wait is None or wait.due_at is None or wait.due_at > due_by:
                return WaitOutcome.SUPERSEDED
            if wait.kind in SIGNAL_WAITS:
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
            kinds = SIGNAL_WAITS if kind == EventKind.RUN_WAIT_TIMED_OUT else {"sleep", "start"}
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

    @translated
    def wake_run(
        self, name: str, run_id: str, *, wait_id: str, lease: str | None = None
    ) -> WaitOutcome:
        return self._end_wait(name, run_id, wait_id, EventKind.RUN_WOKEN, lease)

    @translated
    def time_out_wait(
        self, name: str, run_id: str, *, wait_id: str, lease: str | None = None
    ) -> WaitOutcome:
        return self._end_wait(name, run_id, wait_id, EventKind.RUN_WAIT_TIMED_OUT, lease)

    @translated
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
                    return "duplicate"
            if row["terminal"] is not None or row["cancel_at"] is not None:
                return "rejected"
            import uuid  # here: uuid imports platform, a cost for every reader of the store

            db.execute(
                "INSERT INTO lg_signals (name, run_id, signal, signal_id, payload, sent_at) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (
                    name,
                    run_id,
                    signal_name,
                    idempotency_key or uuid.uuid4().hex,
                    dumps(payload),
                    sent_at,
                ),
            )
            result = "buffered"
            wait = self._wait(row)
            if wait is not None and wait.kind in SIGNAL_WAITS and wait.signal == signal_name:
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

    @translated
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

    @translated
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

    @translated
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
                (name, run_id, update_id, name, run_id, update_name, dumps(payload), sent_at),
            )
            wait = self._wait(row)
            if wait is not None and wait.kind != "start" and not self._live(row):
                self._enqueue(db, name, run_id)
        return "queued"

    @translated
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

    @translated
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
                (name, run_id, update_id, dumps(outcome)),
            )
            if ack:
                db.execute(
                    "DELETE FROM lg_updates WHERE name = ? AND run_id = ? AND update_id = ?",
                    (name, run_id, update_id),
                )

    @translated
    def read_update_result(self, name: str, run_id: str, update_id: str) -> dict[str, Any] | None:
        with self._read() as db:
            self._require(db, name, run_id)
            row = db.execute(
                "SELECT outcome FROM lg_update_results WHERE name = ? AND run_id = ? "
                "AND update_id = ?",
                (name, run_id, update_id),
            ).fetchone()
        return json.loads(row["outcome"]) if row is not None else None

    @translated
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

    @translated
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

    @translated
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

    @translated
    def hand_back_run(self, name: str, run_id: str, worker_id: str | None = None) -> None:
        with self._write() as db:
            row = self._row(db, name, run_id)
            if row is None or (worker_id is not None and row["lock"] != worker_id):
                return
            self._set(db, row, lock=None)
            if row["terminal"] is None:
                self._enqueue(db, name, run_id)

    @translated
    def hand_on(
        self, name: str, run_id: str, lease: str, successor_id: str, plan: SuccessorPlan
    ) -> str:
        with self._write() as db:
            row = self._require(db, name, run_id)
            if row["terminal"] is not None:
                last = db.execute(
                    "SELECT kind, payload FROM lg_events WHERE name = ? AND run_id = ? "
                    "ORDER BY seq DESC LIMIT 1",
                    (name, run_id),
                ).fetchone()
                ended = RunEvent(last["kind"], json.loads(last["payload"]), run_id)
                if handed_on_to(ended, successor_id):
                    return successor_id
                raise EventAfterTerminal(f"run {run_id!r} has ended; it cannot be handed on")
            self._check_fence(row, lease)
            opening = db.execute(
                "SELECT payload FROM lg_events WHERE name = ? AND run_id = ? ORDER BY seq LIMIT 1",
                (name, run_id),
            ).fetchone()
            submit, continued_with = plan(
                json.loads(row["params"]),
                json.loads(row["metadata"]),
                row["owner"],
                json.loads(opening["payload"]) if opening is not None else {},
            )
            self._insert_run(db, submit, successor_id, None, self._clock())
            moved = (name, successor_id, name, run_id)
            for table in ("lg_signals", "lg_signal_keys", "lg_updates"):
                db.execute(
                    f"UPDATE {table} SET name = ?, run_id = ? WHERE name = ? AND run_id = ?",
                    moved,
                )
            # Settled outcomes are copied: a sender that retries an update id finds it settled.
            db.execute(
                "INSERT OR IGNORE INTO lg_update_results (name, run_id, update_id, outcome) "
                "SELECT name, ?, update_id, outcome FROM lg_update_results "
                "WHERE name = ? AND run_id = ?",
                (successor_id, name, run_id),
            )
            if row["pause_at"] is not None:
                self._latch_pause(db, self._require(db, name, successor_id), row["pause_at"])
            if row["cancel_at"] is not None:
                cancel = db.execute(
                    "SELECT payload FROM lg_events WHERE name = ? AND run_id = ? AND kind = ? "
                    "ORDER BY seq DESC LIMIT 1",
                    (name, run_id, EventKind.RUN_CANCEL),
                ).fetchone()
                detail = json.loads(cancel["payload"]).get("detail") or {}
                self._latch_cancel(
                    db, self._require(db, name, successor_id), row["cancel_at"], detail
                )
            continued = self._event(row, EventKind.RUN_CONTINUED, continued_with)
            self._append(db, row, [continued], row["epoch"])
        return successor_id
