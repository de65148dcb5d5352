"""The embedded store: runs, journals, timers, signals and trigger buffers in one SQLite file
that any number of processes on one machine share."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lockgate._lazy import lazy_exports

if TYPE_CHECKING:
    from lockgate.stores.sqlite._store import SQLiteStore

__all__ = ["SQLiteStore"]


if not TYPE_CHECKING:  # a type checker sees the imports above, not a __getattr__
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "lockgate.stores.sqlite._store": ("SQLiteStore",),
        },
    )
