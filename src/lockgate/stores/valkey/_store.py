"""ValkeyStore: every store guarantee on a Valkey server, assembled from its roles."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from lockgate._errors import ConfigurationError, LockgateError
from lockgate.stores._base import Store
from lockgate.stores._types import StoreMarker
from lockgate.stores.valkey._chains import ValkeyChains
from lockgate.stores.valkey._connection import SHARD_COUNT_DEFAULT
from lockgate.stores.valkey._insight import ValkeyInsight
from lockgate.stores.valkey._keys import KEY_LAYOUT, SEP, parts_of
from lockgate.stores.valkey._loop import Op, operation
from lockgate.stores.valkey._maintenance import ValkeyMaintenance, glob_escaped
from lockgate.stores.valkey._namespace_records import ValkeyNamespaceRecords
from lockgate.stores.valkey._replies import as_text, decode_hash
from lockgate.stores.valkey._triggers import ValkeyTriggers
from lockgate.stores.valkey._waits import ValkeyWaits

#: The most shards a namespace may have. Every shard is a hash tag of its own, read in turn by
#: each page of runs, claim sweep and rebalance, and a partition of the Kafka journal and of
#: each trigger topic: past a few thousand, each of those passes costs more than another shard
#: could give (a Valkey cluster has 16,384 slots; a Kafka broker is advised a few thousand
#: partitions in all).
SHARD_COUNT_MAX = 4096


class ValkeyStore(
    ValkeyWaits,
    ValkeyTriggers,
    ValkeyNamespaceRecords,
    ValkeyMaintenance,
    ValkeyChains,
    ValkeyInsight,
    Store,
):
    """Every store guarantee on a Valkey server, for worker processes on many hosts.

    ``url`` is ``valkey://``, ``redis://``, ``rediss://`` or ``unix://``; ``store.url`` shows it
    with any password replaced by ``***``, as every message does. Keys live under ``namespace``
    (default ``LOCKGATE_VALKEY_NAMESPACE``, else ``lockgate``), inside one hash tag per shard.
    ``cluster=None`` asks the server (``INFO``) whether it is a cluster and builds the client
    that fits; True or False says so instead. Leases and token buckets are judged by the
    server's clock; a ``clock`` given here replaces it (tests move time that way). A server
    that cannot be reached raises :class:`StoreUnavailable` here; one whose
    ``maxmemory-policy`` may evict keys raises :class:`ConfigurationError` unless
    ``eviction_policy_check`` is False. Calls that lose the
    server are retried ``retry_attempts`` times with backoff from ``retry_base`` seconds,
    then raise :class:`StoreUnavailable`.

    ``maxlen`` is the most events one run's journal may hold (``max_replay_entries``, when
    given, overrides it): the engine ends a run with ``stream:overflow`` before it would go
    past it, and nothing is ever trimmed from a live journal. Journals are read a page at a
    time: at most ``replay_page_size`` events and ``replay_page_bytes`` bytes per reply
    (a claim returns the journal with it only when it fits in one page).
    :meth:`run_maintenance` forgets runs that ended more than ``completed_ttl`` seconds ago
    (None keeps them).

    ``shard_count`` splits the namespace's runs over that many shards, each under a hash tag of
    its own, so a Valkey cluster spreads them over its nodes (see ``valkey._shard_location`` for the
    layout and :meth:`shard_of` for where a run lives). The namespace records its count when
    it is made: a store given none (``None``) takes the recorded one, or makes the namespace
    with :data:`SHARD_COUNT_DEFAULT` (1) shard; one given another count than the recorded
    raises :class:`ShardCountMismatch`. Workers lease
    shards (:meth:`rebalance_shards`, leases living ``shard_lease_ttl`` seconds on the store's
    clock) and claim from theirs first (``claim_next_run(..., prefer=...)``); a claim still
    reaches every shard.
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
        completed_ttl: float | None = 86_400.0,
        maxlen: int = 100_000,
        max_replay_entries: int | None = None,
        replay_page_size: int = 1_000,
        replay_page_bytes: int = 8 * 1024 * 1024,
        max_retries: int = 3,
        max_store_requeues: int = 20,
        retry_attempts: int = 5,
        retry_base: float = 0.1,
        socket_timeout: float = 5.0,
        socket_connect_timeout: float = 2.0,
        cluster: bool | None = None,
        eviction_policy_check: bool = True,
        shard_count: int | None = None,
        shard_lease_ttl: float = 30.0,
        clock: Callable[[], float] | None = None,
    ) -> None:
        if lock_ttl <= 0 or (heartbeat_interval is not None and heartbeat_interval <= 0):
            raise ConfigurationError("ValkeyStore lock_ttl and heartbeat_interval must be > 0")
        if retry_attempts < 0 or retry_base < 0 or socket_timeout <= 0:
            raise ConfigurationError(
                "ValkeyStore retry_attempts and retry_base must be >= 0, socket_timeout > 0"
            )
        if shard_count is not None and (
            isinstance(shard_count, bool)
            or not isinstance(shard_count, int)
            or not 1 <= shard_count <= SHARD_COUNT_MAX
        ):
            raise ConfigurationError(
                f"ValkeyStore shard_count must be a whole number from 1 to {SHARD_COUNT_MAX}, "
                f"got {shard_count!r}"
            )
        if socket_connect_timeout <= 0:
            raise ConfigurationError("ValkeyStore socket_connect_timeout must be > 0")
        if shard_lease_ttl <= 0:
            raise ConfigurationError("ValkeyStore shard_lease_ttl must be > 0")
        self.asked_shards = shard_count
        # Until the namespace answers (``_connect``): then its recorded count when not asked.
        self.shard_count = SHARD_COUNT_DEFAULT if shard_count is None else shard_count
        self.shard_lease_ttl = shard_lease_ttl
        self.lock_ttl = lock_ttl
        self.heartbeat_interval = heartbeat_interval or lock_ttl / 3
        self.held_ttl = held_ttl
        if completed_ttl is not None and completed_ttl <= 0:
            raise ConfigurationError("ValkeyStore completed_ttl must be > 0, or None to keep runs")
        if maxlen < 3 or replay_page_size < 1 or replay_page_bytes < 1:
            raise ConfigurationError(
                "ValkeyStore maxlen must be >= 3, replay_page_size and replay_page_bytes >= 1"
            )
        self.completed_ttl = completed_ttl
        self.maxlen = maxlen
        self.max_replay_entries = maxlen if max_replay_entries is None else max_replay_entries
        self.replay_page_size = replay_page_size
        self.replay_page_bytes = replay_page_bytes
        self.max_retries = max_retries
        self.max_store_requeues = max_store_requeues
        self.retry_attempts = retry_attempts
        self.retry_base = retry_base
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
            cluster=cluster,
            socket_connect_timeout=socket_connect_timeout,
        )

    def __repr__(self) -> str:
        shards = f", shard_count={self.shard_count}" if self.shard_count > 1 else ""
        return f"ValkeyStore({self.url!r}, namespace={self.namespace!r}{shards})"

    def info(self) -> dict[str, Any]:
        """What an operator asks first: the server, its persistence settings, and how many runs
        each workflow has here (live, and ended but not yet forgotten)."""
        server: dict[str, Any] = self._io(lambda: dict(self._redis.info()), "info")
        if "redis_version" not in server and server:
            # A cluster client answers per node: show the first node's settings.
            server = dict(next(iter(server.values())))
        workflows: dict[str, dict[str, int]] = {}
        for shard in self._shards():
            prefix = self._key("runs", shard=shard)
            cursor = "0"
            while True:
                cursor_raw, keys = self._cmd(
                    "SCAN", cursor, "MATCH", glob_escaped(prefix + ":") + "*", "COUNT", 500
                )
                for key in keys:
                    [name] = parts_of(as_text(key).removeprefix(prefix))
                    counts = workflows.setdefault(name, {"runs": 0})
                    counts["runs"] += int(self._cmd("ZCARD", as_text(key)))
                cursor = as_text(cursor_raw)
                if cursor == "0":
                    break
        return {
            "url": self.url,
            "namespace": self.namespace,
            "shard_count": self.shard_count,
            "cluster": self.cluster,
            "server_version": server.get("valkey_version") or server.get("redis_version"),
            "appendonly": self._config("appendonly"),
            "appendfsync": self._config("appendfsync"),
            "maxmemory_policy": self._config("maxmemory-policy"),
            "completed_ttl": self.completed_ttl,
            "workflows": workflows,
        }

    def _config(self, name: str) -> str | None:
        try:
            answer = self._io(lambda: dict(self._redis.config_get(name)), "CONFIG GET")
        except LockgateError:
            return None  # not allowed to read it (an ACL user, a managed service)
        values = {as_text(k): as_text(v) for k, v in answer.items()}
        return values.get(name)

    def ensure_marker(self) -> bool:
        """The marker is the namespace-wide hash ``lg:{<namespace>}:marker`` (fields ``id``,
        ``created_at`` on the server's clock, ``layout``, ``shard_count``). A Valkey that
        restarted without its data, or whose keys were flushed, has lost it with the rest."""
        written = self._script("g_marker", uuid.uuid4().hex, KEY_LAYOUT, str(self.shard_count))
        return bool(int(written))

    def read_marker(self) -> StoreMarker | None:
        raw = self._cmd("HGETALL", self._key("marker"))
        fields = decode_hash(raw) if raw else {}
        return StoreMarker.from_fields(fields) if "id" in fields else None

    @operation
    def shard_of(self, name: str, run_id: str) -> Op[int]:
        """The shard a run lives in: its gate's if it was submitted with one, otherwise the
        one its run id hashes to (a fired run's: its trigger key's). See
        :func:`~lockgate.stores._shards.shard_for` for the hash. An operation, so a Kafka
        journal locating a run from the event loop (a copy) takes no store thread for it."""
        return (yield from self._run_shard_op(name, run_id))

    def rebalance_shards(self, worker_id: str, ttl: float | None = None) -> list[int]:
        """Lease ``worker_id`` its fair share of the shards and return them, ascending.

        Call it every so often (well within ``ttl``, default ``shard_lease_ttl``): it renews
        the worker's leases, gives back those over its share (ceil(shards / live workers),
        a worker counting as live while its last call's ttl has not passed), and takes free
        or expired ones up to its share. Pass the result as ``prefer=`` to claims."""
        if not worker_id or SEP in worker_id:  # a lease is kept as worker SEP expiry
            raise ValueError(f"a worker id must be non-empty, without {SEP!r}: {worker_id!r}")
        answer = self._script(
            "g_lease",
            worker_id,
            repr(float(ttl if ttl is not None else self.shard_lease_ttl)),
            str(self.shard_count),
        )
        return [int(shard) for shard in answer]

    def release_shards(self, worker_id: str) -> None:
        """Give back every shard lease of ``worker_id`` (a worker stopping), so the others
        take them on their next :meth:`rebalance_shards` instead of after the leases lapse."""
        self._script("g_release", worker_id)

    def close(self) -> None:
        self._loop_clients.close()
        self._redis.close()
