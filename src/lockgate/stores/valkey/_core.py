"""The Valkey store's plumbing: the connection, the Lua scripts (called by SHA; sent whole,
which loads them again, on ``NOSCRIPT``), retries with backoff, the drivers of operations (see
``valkey._loop``), shards and their key prefixes, and a run's hash read back.

Shards. A namespace's runs are split over ``shard_count`` shards. Every key of shard ``i``
carries the hash tag ``{<namespace>:<i>}`` (``lg:{<namespace>:<i>}:...``), and what is not one
shard's (idempotency records, version ranks, recorded policies, shard leases, the run -> shard
index, controls held for ids no shard holds yet) carries ``{<namespace>}``. With one shard the
two coincide: every key is ``lg:{<namespace>}:...``, the layout of an unsharded store. Every
script touches the keys of one prefix only, so one slot, and the store works unchanged on a
Valkey cluster. What follows the prefix (a kind, then each name or id length-prefixed) is in
``valkey._keys``; a store refuses a namespace written with another layout at connect.

A run's shard is that of its *shard key* (:func:`shard_for`): its ``Limit``'s concurrency key,
else its ``Rate``'s key, so that everything one gate key counts (its slots, its token bucket,
its queued runs) is in one shard and every claim checks it exactly. A run with both gates keyed
differently has its Rate bucket counted in its Limit key's shard: runs that share that rate key
but not the concurrency key may count it in other shards. An ungated run's shard key is its run
id; one a trigger fires, its trigger key (its buffer's shard, where the fire creates it).
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import logging
import os
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from lockgate._errors import (
    ConfigurationError,
    DuplicateRunError,
    EventAfterTerminal,
    IdempotencyConflict,
    LockgateError,
    LockLost,
    RunFinishedError,
    RunGatedError,
    RunNotFoundError,
    RunOwnedError,
    ShardCountMismatch,
    StoreUnavailable,
)
from lockgate.journal._events import RunEvent, RunStatus
from lockgate.stores._records import derive_status
from lockgate.stores._shards import shard_for
from lockgate.stores._types import RunInfo, WaitSpec
from lockgate.stores.valkey import _keys as keyspace
from lockgate.stores.valkey._connect import (
    check_server_url,
    first_contact_error,
    redacted_url,
    refuse_plain_server,
    secrets_of,
)
from lockgate.stores.valkey._keys import KEY_LAYOUT, key, layout_refusal, member, split_member
from lockgate.stores.valkey._loop import (
    Commands,
    LoopClient,
    LoopClients,
    Op,
    Request,
    Script,
    command,
    operation,
    operation_of,
)
from lockgate.stores.valkey._scripts import script_text

try:
    import redis
    from redis.backoff import NoBackoff
    from redis.cluster import RedisCluster
    from redis.exceptions import (
        ClusterDownError,
        MovedError,
        NoScriptError,
        RedisClusterException,
        ResponseError,
        TryAgainError,
    )
    from redis.exceptions import (
        ConnectionError as RedisConnectionError,
    )
    from redis.exceptions import (
        TimeoutError as RedisTimeoutError,
    )
    from redis.retry import Retry
except ImportError:  # pragma: no cover - the extra is missing
    redis = None  # type: ignore[assignment]

log = logging.getLogger("lockgate.valkey")
T = TypeVar("T")

NAMESPACE_ENV = "LOCKGATE_VALKEY_NAMESPACE"
#: Shards of a namespace made by a store that does not say: one, the layout of an unsharded
#: store. A store that does not say in a namespace made already takes the count it recorded.
SHARD_COUNT_DEFAULT = 1
#: Runs whose shard one process remembers; past it the memory starts over.
LOCATED_CACHE = 100_000


def _error(message: str) -> LockgateError:
    """A script's ``LG:<CODE> <detail>`` reply as the lockgate error it stands for."""
    code, _, detail = message.partition(" ")
    code = code.removeprefix("LG:")
    if code == "NOT_FOUND":
        return RunNotFoundError(*split_member(detail))
    if code == "DUPLICATE":
        return DuplicateRunError(*split_member(detail))
    if code == "LOCK_LOST":
        return LockLost(detail)
    if code == "AFTER_TERMINAL":
        return EventAfterTerminal(detail)
    if code == "FINISHED":
        return RunFinishedError(detail)
    if code == "OWNED":
        return RunOwnedError(detail)
    if code == "GATED":
        return RunGatedError(detail)
    if code == "IDEMPOTENCY":
        return IdempotencyConflict(detail)
    return LockgateError(message)


class ValkeyCore:
    """Connection, scripts and the shared reading of runs."""

    lock_ttl: float
    held_ttl: float
    max_retries: int
    max_store_requeues: int
    retry_attempts: int
    retry_base: float
    #: The namespace's shard count: the one asked for, else the one it recorded.
    shard_count: int
    #: The shard count the store was built with; None: whatever the namespace recorded.
    asked_shards: int | None
    _clock: Callable[[], float] | None
    #: A ``redis.Redis``, or a ``redis.cluster.RedisCluster`` on a cluster.
    _redis: Any
    #: Whether the store talks to a Valkey cluster (keys routed to their slot's node).
    cluster: bool

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
            if isinstance(exc, _UNREACHABLE):
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
            except _UNREACHABLE as exc:
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
            policy = _config_value(raw, "maxmemory-policy")
            if policy != "noeviction":
                raise ConfigurationError(
                    f"Valkey at {where} has maxmemory-policy {policy!r}: it may evict a lease or "
                    f"a counter, which loses runs silently. Set maxmemory-policy noeviction, "
                    f"or pass eviction_policy_check=False if you accept that"
                )

    def _scrub(self, error: object) -> str:
        """``error``'s text with the URL's password (if it shows up at all) as ``***``."""
        text = str(error)
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

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
        if _text(layout) == "1" and keyspace.written_now(keyspace.under(self._cmd, self.prefix)):
            # Keys of this layout, written after the namespace lost its data: record it again.
            layout, shards = self._script("g_namespace", KEY_LAYOUT, offered, "1")
        layout, recorded = _text(layout), _text(shards)
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

    # -- calling scripts ---------------------------------------------------------------------

    def _now_arg(self) -> str:
        return "" if self._clock is None else repr(float(self._clock()))

    def _source(self, name: str) -> tuple[str, str]:
        """Script ``name``'s text (:func:`script_text`) and its SHA-1, by which the server
        knows it once loaded."""
        found = self._sources.get(name)
        if found is None:
            text = script_text(name)
            sha = hashlib.sha1(text.encode(), usedforsecurity=False).hexdigest()
            found = self._sources[name] = (text, sha)
        return found

    def _script_argv(self, args: tuple[Any, ...], shard: int | None) -> list[Any]:
        """The ``EVALSHA`` arguments after the SHA: one key (the prefix's anchor, which puts
        the call in the prefix's slot), the store's settings, then the operation's ``args``."""
        prefix = self.prefix if shard is None else self._prefixes[shard]
        return [
            1,
            prefix + "anchor",
            prefix,
            self._now_arg(),
            repr(float(self.lock_ttl)),
            str(self.max_retries),
            str(self.max_store_requeues),
            repr(float(self.held_ttl)),
            *("" if a is None else a for a in args),
        ]

    def _script(self, name: str, *args: Any, shard: int | None = None) -> Any:
        """Run script ``name`` with the operation's ``args`` on ``shard``'s keys (None: the
        namespace-wide ones): one atomic step."""
        text, sha = self._source(name)
        argv = self._script_argv(args, shard)

        def call() -> Any:
            try:
                return self._redis.evalsha(sha, *argv)
            except NoScriptError:  # a new server, or one that restarted or flushed its scripts
                return self._redis.eval(text, *argv)  # which caches it again

        return self._io(call, name)

    async def _ascript(
        self, client: LoopClient, name: str, args: tuple[Any, ...], shard: int | None
    ) -> Any:
        """:meth:`_script` with the loop's client."""
        text, sha = self._source(name)
        argv = self._script_argv(args, shard)

        async def call() -> Any:
            try:
                return await client.send("EVALSHA", sha, *argv)
            except NoScriptError:
                return await client.send("EVAL", text, *argv)

        return await self._aio(call, name)

    def _io(self, call: Callable[[], Any], what: str) -> Any:
        """``call``, retried with backoff while the server (on a cluster: the node owning the
        slot) is unreachable or the cluster is down; then :class:`StoreUnavailable`. A script's
        own refusal becomes its lockgate error."""
        delay = self.retry_base
        for attempt in range(self.retry_attempts + 1):
            try:
                return call()
            except Exception as exc:  # judged: raised unless retried
                self._judge(exc, attempt, delay, what)
            time.sleep(delay)
            delay = min(delay * 2, 2.0)
        raise AssertionError("unreachable")

    async def _aio(self, call: Callable[[], Awaitable[Any]], what: str) -> Any:
        """:meth:`_io` on the event loop: the backoff waits without holding it up."""
        delay = self.retry_base
        for attempt in range(self.retry_attempts + 1):
            try:
                return await call()
            except Exception as exc:  # judged: raised unless retried
                self._judge(exc, attempt, delay, what)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)
        raise AssertionError("unreachable")

    def _judge(self, exc: Exception, attempt: int, delay: float, what: str) -> None:
        """Return when a call that failed with ``exc`` on try ``attempt`` is to be tried again
        after ``delay`` seconds (logged); otherwise raise what the store raises for it."""
        if isinstance(exc, _UNREACHABLE):
            if attempt >= self.retry_attempts:
                raise StoreUnavailable(
                    f"Valkey at {self.url} is unreachable ({what}): {self._scrub(exc)}"
                ) from exc
            # Each retry of each call: debug. What gives up raises, and a worker tells the
            # outage once (its store state), not once per call. The hooks imported here: they
            # import prometheus-client, which a process reading the store (the CLI) never uses.
            from lockgate.metrics import _hooks as metrics

            metrics.store_retried("valkey")
            log.debug(
                "Valkey at %s is unreachable (%s); retrying in %.2fs",
                self.url,
                self._scrub(exc),
                delay,
            )
            return
        if isinstance(exc, ResponseError):
            message = str(exc)
            if message.startswith("LG:"):
                raise _error(message) from None
            if isinstance(exc, MovedError) and not self.cluster:
                raise ConfigurationError(
                    f"Valkey at {self.url} is a cluster node and another node owns the "
                    f"keys of {what} ({self._scrub(message)}): leave cluster=None (or pass "
                    f"cluster=True) so the store routes every key to its node"
                ) from None
            raise StoreUnavailable(f"Valkey refused {what}: {self._scrub(message)}") from exc
        raise exc

    # -- operations: written once, run from a thread or on the event loop ---------------------

    def _run(self, op: Op[T]) -> T:
        """Drive ``op`` with the blocking client."""
        answer: Any = None
        error: Exception | None = None
        while True:
            try:
                request = op.send(answer) if error is None else op.throw(error)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
            try:
                answer, error = self._perform(request), None
            except Exception as exc:  # thrown into the operation
                answer, error = None, exc

    async def _arun(self, op: Op[T]) -> T:
        """Drive ``op`` with this loop's asyncio client."""
        client = self._loop_clients.running() or await self._loop_clients.client()
        answer: Any = None
        error: Exception | None = None
        while True:
            try:
                request = op.send(answer) if error is None else op.throw(error)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
            try:
                answer, error = await self._aperform(client, request), None
            except Exception as exc:  # thrown into the operation
                answer, error = None, exc

    def _perform(self, request: Request) -> Any:
        if isinstance(request, Script):
            return self._script(request.name, *request.args, shard=request.shard)
        return self._io(lambda: self._pipeline(*request.commands), request.what)

    async def _aperform(self, client: LoopClient, request: Request) -> Any:
        if isinstance(request, Script):
            return await self._ascript(client, request.name, request.args, request.shard)
        return await self._aio(lambda: client.send_all(request.commands), request.what)

    def coroutine_for(self, method: Callable[..., Any]) -> Callable[..., Awaitable[Any]] | None:
        """``method``'s operation, run with the running loop's client, when ``method`` is one
        of this store's methods made with :func:`operation`."""
        op = operation_of(method) if getattr(method, "__self__", None) is self else None
        if op is None:
            return None
        return lambda *args, **kwargs: self._arun(op(self, *args, **kwargs))

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

    def _cmd(self, *args: Any) -> Any:
        """One command: on a cluster, sent to the node owning its key's slot (keyless ones,
        such as TIME and PING, to the client's default node; SCAN to the node owning the
        slot of its ``MATCH`` pattern's prefix, as every pattern here lies in one prefix)."""
        if self.cluster and str(args[0]).upper() == "SCAN":
            # The node's own client: its cursor means something on that node only.
            return self._io(
                lambda: self._redis.get_redis_connection(
                    self._node_of_pattern(args)
                ).execute_command(*args),
                "SCAN",
            )
        return self._io(lambda: self._redis.execute_command(*args), str(args[0]))

    def _node_of_pattern(self, args: tuple[Any, ...]) -> Any:
        """The cluster node holding the keys a ``SCAN ... MATCH <pattern>`` looks for: that
        of the store prefix the (glob-unescaped) pattern starts with."""
        words = [_text(a) for a in args]
        upper = [w.upper() for w in words]
        pattern = words[upper.index("MATCH") + 1] if "MATCH" in upper[:-1] else ""
        literal = re.sub(r"\\(.)", r"\1", pattern)
        for prefix in (self.prefix, *self._prefixes):
            if literal.startswith(prefix):
                return self._redis.get_node_from_key(prefix)
        raise LockgateError(
            f"SCAN on a Valkey cluster needs a MATCH inside one of the store's prefixes, "
            f"not {pattern!r}"
        )

    # -- keys and reading runs ---------------------------------------------------------------

    def _key(self, kind: str, *parts: str, shard: int | None = None) -> str:
        """The key of ``kind`` for ``parts`` (names, ids, ...: see ``valkey._keys``) in
        ``shard`` (None: a namespace-wide one)."""
        return key(self.prefix if shard is None else self._prefixes[shard], kind, *parts)

    def _pipeline(self, *commands: tuple[Any, ...]) -> list[Any]:
        """Commands sent together: one round trip (on a cluster, one per node involved), no
        atomicity (reads only). The answers come back in the commands' order."""
        pipe = self._redis.pipeline(transaction=False)
        for sent in commands:
            pipe.execute_command(*sent)
        return list(pipe.execute())

    # -- shards --------------------------------------------------------------------------------

    def _home(self, key: str) -> int:
        return shard_for(key, self.shard_count)

    def _located_op(self, name: str, run_id: str) -> Op[int | None]:
        """The shard holding the run, or None when none does: remembered, else the index
        (``shardof``: ``name SEP run_id`` -> shard, written before every submit), else every
        shard asked (a fired run whose index entry was lost with its process)."""
        if self.shard_count == 1:
            return 0
        entry = member(name, run_id)
        shard = self._located_runs.get(entry)
        if shard is not None:
            return shard
        [indexed] = yield command("HGET", self._key("shardof"), entry)
        if indexed is not None:
            shard = int(indexed)
        else:
            found = yield Commands(
                tuple(("EXISTS", self._key("r", name, run_id, shard=s)) for s in self._shards()),
                "locating a run",
            )
            shard = next((s for s, hit in enumerate(found) if int(hit)), None)
            if shard is None:
                return None
            yield command("HSETNX", self._key("shardof"), entry, str(shard))
        self._remember(name, run_id, shard)
        return shard

    _located = operation(_located_op)

    def _remember(self, name: str, run_id: str, shard: int) -> None:
        """Remember the run's shard (a run never changes shards)."""
        if self.shard_count == 1:
            return
        if len(self._located_runs) >= LOCATED_CACHE:
            self._located_runs.clear()
        self._located_runs[member(name, run_id)] = shard

    def _forget(self, name: str, run_id: str) -> None:
        """Forget where the run was thought to be: an index entry whose submit never landed."""
        self._located_runs.pop(member(name, run_id), None)

    def _run_shard_op(self, name: str, run_id: str) -> Op[int]:
        """The shard to address the run in: where it is, else the one its id hashes to (where
        a script finds it missing and answers so)."""
        located = yield from self._located_op(name, run_id)
        return located if located is not None else self._home(run_id)

    _run_shard = operation(_run_shard_op)

    def _on_run_op(self, script: str, name: str, run_id: str, *args: Any) -> Op[Any]:
        """Script ``script`` for the run (``name``, ``run_id``, ``*args``) in its shard."""
        shard = yield from self._run_shard_op(name, run_id)
        try:
            return (yield Script(script, (name, run_id, *args), shard))
        except RunNotFoundError:
            self._forget(name, run_id)
            raise

    _on_run = operation(_on_run_op)

    def _run_key(self, kind: str, name: str, run_id: str) -> str:
        """The run's key of ``kind`` (``r``, ``e``, ``sig``, ...), in the run's shard."""
        return self._key(kind, name, run_id, shard=self._run_shard(name, run_id))

    def _shards(self) -> range:
        return range(self.shard_count)

    def _claim_order_op(self, name: str, prefer: Sequence[int]) -> Op[list[int]]:
        """The shards a claim of ``name`` tries, in order: ``prefer``'s (as given), then the
        others from a place that moves on with every claim, so none is always last. Shards
        with nothing queued are left out (asked in one round trip)."""
        if self.shard_count == 1:
            return [0]
        first = list(dict.fromkeys(s for s in prefer if 0 <= s < self.shard_count))
        start = next(self._claim_turn) % self.shard_count
        rest = [s for s in (*range(start, self.shard_count), *range(start)) if s not in first]
        order = first + rest
        queued = yield Commands(
            tuple(("EXISTS", self._key("qb", name, shard=s)) for s in order), "claim"
        )
        return [s for s, hit in zip(order, queued, strict=True) if int(hit)]

    def _server_now_op(self) -> Op[float]:
        if self._clock is not None:
            return float(self._clock())
        [(seconds, micros)] = yield command("TIME")
        return int(seconds) + int(micros) / 1_000_000

    _server_now = operation(_server_now_op)

    def _fields_op(self, name: str, run_id: str) -> Op[dict[str, str] | None]:
        """The run's hash, or None when no shard holds the run."""
        shard = yield from self._located_op(name, run_id)
        if shard is None:
            return None
        [raw] = yield command("HGETALL", self._key("r", name, run_id, shard=shard))
        if not raw:
            self._forget(name, run_id)
            return None
        return _decode_hash(raw)

    _fields = operation(_fields_op)

    def _info(self, name: str, run_id: str, fields: dict[str, str], now: float) -> RunInfo:
        wait = WaitSpec.from_dict(json.loads(fields["wait"])) if fields.get("wait") else None
        lock = fields.get("lock") or None
        live = lock is not None and float(fields.get("lock_expires") or 0) > now
        terminal = fields.get("terminal") or None
        return RunInfo(
            name=name,
            run_id=run_id,
            status=derive_status(
                terminal=RunStatus(terminal) if terminal else None,
                lock_live=live,
                lock_set=lock is not None,
                wait_kind=wait.kind if wait is not None else None,
                queued=bool(fields.get("queued")),
            ),
            submitted_at=float(fields["submitted_at"]),
            params=json.loads(fields["params"]),
            owner=fields.get("owner") or None,
            metadata=json.loads(fields.get("metadata") or "{}"),
            version=fields.get("version", ""),
            version_behavior=fields.get("version_behavior", "pinned"),
            lock_holder=lock if live else None,
            wait=wait,
            cancel_requested_at=fields.get("cancel_at") or None,
            ended_at=float(fields["ended_at"]) if fields.get("ended_at") else None,
        )


def _config_value(raw: Any, name: str) -> str:
    """One parameter of a ``CONFIG GET`` answer, paired up by the client or not."""
    if isinstance(raw, dict):
        answer = {_text(k): v for k, v in raw.items()}
    else:
        items = list(raw)
        answer = {_text(items[i]): items[i + 1] for i in range(0, len(items) - 1, 2)}
    return _text(answer.get(name, "noeviction"))


#: Failures that may pass (a server or cluster node away, a failover under way): retried.
_UNREACHABLE: tuple[type[BaseException], ...] = (
    (
        RedisConnectionError,
        RedisTimeoutError,
        OSError,
        ClusterDownError,
        TryAgainError,
        RedisClusterException,
    )
    if redis is not None
    else (OSError,)
)


def _decode_hash(raw: Any) -> dict[str, str]:
    if isinstance(raw, dict):
        return {_text(k): _text(v) for k, v in raw.items()}
    items = list(raw)
    return {_text(items[i]): _text(items[i + 1]) for i in range(0, len(items), 2)}


def _scored(raw: Any) -> dict[str, float]:
    """A ``WITHSCORES`` reply as member -> score, whether the client paired it up or not."""
    items = list(raw)
    if items and isinstance(items[0], list | tuple):
        return {_text(member): float(score) for member, score in items}
    return {_text(items[i]): float(items[i + 1]) for i in range(0, len(items), 2)}


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def event_args(events: Sequence[RunEvent]) -> str:
    """Events as the scripts take them: a JSON list of [kind, payload JSON, schema, headers]."""
    return json.dumps(
        [
            [
                e.kind,
                json.dumps(e.payload, allow_nan=False, separators=(",", ":")),
                e.schema_version,
                json.dumps(dict(e.headers), separators=(",", ":")),
            ]
            for e in events
        ],
        separators=(",", ":"),
    )


def event_from(name: str, run_id: str, entry_id: Any, fields: Any) -> RunEvent:
    data = _decode_hash(fields)
    seq = int(_text(entry_id).split("-", 1)[1])
    headers = json.loads(data.get("h") or "{}")
    return RunEvent(
        kind=data["k"],
        payload=json.loads(data["p"]),
        run_id=run_id,
        schema_version=data.get("v", "1"),
        run_seq=seq,
        headers=headers if isinstance(headers, dict) else {},
    )
