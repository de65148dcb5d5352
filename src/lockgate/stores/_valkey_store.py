"""ValkeyStore: every store guarantee on a Valkey server, assembled from its roles."""

from __future__ import annotations

from collections.abc import Callable

from lockgate._errors import ConfigurationError
from lockgate.stores._base import Store
from lockgate.stores._valkey_triggers import ValkeyTriggers
from lockgate.stores._valkey_waits import ValkeyWaits


class ValkeyStore(ValkeyWaits, ValkeyTriggers, Store):
    """Every store guarantee on a Valkey server, for worker processes on many hosts.

    ``url`` is ``valkey://``, ``redis://``, ``rediss://`` or ``unix://``. Keys live under
    ``namespace`` (default ``LOCKGATE_VALKEY_NAMESPACE``, else ``lockgate``), inside one hash
    tag. Leases and timers are judged by the server's clock; a ``clock`` given here replaces it
    (tests move time that way). A server that cannot be reached raises
    :class:`StoreUnavailable` here; one whose ``maxmemory-policy`` may evict keys raises
    :class:`ConfigurationError` unless ``eviction_policy_check`` is False. Calls that lose the
    server are retried ``retry_attempts`` times with backoff from ``retry_backoff`` seconds,
    then raise :class:`StoreUnavailable`.
    """

    blocking_io = True

    def __init__(
        self,
        url: str = "valkey://127.0.0.1:6379/0",
        *,
        namespace: str | None = None,
        lock_ttl: float = 30.0,
        heartbeat_interval: float | None = None,
        held_ttl: float = 86_400.0,
        max_replay_entries: int = 200_000,
        max_retries: int = 3,
        max_store_requeues: int = 20,
        retry_attempts: int = 5,
        retry_backoff: float = 0.1,
        socket_timeout: float = 5.0,
        eviction_policy_check: bool = True,
        clock: Callable[[], float] | None = None,
    ) -> None:
        if lock_ttl <= 0 or (heartbeat_interval is not None and heartbeat_interval <= 0):
            raise ConfigurationError("ValkeyStore lock_ttl and heartbeat_interval must be > 0")
        if retry_attempts < 0 or retry_backoff < 0 or socket_timeout <= 0:
            raise ConfigurationError(
                "ValkeyStore retry_attempts and retry_backoff must be >= 0, socket_timeout > 0"
            )
        self.lock_ttl = lock_ttl
        self.heartbeat_interval = heartbeat_interval or lock_ttl / 3
        self.held_ttl = held_ttl
        self.max_replay_entries = max_replay_entries
        self.max_retries = max_retries
        self.max_store_requeues = max_store_requeues
        self.retry_attempts = retry_attempts
        self.retry_backoff = retry_backoff
        self._clock = clock
        if url.startswith("valkey://"):
            url = "redis://" + url.removeprefix("valkey://")
        elif url.startswith("valkeys://"):
            url = "rediss://" + url.removeprefix("valkeys://")
        self._connect(
            url,
            namespace=namespace,
            socket_timeout=socket_timeout,
            eviction_policy_check=eviction_policy_check,
        )

    def __repr__(self) -> str:
        return f"ValkeyStore({self.url!r}, namespace={self.namespace!r})"

    def close(self) -> None:
        self._redis.close()
