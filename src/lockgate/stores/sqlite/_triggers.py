"""SQLiteStore's Collect and Debounce buffers: buffering an event, and taking a due batch with
the submit of its run, are each one ``BEGIN IMMEDIATE`` transaction; so is the submit of a batch
buffered outside the store with the move of its key's fired-through mark."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping
from typing import Any

from lockgate.stores._triggers import FiredBatch, TriggerPolicy, batch_submit, settled_fire
from lockgate.stores.sqlite._rows import SQLiteRows, dumps
from lockgate.stores.sqlite._translate import translated

TRIGGERS_SCHEMA = """
CREATE TABLE IF NOT EXISTS lg_trigger_buffers (
    name TEXT NOT NULL, key TEXT NOT NULL, first_at REAL, due_at REAL,
    next_seq INTEGER NOT NULL DEFAULT 1,
    PRIMARY KEY (name, key)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS lg_trigger_due ON lg_trigger_buffers (name, due_at)
    WHERE due_at IS NOT NULL;
CREATE TABLE IF NOT EXISTS lg_trigger_events (
    name TEXT NOT NULL, key TEXT NOT NULL, seq INTEGER NOT NULL, event TEXT NOT NULL,
    PRIMARY KEY (name, key, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS lg_trigger_marks (
    name TEXT NOT NULL, source TEXT NOT NULL, key TEXT NOT NULL,
    fired_through INTEGER NOT NULL,
    PRIMARY KEY (name, source, key)
) WITHOUT ROWID;
"""


class SQLiteTriggers(SQLiteRows):
    """Trigger buffers on SQLite."""

    @translated
    def trigger_event(
        self, name: str, key: str, event: dict[str, Any], *, policy: TriggerPolicy
    ) -> str | None:
        with self._write() as db:
            now = self._clock()
            db.execute(
                "INSERT OR IGNORE INTO lg_trigger_buffers (name, key) VALUES (?, ?)", (name, key)
            )
            buffer = db.execute(
                "SELECT * FROM lg_trigger_buffers WHERE name = ? AND key = ?", (name, key)
            ).fetchone()
            db.execute(
                "INSERT INTO lg_trigger_events (name, key, seq, event) VALUES (?, ?, ?, ?)",
                (name, key, buffer["next_seq"], dumps(event)),
            )
            first_at = buffer["first_at"] if buffer["first_at"] is not None else now
            due_at = policy.due_at(first_at, now, buffer["due_at"])
            db.execute(
                "UPDATE lg_trigger_buffers SET first_at = ?, due_at = ?, next_seq = ? "
                "WHERE name = ? AND key = ?",
                (first_at, due_at, buffer["next_seq"] + 1, name, key),
            )
            count = db.execute(
                "SELECT COUNT(*) FROM lg_trigger_events WHERE name = ? AND key = ?", (name, key)
            ).fetchone()[0]
            if policy.full(int(count)):
                return self._fire(db, name, key, policy, now)
        return None

    @translated
    def due_triggers(self, name: str, before: float, limit: int = 100) -> list[str]:
        with self._read() as db:
            rows = db.execute(
                "SELECT key FROM lg_trigger_buffers WHERE name = ? AND due_at IS NOT NULL "
                "AND due_at <= ? ORDER BY due_at LIMIT ?",
                (name, before, limit),
            ).fetchall()
        return [str(row["key"]) for row in rows]

    @translated
    def next_trigger_due(self, name: str, after: float) -> float | None:
        with self._read() as db:
            due = db.execute(
                "SELECT MIN(due_at) FROM lg_trigger_buffers WHERE name = ? AND due_at IS NOT NULL "
                "AND due_at > ?",
                (name, after),
            ).fetchone()[0]
        return float(due) if due is not None else None

    @translated
    def fire_trigger(
        self, name: str, key: str, *, policy: TriggerPolicy, due_by: float
    ) -> str | None:
        with self._write() as db:
            buffer = db.execute(
                "SELECT due_at FROM lg_trigger_buffers WHERE name = ? AND key = ?", (name, key)
            ).fetchone()
            if buffer is None or buffer["due_at"] is None or buffer["due_at"] > due_by:
                return None
            return self._fire(db, name, key, policy, self._clock())

    @translated
    def fire_batch(
        self,
        name: str,
        key: str,
        events: list[dict[str, Any]],
        *,
        policy: TriggerPolicy,
        source: str,
        first: int,
        last: int,
    ) -> FiredBatch:
        run_id, submit = batch_submit(
            name, key, events, policy, source=source, first=first, last=last
        )
        with self._write() as db:
            row = db.execute(
                "SELECT fired_through FROM lg_trigger_marks WHERE name = ? AND source = ? "
                "AND key = ?",
                (name, source, key),
            ).fetchone()
            mark = int(row["fired_through"]) if row is not None else -1
            exists = db.execute(
                "SELECT 1 FROM lg_runs WHERE name = ? AND run_id = ?", (name, run_id)
            ).fetchone()
            answer, submit_now = settled_fire(run_id, exists is not None, mark, first, last)
            if answer.fired_through == mark:
                return answer  # nothing moves: a stale fire, or a repeat the mark already covers
            if submit_now:
                self._insert_run(db, submit, run_id, None, self._clock())
            db.execute(
                "INSERT INTO lg_trigger_marks (name, source, key, fired_through) "
                "VALUES (?, ?, ?, ?) ON CONFLICT (name, source, key) "
                "DO UPDATE SET fired_through = excluded.fired_through",
                (name, source, key, answer.fired_through),
            )
        return answer

    @translated
    def fired_through(
        self, name: str, source: str, keys: Mapping[str, TriggerPolicy]
    ) -> dict[str, int]:
        wanted = list(keys)
        found: dict[str, int] = {}
        with self._read() as db:
            for at in range(0, len(wanted), 500):  # SQLite's bound on ? parameters
                chunk = wanted[at : at + 500]
                rows = db.execute(
                    "SELECT key, fired_through FROM lg_trigger_marks WHERE name = ? AND "
                    f"source = ? AND key IN ({','.join('?' * len(chunk))})",
                    (name, source, *chunk),
                ).fetchall()
                found.update((str(r["key"]), int(r["fired_through"])) for r in rows)
        return found

    @translated
    def forget_marks(self, name: str, source: str, below: int) -> int:
        with self._write() as db:
            gone = db.execute(
                "DELETE FROM lg_trigger_marks WHERE name = ? AND source = ? AND fired_through < ?",
                (name, source, below),
            )
        return int(gone.rowcount)

    def _fire(
        self, db: sqlite3.Connection, name: str, key: str, policy: TriggerPolicy, now: float
    ) -> str | None:
        rows = db.execute(
            "SELECT seq, event FROM lg_trigger_events WHERE name = ? AND key = ? ORDER BY seq",
            (name, key),
        ).fetchall()
        db.execute(
            "UPDATE lg_trigger_buffers SET first_at = NULL, due_at = NULL WHERE name = ? "
            "AND key = ?",
            (name, key),
        )
        if not rows:
            return None
        db.execute("DELETE FROM lg_trigger_events WHERE name = ? AND key = ?", (name, key))
        events = [json.loads(row["event"]) for row in rows]
        run_id, submit = policy.submit(name, key, events, rows[0]["seq"], rows[-1]["seq"])
        self._insert_run(db, submit, run_id, None, now)
        return run_id
