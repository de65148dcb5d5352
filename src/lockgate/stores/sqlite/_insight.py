"""SQLiteStore's operator views (``stores/_insight.py``), each one read transaction over the
gate bookkeeping's indexes: ``lg_runs_slots`` (the runs holding a Limit key's slots),
``lg_runs_buckets`` (the queue by fairness bucket), ``lg_tokens`` (Rate buckets) and the
trigger buffers' due index; never a scan of ``lg_runs``. Live workers are rows of
``lg_workers`` that lapse on the store's clock; the takeover of a lapsed worker's runs
(``recover_lapsed_holders``) reads them and the workflow's locked runs (``lg_runs_locks``)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any

from lockgate.stores._insight import (
    BufferInfo,
    InsightStore,
    LimitUsage,
    RateUsage,
    WorkerInfo,
    check_limit,
    check_worker,
    lapsed_workers,
    limit_usages,
    queued_gates,
    rate_usages,
)
from lockgate.stores._poison import PoisonPolicy
from lockgate.stores.sqlite._rows import SQLiteRows
from lockgate.stores.sqlite._translate import translated

INSIGHT_SCHEMA = """
CREATE TABLE IF NOT EXISTS lg_workers (
    worker_id TEXT PRIMARY KEY, info TEXT NOT NULL, expires_at REAL NOT NULL
) WITHOUT ROWID;
"""


class SQLiteInsight(SQLiteRows, InsightStore):
    """Operator views on SQLite."""

    def _queued_buckets(self, db: sqlite3.Connection, name: str) -> list[tuple[str, int]]:
        # One index entry per queued run of the workflow (lg_runs_buckets), grouped.
        rows = db.execute(
            "SELECT bucket, COUNT(*) AS n FROM lg_runs INDEXED BY lg_runs_buckets "
            "WHERE name = ? AND queued IS NOT NULL GROUP BY bucket",
            (name,),
        ).fetchall()
        return [(str(row["bucket"]), int(row["n"])) for row in rows]

    def _policy(self, db: sqlite3.Connection, name: str) -> dict[str, Any] | None:
        row = db.execute("SELECT policy FROM lg_policies WHERE name = ?", (name,)).fetchone()
        return json.loads(row["policy"]) if row is not None else None

    @translated
    def limit_usage(self, name: str, *, limit: int = 50) -> list[LimitUsage]:
        """Cost: the index entries of the workflow's runs holding slots, and of its queued
        runs (grouped by fairness bucket)."""
        check_limit(limit)
        with self._read() as db:
            rows = db.execute(
                "SELECT ckey, COUNT(*) AS n, MAX(cmax) AS most FROM lg_runs "
                "INDEXED BY lg_runs_slots WHERE name = ? AND ckey IS NOT NULL "
                "AND lock IS NOT NULL GROUP BY ckey",
                (name,),
            ).fetchall()
            running = {
                str(row["ckey"]): (int(row["n"]), None if row["most"] is None else int(row["most"]))
                for row in rows
            }
            queued = queued_gates(self._queued_buckets(db, name))
            policy = self._policy(db, name)
        return limit_usages(running, queued, policy, limit)

    @translated
    def rate_usage(self, name: str, *, limit: int = 50) -> list[RateUsage]:
        """Cost: the workflow's rows of ``lg_tokens`` and the index entries of its queued runs."""
        check_limit(limit)
        with self._read() as db:
            rows = db.execute(
                "SELECT key, tokens, updated_at FROM lg_tokens WHERE name = ?", (name,)
            ).fetchall()
            buckets = {
                str(row["key"]): (float(row["tokens"]), float(row["updated_at"])) for row in rows
            }
            queued = queued_gates(self._queued_buckets(db, name))
            policy = self._policy(db, name)
        return rate_usages(buckets, queued, policy, self._clock(), limit)

    @translated
    def open_buffers(self, name: str, *, limit: int = 100) -> list[BufferInfo]:
        """Cost: ``limit`` entries of the due index (``lg_trigger_due``), and each buffer's
        events counted by key."""
        check_limit(limit)
        with self._read() as db:
            rows = db.execute(
                "SELECT key, first_at, due_at, (SELECT COUNT(*) FROM lg_trigger_events e "
                "WHERE e.name = b.name AND e.key = b.key) AS n FROM lg_trigger_buffers b "
                "WHERE name = ? AND due_at IS NOT NULL ORDER BY due_at, key LIMIT ?",
                (name, limit),
            ).fetchall()
        return [
            BufferInfo(str(row["key"]), int(row["n"]), row["first_at"], row["due_at"])
            for row in rows
        ]

    @translated
    def record_worker(self, info: WorkerInfo, ttl: float) -> None:
        seconds = check_worker(info, ttl)
        with self._write() as db:
            now = self._clock()
            # Lapsed records are kept a lock TTL more: recover_lapsed_holders reads them.
            db.execute("DELETE FROM lg_workers WHERE expires_at <= ?", (now - self.lock_ttl,))
            db.execute(
                "INSERT OR REPLACE INTO lg_workers (worker_id, info, expires_at) VALUES (?, ?, ?)",
                (info.worker_id, info.to_json(), now + seconds),
            )

    @translated
    def live_workers(self) -> list[WorkerInfo]:
        with self._read() as db:
            rows = db.execute(
                "SELECT info FROM lg_workers WHERE expires_at > ? ORDER BY worker_id",
                (self._clock(),),
            ).fetchall()
        return [WorkerInfo.from_json(row["info"]) for row in rows]

    @translated
    def drop_worker(self, worker_id: str) -> None:
        with self._write() as db:
            db.execute("DELETE FROM lg_workers WHERE worker_id = ?", (worker_id,))

    @translated
    def recover_lapsed_holders(
        self, name: str, *, keep: Sequence[str] = (), poison: PoisonPolicy | None = None
    ) -> list[str]:
        # A read first: the pass runs every second on every worker, and while no worker has
        # lapsed (nearly always) it should not take the file's write lock.
        with self._read() as db:
            if not self._lapsed_workers(db, keep):
                return []
        recovered: list[str] = []
        with self._write() as db:
            lapsed = self._lapsed_workers(db, keep)  # again, inside the one atomic step
            # The workflow's locked runs (index lg_runs_locks: those in flight) whose lease
            # names a lapsed worker.
            marks = ", ".join("?" * len(lapsed))
            rows = db.execute(
                "SELECT * FROM lg_runs WHERE name = ? AND lock IS NOT NULL "
                "AND instr(lock, '/') > 1 "
                f"AND substr(lock, 1, instr(lock, '/') - 1) IN ({marks})",
                (name, *sorted(lapsed)),
            ).fetchall()
            for row in rows:
                if row["terminal"] is None:
                    recovered.append(str(row["run_id"]))
                self._lapsed(db, row, poison)
        return recovered

    def _lapsed_workers(self, db: sqlite3.Connection, keep: Sequence[str]) -> set[str]:
        now = self._clock()
        records = db.execute(
            "SELECT worker_id, expires_at FROM lg_workers WHERE expires_at > ? AND expires_at <= ?",
            (now - self.lock_ttl, now),
        ).fetchall()
        return lapsed_workers(
            ((str(r["worker_id"]), float(r["expires_at"])) for r in records),
            now,
            self.lock_ttl,
            keep,
        )
