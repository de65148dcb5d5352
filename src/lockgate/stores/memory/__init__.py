"""The in-process store: everything in one process's memory, for tests and the inline runner."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lockgate._lazy import lazy_exports

if TYPE_CHECKING:
    from lockgate.stores.memory._store import MemoryStore

__all__ = ["MemoryStore"]


if not TYPE_CHECKING:  # a type checker sees the imports above, not a __getattr__
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "lockgate.stores.memory._store": ("MemoryStore",),
        },
    )
