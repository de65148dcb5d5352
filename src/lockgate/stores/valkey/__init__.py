"""The server store: every state change one Lua script on a Valkey server or cluster, with
leases judged by the server's clock. ``ValkeyLifecycleStore`` is the same store keeping live
runs' events only as an outbox, for a ``CompositeStore`` whose event log keeps the journals."""

from lockgate.stores.valkey._lifecycle_store import ValkeyLifecycleStore
from lockgate.stores.valkey._store import ValkeyStore

__all__ = ["ValkeyLifecycleStore", "ValkeyStore"]
