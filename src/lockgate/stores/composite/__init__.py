"""The composite store above the backends: a lifecycle backend that decides, an event log that
keeps the journals, the copy from one to the other, and the rebuild of a lost lifecycle from
the journal topic. It composes Valkey and Kafka; no backend imports it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lockgate._lazy import lazy_exports

if TYPE_CHECKING:
    from lockgate.stores.composite._rebuild import RebuildReport, rebuild_lifecycle
    from lockgate.stores.composite._store import CompositeStore

__all__ = ["CompositeStore", "RebuildReport", "rebuild_lifecycle"]


if not TYPE_CHECKING:  # a type checker sees the imports above, not a __getattr__
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "lockgate.stores.composite._rebuild": ("RebuildReport", "rebuild_lifecycle"),
            "lockgate.stores.composite._store": ("CompositeStore",),
        },
    )
