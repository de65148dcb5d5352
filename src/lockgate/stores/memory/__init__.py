"""The in-process store: everything in one process's memory, for tests and the inline runner."""

from lockgate.stores.memory._store import MemoryStore

__all__ = ["MemoryStore"]
