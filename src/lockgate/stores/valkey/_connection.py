"""A Valkey store's connection and what it checks before it is used: the server URL, a
reachable server (a cluster, or not, as asked or as the server says), ``maxmemory-policy
noeviction``, and the namespace's key layout and shard count (recorded on first use); and
the asyncio client each event loop gets."""

from __future__ import annotations

import itertools
import os
from typing import Any

from lockgate._errors import ConfigurationError, ShardCountMismatch, StoreUnavailable
from lockgate.stores.valkey import _keys as keyspace
from lockgate.stores.valkey._first_contact import (
    check_server_url,
    first_contact_error,
    redacted_url,
    refuse_plain_server,
    secrets_of,
)
from lockgate.stores.valkey._keys import KEY_LAYOUT, layout_refusal
from lockgate.stores.valkey._loop import LoopClient, LoopClients
from lockgate.stores.valkey._replies import as_text, config_value
from lockgate.stores.valkey._retries import UNREACHABLE
from lockgate.stores.valkey._shard_location import ValkeyShards

try:
    import redis
    from redis.backoff import NoBackoff
    from redis.cluster import RedisCluster
    from redis.exceptions import RedisClusterException, ResponseError
    from redis.retry import Retry
except ImportError:  # pragma: no cover - the extra is missing
    redis = None  # type: ignore[assignment]

NAMESPACE_ENV = "LOCKGATE_VALKEY_NAMESPACE"

#: Shards of a namespace made by a store that does not say: one, the layout of an unsharded
#: store. A store that does not say in a namespace made already takes the count it recorded.
SHARD_COUNT_DEFAULT = 1


class ValkeyConnection(ValkeyShards):
    """The connection, its start-up checks, and the clients of event loops."""

    #: The shard count the store was built with; None: whatever the namespace recorded.
    asked_shards: int | None
    namespace: str

    def _connect(
        self,
        url: str,
        *,
        namespace: str | None,
        socket_timeout: float,
        eviction_policy_check: bool,
        cluster: bool | None = None,
        socket_connect_timeout: float = 2.0,
    ) -> None:
        """Connect to ``url``: a Valkey cluster (keys routed to the node owning their slot)
        when ``cluster`` is True, or when it is None and the server says it runs in cluster
        mode (``INFO cluster``); a single server otherwise."""
        if redis is None:
            raise ConfigurationError(
                "ValkeyStore needs the redis client: pip install 'lockgate[valkey]'"
            )
        chosen = namespace if namespace is not None else os.environ.get(NAMESPACE_ENV, "lockgate")
        if not chosen or any(c in chosen for c in "{}: \t\n"):
            raise ConfigurationError(
                f"Valkey namespace {chosen!r} must be non-empty, without braces, colons or spaces"
            )
        self.namespace = chosen
        #: The namespace-wide prefix; with one shard, also shard 0's.
        self.prefix = f"lg:{{{chosen}}}:"
        # The shards' prefixes wait for the namespace's shard count (``_check_namespace``).
        self._prefixes = [self.prefix]
        self._located_runs: dict[str, int] = {}
        self._buffers: dict[str, dict[str, int]] = {}
        self._claim_turn = itertools.count()
        #: The URL with any password shown as ``***``: the only form messages, logs and
        #: ``repr`` show. The password itself stays with the client's connections.
        self.url = redacted_url(url)
        self._secrets = secrets_of(url)
        self._raw_url = url
        self._client_options: dict[str, Any] = {
            "socket_timeout": socket_timeout,
            "socket_connect_timeout": socket_connect_timeout,
            "decode_responses": False,
        }
        self._loop_clients = LoopClients(self._make_loop_client)
        check_server_url(url, self.url)
        refuse_plain_server(url, self.url, socket_connect_timeout)
        self._redis, self.cluster = self._client(url, cluster)
        if eviction_policy_check:
            self._check_eviction_policy()
        self._sources: dict[str, tuple[str, str]] = {}
        self._check_namespace()
        if self.shard_count > 1:
            self._prefixes = [f"lg:{{{chosen}:{i}}}:" for i in range(self.shard_count)]

    def _client(self, url: str, cluster: bool | None) -> tuple[Any, bool]:
        """The client for ``url`` and whether it is a cluster client, the server reached."""
        options = self._client_options
        plain: Any = None
        try:
            if cluster is not True:
                plain = redis.Redis.from_url(url, **options)
                if cluster is None:
                    try:
                        cluster = bool(plain.info("cluster").get("cluster_enabled"))
                    except ResponseError as exc:
                        if first_contact_error(exc, url, self.url, self._scrub) is not None:
                            raise
                        raise ConfigurationError(
                            f"could not ask Valkey at {self.url} whether it is a cluster "
                            f"(INFO refused: {self._scrub(exc)}); pass cluster=True or "
                            f"cluster=False"
                        ) from None
                else:
                    plain.ping()
                if not cluster:
                    return plain, False
                plain.close()
                plain = None
            # One immediate retry inside the client (after it re-reads the slot map, as a
            # failover needs); the store's own retries with backoff come on top (``_io``).
            return RedisCluster.from_url(url, retry=Retry(NoBackoff(), 1), **options), True
        except BaseException as exc:
            if plain is not None:
                plain.close()
            cause = first_contact_error(exc, url, self.url, self._scrub)
            if cause is not None:
                raise cause from exc
            if isinstance(exc, RedisClusterException) and "cluster mode is not enabled" in (
                str(exc).lower()
            ):
                raise ConfigurationError(
                    f"Valkey at {self.url} is not a cluster (cluster mode is not enabled): "
                    f"pass cluster=False, or leave cluster=None to ask the server"
                ) from None
            if isinstance(exc, RedisClusterException) and "cannot be connected" not in str(exc):
                raise ConfigurationError(  # a Unix socket, a db other than 0, ...
                    f"cannot use the Valkey cluster at {self.url}: {self._scrub(exc)}"
                ) from None
            if isinstance(exc, UNREACHABLE):
                raise StoreUnavailable(
                    f"cannot reach Valkey at {self.url}: {self._scrub(exc)}"
                ) from None
            if isinstance(exc, ValueError):
                raise ConfigurationError(
                    f"Valkey URL {self.url!r} is not usable: {self._scrub(exc)}"
                ) from None
            raise

    def _check_eviction_policy(self) -> None:
        """Refuse a server (on a cluster: any primary) whose ``maxmemory-policy`` may evict
        keys, or whose policy cannot be read."""
        if self.cluster:
            places = [(node.name, node) for node in self._redis.get_primaries()]
        else:
            places = [(self.url, None)]
        for where, node in places:
            try:
                if node is None:
                    raw = self._redis.execute_command("CONFIG GET", "maxmemory-policy")
                else:
                    raw = self._redis.execute_command(
                        "CONFIG GET", "maxmemory-policy", target_nodes=node
                    )
            except UNREACHABLE as exc:
                raise StoreUnavailable(
                    f"cannot reach Valkey at {where}: {self._scrub(exc)}"
                ) from None
            except ResponseError as exc:  # NOPERM from an ACL, CONFIG renamed away, ...
                raise ConfigurationError(
                    f"could not read the maxmemory-policy of Valkey at {where} "
                    f"({self._scrub(exc)}): lockgate needs noeviction, as a lease or a counter "
                    f"evicted loses runs silently. Grant the user CONFIG GET, or pass "
                    f"eviction_policy_check=False if the policy is known to be noeviction"
                ) from None
            policy = config_value(raw, "maxmemory-policy")
            if policy != "noeviction":
                raise ConfigurationError(
                    f"Valkey at {where} has maxmemory-policy {policy!r}: it may evict a lease or "
                    f"a counter, which loses runs silently. Set maxmemory-policy noeviction, "
                    f"or pass eviction_policy_check=False if you accept that"
                )

    def _check_namespace(self) -> None:
        """Record the namespace's key layout and shard count on first use, or refuse a store
        that would read it wrongly: a namespace of another key layout (an older lockgate's,
        whose keys this one would not find, see ``valkey._keys``), or another shard count (its
        runs would be looked for in the wrong shards: :class:`ShardCountMismatch`). A store
        given no shard count (``asked_shards`` None) takes the recorded one, and records
        :data:`SHARD_COUNT_DEFAULT` in a namespace that has none yet."""
        asked = self.asked_shards
        offered = str(SHARD_COUNT_DEFAULT if asked is None else asked)
        layout, shards = self._script("g_namespace", KEY_LAYOUT, offered, "")
        if as_text(layout) == "1" and keyspace.written_now(keyspace.under(self._cmd, self.prefix)):
            # Keys of this layout, written after the namespace lost its data: record it again.
            layout, shards = self._script("g_namespace", KEY_LAYOUT, offered, "1")
        layout, recorded = as_text(layout), as_text(shards)
        if layout != KEY_LAYOUT:
            raise ConfigurationError(layout_refusal(self.namespace, layout, NAMESPACE_ENV))
        if not recorded.isdigit() or int(recorded) < 1:
            raise ConfigurationError(
                f"Valkey namespace {self.namespace!r} records a shard count of {recorded!r}, "
                f"which is no whole number of at least 1: its 'shards' key was written by "
                f"something other than lockgate"
            )
        if asked is None:
            self.shard_count = int(recorded)
        elif int(recorded) != asked:
            raise ShardCountMismatch(self.namespace, int(recorded), asked)

    def _make_loop_client(self) -> LoopClient:
        """An asyncio client like the blocking one, for one event loop: pipelining what is
        asked at once on one server; on a cluster, where commands go to different nodes,
        sending each on its own."""
        # Imported here, when a loop first uses the store: a command reading runs on one
        # thread needs only the blocking client.
        from redis.asyncio import Redis as AsyncRedis
        from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
        from redis.asyncio.retry import Retry as AsyncRetry

        options = dict(self._client_options)
        if self.cluster:
            cluster = AsyncRedisCluster.from_url(
                self._raw_url, retry=AsyncRetry(NoBackoff(), 1), **options
            )
            return LoopClient(cluster, pipelined=False)
        timeout = options.pop("socket_timeout")
        client = AsyncRedis.from_url(self._raw_url, socket_timeout=None, **options)
        return LoopClient(client, pipelined=True, timeout=timeout)
