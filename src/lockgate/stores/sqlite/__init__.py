"""The embedded store: runs, journals, timers, signals and trigger buffers in one SQLite file
that any number of processes on one machine share."""

from lockgate.stores.sqlite._store import SQLiteStore

__all__ = ["SQLiteStore"]
