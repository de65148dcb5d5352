"""The requests of a Valkey operation made (see ``valkey._loop``): a :class:`Script` called by
SHA-1 (sent whole on ``NOSCRIPT``, which loads it again) with the store's settings in front of
its arguments, :class:`Commands` sent as one pipeline; one command on its own; and an operation
(a generator of requests) driven with the blocking client or with the running loop's."""

from __future__ import annotations

import contextlib
import hashlib
import re
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from lockgate._errors import LockgateError
from lockgate.stores.valkey._loop import (
    LoopClient,
    LoopClients,
    Op,
    Request,
    Script,
    command,
    operation,
    operation_of,
)
from lockgate.stores.valkey._replies import as_text
from lockgate.stores.valkey._retries import ValkeyRetries
from lockgate.stores.valkey._scripts import script_text

with contextlib.suppress(ImportError):  # without the extra, the connection says so
    from redis.exceptions import NoScriptError

T = TypeVar("T")


class ValkeyRequests(ValkeyRetries):
    """Scripts, commands and pipelines sent, and operations driven."""

    lock_ttl: float
    held_ttl: float
    max_retries: int
    max_store_requeues: int
    _clock: Callable[[], float] | None
    #: A ``redis.Redis``, or a ``redis.cluster.RedisCluster`` on a cluster.
    _redis: Any
    #: The namespace-wide prefix; with one shard, also shard 0's.
    prefix: str
    #: Each shard's key prefix.
    _prefixes: list[str]
    #: Each script's text and SHA-1, by name.
    _sources: dict[str, tuple[str, str]]
    _loop_clients: LoopClients

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
        words = [as_text(a) for a in args]
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

    def _pipeline(self, *commands: tuple[Any, ...]) -> list[Any]:
        """Commands sent together: one round trip (on a cluster, one per node involved), no
        atomicity (reads only). The answers come back in the commands' order."""
        pipe = self._redis.pipeline(transaction=False)
        for sent in commands:
            pipe.execute_command(*sent)
        return list(pipe.execute())

    def _server_now_op(self) -> Op[float]:
        if self._clock is not None:
            return float(self._clock())
        [(seconds, micros)] = yield command("TIME")
        return int(seconds) + int(micros) / 1_000_000

    _server_now = operation(_server_now_op)
