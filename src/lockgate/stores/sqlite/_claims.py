"""SQLiteStore's claim of queued runs: each batch of claims is one ``BEGIN IMMEDIATE``
transaction, trying the fairness buckets in turn and passing each run through its gates."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from lockgate.stores._gates import sooner
from lockgate.stores.sqlite._rows import SQLiteRows

#: How many queued runs of one fairness bucket a claim looks through (held by another lease, or
#: pinned to another version) before it moves on to the next bucket.
CLAIM_SCAN = 64


class _Claimed(list[str]):
    """The run ids a claim took, and when a Rate refused the rest, the wait for its token."""

    next_token_in: float | None = None


class SQLiteClaims(SQLiteRows):
    """Claims of queued runs on SQLite."""

    def _claim_many(self, name: str, leases: Sequence[str], worker_version: str | None) -> _Claimed:
        """Claim up to one run per lease, in one transaction; when they run out, the seconds
        until the first token of a bucket a Rate refused, if one did."""
        claimed = _Claimed()
        if not leases:
            return claimed
        self._check_file(now=True)  # never claim from a file its path no longer names
        with self._read() as db:
            queued = db.execute(
                "SELECT 1 FROM lg_runs WHERE name = ? AND queued IS NOT NULL LIMIT 1", (name,)
            ).fetchone()
        if queued is None:
            return claimed  # an idle poll takes no write lock
        with self._write() as db:
            now = self._clock()
            for lease in leases:
                run_id, claimed.next_token_in = self._claim_next(
                    db, name, lease, worker_version, now
                )
                if run_id is None:
                    break
                claimed.append(run_id)
        return claimed

    def _claim_next(
        self,
        db: sqlite3.Connection,
        name: str,
        worker_id: str,
        worker_version: str | None,
        now: float,
    ) -> tuple[str | None, float | None]:
        """Claim the next run for ``worker_id`` at ``now``, as :meth:`claim_next_run` does;
        when none is claimable, the soonest token of a bucket a Rate refused (or None)."""
        next_token_in: float | None = None
        # fetchall throughout: a cursor left open past COMMIT keeps the read going, and
        # another thread's BEGIN IMMEDIATE on this connection would fail at once.
        served = {
            r["bucket"]: r["seq"]
            for r in db.execute(
                "SELECT bucket, seq FROM lg_served WHERE name = ?", (name,)
            ).fetchall()
        }
        heads = db.execute(
            "SELECT bucket, MIN(queued) AS head FROM lg_runs WHERE name = ? "
            "AND queued IS NOT NULL GROUP BY bucket",
            (name,),
        ).fetchall()
        for _, _, bucket in sorted(
            (served.get(h["bucket"], 0), h["head"], h["bucket"]) for h in heads
        ):
            # A bucket's runs share a gate; look past at most CLAIM_SCAN held or
            # other-version runs in it, as the store contract allows.
            rows = db.execute(
                "SELECT * FROM lg_runs WHERE name = ? AND bucket = ? AND queued IS NOT NULL "
                "ORDER BY queued LIMIT ?",
                (name, bucket, CLAIM_SCAN),
            ).fetchall()
            for row in rows:
                held = row["lock"] is not None and row["lock_expires"] > now
                if held and row["lock"] != worker_id:
                    continue
                if (
                    worker_version is not None
                    and row["version_behavior"] == "pinned"
                    and row["version"]
                    and row["version"] != worker_version
                ):
                    continue
                if not (held and row["lock"] == worker_id):
                    refused = self._gated(db, row, now)
                    if refused is not None:
                        next_token_in = sooner(next_token_in, refused.next_token_in)
                        break  # the bucket shares its gate: none of its runs can start either
                self._claim(db, row, worker_id, now)
                self._served(db, name, row["bucket"])
                return str(row["run_id"]), None
        return None, next_token_in
