"""The tail records of ``continue_as_new`` chains on SQLite (see ``stores/_chains.py``)."""

from __future__ import annotations

import sqlite3

from lockgate.stores._chains import ChainLink, advance_record
from lockgate.stores.sqlite._rows import SQLiteRows
from lockgate.stores.sqlite._translate import translated


class SQLiteChains(SQLiteRows):
    """One row per chain in ``lg_chains``, keyed by its root."""

    @translated
    def get_chain_tail(self, root_name: str, root_run_id: str) -> ChainLink | None:
        with self._read() as db:
            row = _row(db, root_name, root_run_id)
        return ChainLink.from_json(row["link"]) if row is not None else None

    @translated
    def advance_chain_tail(self, link: ChainLink) -> None:
        self._move_tail(link, close=False)

    @translated
    def close_chain(self, link: ChainLink) -> None:
        self._move_tail(link, close=True)

    @translated
    def chain_closed(self, root_name: str, root_run_id: str) -> bool:
        with self._read() as db:
            row = _row(db, root_name, root_run_id)
        return row is not None and bool(row["closed"])

    def _move_tail(self, link: ChainLink, *, close: bool) -> None:
        with self._write() as db:
            row = _row(db, link.root_name, link.root_run_id)
            recorded = ChainLink.from_json(row["link"]) if row is not None else None
            moved = advance_record(
                recorded, bool(row is not None and row["closed"]), link, close=close
            )
            if moved is None:
                return
            tail, closed = moved
            db.execute(
                "INSERT OR REPLACE INTO lg_chains (root_name, root_run_id, hop, link, closed) "
                "VALUES (?, ?, ?, ?, ?)",
                (link.root_name, link.root_run_id, tail.hop, tail.to_json(), int(closed)),
            )


def _row(db: sqlite3.Connection, root_name: str, root_run_id: str) -> sqlite3.Row | None:
    row: sqlite3.Row | None = db.execute(
        "SELECT link, closed FROM lg_chains WHERE root_name = ? AND root_run_id = ?",
        (root_name, root_run_id),
    ).fetchone()
    return row
