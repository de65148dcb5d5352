"""The server store: every state change one Lua script on a Valkey server or cluster, with
leases judged by the server's clock. ``ValkeyLifecycleStore`` is the same store keeping live
runs' events only as an outbox, for a ``CompositeStore`` whose event log keeps the journals."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lockgate._lazy import lazy_exports

if TYPE_CHECKING:
    from lockgate.stores.valkey._lifecycle_store import ValkeyLifecycleStore
    from lockgate.stores.valkey._store import ValkeyStore

__all__ = ["ValkeyLifecycleStore", "ValkeyStore"]


if not TYPE_CHECKING:  # a type checker sees the imports above, not a __getattr__
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "lockgate.stores.valkey._lifecycle_store": ("ValkeyLifecycleStore",),
            "lockgate.stores.valkey._store": ("ValkeyStore",),
        },
    )
