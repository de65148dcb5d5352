"""The Valkey store's plumbing: the connection, the Lua scripts (loaded once, called by SHA,
reloaded on ``NOSCRIPT``), retries with backoff, shards and their key prefixes, and a run's hash
read back.

Shards. A namespace's runs are split over ``shard_count`` shards. Every key of shard ``i``
carries the hash tag ``{<namespace>:<i>}`` (``lg:{<namespace>:<i>}:...``), and what is not one
shard's (idempotency records, version ranks, recorded policies, shard leases, the run -> shard
index, controls held for ids no shard holds yet) carries ``{<namespace>}``. With one shard the
two coincide: every key is ``lg:{<namespace>}:...``, the layout of an unsharded store. Every
script touches the keys of one prefix only, so one slot, and the store works unchanged on a
Valkey cluster.

A run's shard is that of its *shard key* (:func:`shard_for`): its ``Limit``'s concurrency key,
else its ``Rate``'s key, so that everything one gate key counts (its slots, its token bucket,
its queued runs) is in one shard and every claim checks it exactly. A run with both gates keyed
differently has its Rate bucket counted in its Limit key's shard: runs that share that rate key
but not the concurrency key may count it in other shards. An ungated run's shard key is its run
id; one a trigger fires, its trigger key (its buffer's shard, where the fire creates it).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from importlib import resources
from typing import Any

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
    StoreUnavailable,
)
from lockgate.journal._events import RunEvent, RunStatus
from lockgate.stores._records import derive_status
from lockgate.stores._types import RunInfo, WaitSpec

try:
    import redis
    from redis.exceptions import (
        ConnectionError as RedisConnectionError,
    )
    from redis.exceptions import (
        NoScriptError,
        ResponseError,
    )
    from redis.exceptions import (
        TimeoutError as RedisTimeoutError,
    )
except ImportError:  # pragma: no cover - the extra is missing
    redis = None  # type: ignore[assignment]

log = logging.getLogger("lockgate.valkey")

NAMESPACE_ENV = "LOCKGATE_VALKEY_NAMESPACE"
SEP = "\x1f"
#: Runs whose shard one process remembers; past it the memory starts over.
LOCATED_CACHE = 100_000


def shard_for(key: str, shard_count: int) -> int:
    """The shard of shard key ``key``: the first 8 bytes of the SHA-1 of its UTF-8 encoding,
    read as a big-endian unsigned integer, modulo ``shard_count``. Spelled out (never Python's
    salted ``hash()``) so every process, and a client in any language, agrees."""
    digest = hashlib.sha1(key.encode(), usedforsecurity=False).digest()
    return int.from_bytes(digest[:8], "big") % shard_count


def shard_key(concurrency_key: str | None, rate_key: str | None, fallback: str) -> str:
    """The key a run's shard is hashed from: its Limit's key, else its Rate's, else
    ``fallback`` (its run id, or a fired run's trigger key)."""
    if concurrency_key is not None:
        return concurrency_key
    return rate_key if rate_key is not None else fallback


def _lib() -> str:
    return (resources.files("lockgate.stores") / "lua" / "_lib.lua").read_text()


def _script_text(name: str) -> str:
    return (resources.files("lockgate.stores") / "lua" / f"{name}.lua").read_text()


def _error(message: str) -> LockgateError:
    """A script's ``LG:<CODE> <detail>`` reply as the lockgate error it stands for."""
    code, _, detail = message.partition(" ")
    code = code.removeprefix("LG:")
    if code == "NOT_FOUND":
        name, _, run_id = detail.partition(SEP)
        return RunNotFoundError(name, run_id)
    if code == "DUPLICATE":
        name, _, run_id = detail.partition(SEP)
        return DuplicateRunError(name, run_id)
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
    retry_backoff: float
    shard_count: int
    _clock: Callable[[], float] | None

    def _connect(
        self,
        url: str,
        *,
        namespace: str | None,
        socket_timeout: float,
        eviction_policy_check: bool,
    ) -> None:
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
        self._prefixes = (
            [self.prefix]
            if self.shard_count == 1
            else [f"lg:{{{chosen}:{i}}}:" for i in range(self.shard_count)]
        )
        self._located_runs: dict[str, int] = {}
        self._buffers: dict[str, dict[str, int]] = {}
        self._claim_turn = itertools.count()
        self.url = url
        try:
            self._redis = redis.Redis.from_url(
                url,
                socket_timeout=socket_timeout,
                socket_connect_timeout=socket_timeout,
                decode_responses=False,
            )
            info = self._redis.info()
        except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
            raise StoreUnavailable(f"cannot reach Valkey at {url}: {exc}") from exc
        self.cluster = bool(info.get("cluster_enabled"))
        if eviction_policy_check:
            answer = {
                _text(k): v for k, v in dict(self._redis.config_get("maxmemory-policy")).items()
            }
            policy = _text(answer.get("maxmemory-policy", "noeviction"))
            if policy != "noeviction":
                raise ConfigurationError(
                    f"Valkey at {url} has maxmemory-policy {policy!r}: it may evict a lease or "
                    f"a counter, which loses runs silently. Set maxmemory-policy noeviction, "
                    f"or pass eviction_policy_check=False if you accept that"
                )
        self._lib = _lib()
        self._shas: dict[str, str] = {}
        self._script_lock = threading.Lock()
        self._check_shard_count()

    def _check_shard_count(self) -> None:
        """Record the namespace's shard count, or refuse a store built with another one: its
        runs would be looked for in the wrong shards."""
        key = self._key("shards")
        self._cmd("SET", key, str(self.shard_count), "NX")
        recorded = _text(self._cmd("GET", key))
        if recorded != str(self.shard_count):
            raise ConfigurationError(
                f"Valkey namespace {self.namespace!r} has {recorded} shard(s), not "
                f"{self.shard_count}: every store of a namespace needs the same shard_count"
            )

    # -- calling scripts ---------------------------------------------------------------------

    def _now_arg(self) -> str:
        return "" if self._clock is None else repr(float(self._clock()))

    def _sha(self, name: str) -> str:
        sha = self._shas.get(name)
        if sha is None:
            with self._script_lock:
                text = self._lib + "\n" + _script_text(name)
                sha = self._shas[name] = _text(self._redis.script_load(text))
        return sha

    def _script(self, name: str, *args: Any, shard: int | None = None) -> Any:
        """Run script ``name`` with the operation's ``args`` on ``shard``'s keys (None: the
        namespace-wide ones): one atomic step."""
        prefix = self.prefix if shard is None else self._prefixes[shard]
        anchor = prefix + "anchor"
        argv = [
            prefix,
            self._now_arg(),
            repr(float(self.lock_ttl)),
            str(self.max_retries),
            str(self.max_store_requeues),
            repr(float(self.held_ttl)),
            *("" if a is None else a for a in args),
        ]

        def call() -> Any:
            try:
                return self._redis.evalsha(self._sha(name), 1, anchor, *argv)
            except NoScriptError:
                self._shas.pop(name, None)  # the server restarted or flushed its scripts
                return self._redis.evalsha(self._sha(name), 1, anchor, *argv)

        return self._io(call, name)

    def _io(self, call: Callable[[], Any], what: str) -> Any:
        """``call``, retried with backoff while the server is unreachable; then
        :class:`StoreUnavailable`. A script's own refusal becomes its lockgate error."""
        delay = self.retry_backoff
        for attempt in range(self.retry_attempts + 1):
            try:
                return call()
            except ResponseError as exc:
                message = str(exc)
                if message.startswith("LG:"):
                    raise _error(message) from None
                raise StoreUnavailable(f"Valkey refused {what}: {message}") from exc
            except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
                if attempt >= self.retry_attempts:
                    raise StoreUnavailable(
                        f"Valkey at {self.url} is unreachable ({what}): {exc}"
                    ) from exc
                log.warning(
                    "Valkey at %s is unreachable (%s); retrying in %.2fs", self.url, exc, delay
                )
                time.sleep(delay)
                delay = min(delay * 2, 2.0)
        raise AssertionError("unreachable")

    def _cmd(self, *args: Any) -> Any:
        return self._io(lambda: self._redis.execute_command(*args), str(args[0]))  # type: ignore[no-untyped-call]

    # -- keys and reading runs ---------------------------------------------------------------

    def _key(self, *parts: str, shard: int | None = None) -> str:
        """A key of ``shard`` (None: a namespace-wide one)."""
        return (self.prefix if shard is None else self._prefixes[shard]) + ":".join(parts)

    def _pipeline(self, *commands: tuple[Any, ...]) -> list[Any]:
        """Commands sent together: one round trip, no atomicity (reads only)."""
        pipe = self._redis.pipeline(transaction=False)
        for command in commands:
            pipe.execute_command(*command)  # type: ignore[no-untyped-call]
        return list(pipe.execute())

    # -- shards --------------------------------------------------------------------------------

    def _home(self, key: str) -> int:
        return shard_for(key, self.shard_count)

    def _located(self, name: str, run_id: str) -> int | None:
        """The shard holding the run, or None when none does: remembered, else the index
        (``shardof``: ``name SEP run_id`` -> shard, written before every submit), else every
        shard asked (a fired run whose index entry was lost with its process)."""
        if self.shard_count == 1:
            return 0
        member = name + SEP + run_id
        shard = self._located_runs.get(member)
        if shard is not None:
            return shard
        indexed = self._cmd("HGET", self._key("shardof"), member)
        if indexed is not None:
            shard = int(indexed)
        else:
            shard = self._probe(name, run_id)
            if shard is None:
                return None
            self._cmd("HSETNX", self._key("shardof"), member, str(shard))
        self._remember(name, run_id, shard)
        return shard

    def _probe(self, name: str, run_id: str) -> int | None:
        """The shard whose keys hold the run, asking them all in one round trip."""
        found = self._io(
            lambda: self._pipeline(
                *(("EXISTS", self._key("r", name, run_id, shard=s)) for s in self._shards())
            ),
            "locating a run",
        )
        return next((shard for shard, hit in enumerate(found) if int(hit)), None)

    def _remember(self, name: str, run_id: str, shard: int) -> None:
        """Remember the run's shard (a run never changes shards)."""
        if self.shard_count == 1:
            return
        if len(self._located_runs) >= LOCATED_CACHE:
            self._located_runs.clear()
        self._located_runs[name + SEP + run_id] = shard

    def _forget(self, name: str, run_id: str) -> None:
        """Forget where the run was thought to be: an index entry whose submit never landed."""
        self._located_runs.pop(name + SEP + run_id, None)

    def _run_shard(self, name: str, run_id: str) -> int:
        """The shard to address the run in: where it is, else the one its id hashes to (where
        a script finds it missing and answers so)."""
        located = self._located(name, run_id)
        return located if located is not None else self._home(run_id)

    def _on_run(self, script: str, name: str, run_id: str, *args: Any) -> Any:
        """Script ``script`` for the run (``name``, ``run_id``, ``*args``) in its shard."""
        try:
            return self._script(script, name, run_id, *args, shard=self._run_shard(name, run_id))
        except RunNotFoundError:
            self._forget(name, run_id)
            raise

    def _run_key(self, kind: str, name: str, run_id: str) -> str:
        """The run's key of ``kind`` (``r``, ``e``, ``sig``, ...), in the run's shard."""
        return self._key(kind, name, run_id, shard=self._run_shard(name, run_id))

    def _shards(self) -> range:
        return range(self.shard_count)

    def _claim_order(self, name: str, prefer: Sequence[int]) -> list[int]:
        """The shards a claim of ``name`` tries, in order: ``prefer``'s (as given), then the
        others from a place that moves on with every claim, so none is always last. Shards
        with nothing queued are left out (asked in one round trip)."""
        if self.shard_count == 1:
            return [0]
        first = list(dict.fromkeys(s for s in prefer if 0 <= s < self.shard_count))
        start = next(self._claim_turn) % self.shard_count
        rest = [s for s in (*range(start, self.shard_count), *range(start)) if s not in first]
        order = first + rest
        queued = self._io(
            lambda: self._pipeline(*(("EXISTS", self._key("qb", name, shard=s)) for s in order)),
            "claim",
        )
        return [s for s, hit in zip(order, queued, strict=True) if int(hit)]

    def _server_now(self) -> float:
        if self._clock is not None:
            return float(self._clock())
        seconds, micros = self._cmd("TIME")
        return int(seconds) + int(micros) / 1_000_000

    def _fields(self, name: str, run_id: str) -> dict[str, str] | None:
        """The run's hash, or None when no shard holds the run."""
        shard = self._located(name, run_id)
        if shard is None:
            return None
        raw = self._cmd("HGETALL", self._key("r", name, run_id, shard=shard))
        if not raw:
            self._forget(name, run_id)
            return None
        return _decode_hash(raw)

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
