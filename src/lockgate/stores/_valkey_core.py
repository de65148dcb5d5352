"""The Valkey store's plumbing: the connection, the Lua scripts (loaded once, called by SHA,
reloaded on ``NOSCRIPT``), retries with backoff, the key prefix, and a run's hash read back.

Every key of a namespace carries one hash tag, ``lg:{<namespace>}:...``, so every script
touches one slot and the store works unchanged on a Valkey cluster.
"""

from __future__ import annotations

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
        self.prefix = f"lg:{{{chosen}}}:"
        self._anchor = self.prefix + "anchor"
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

    def _script(self, name: str, *args: Any) -> Any:
        """Run script ``name`` with the operation's ``args``: one atomic step."""
        argv = [
            self.prefix,
            self._now_arg(),
            repr(float(self.lock_ttl)),
            str(self.max_retries),
            str(self.max_store_requeues),
            repr(float(self.held_ttl)),
            *("" if a is None else a for a in args),
        ]

        def call() -> Any:
            try:
                return self._redis.evalsha(self._sha(name), 1, self._anchor, *argv)
            except NoScriptError:
                self._shas.pop(name, None)  # the server restarted or flushed its scripts
                return self._redis.evalsha(self._sha(name), 1, self._anchor, *argv)

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

    def _key(self, *parts: str) -> str:
        return self.prefix + ":".join(parts)

    def _server_now(self) -> float:
        if self._clock is not None:
            return float(self._clock())
        seconds, micros = self._cmd("TIME")
        return int(seconds) + int(micros) / 1_000_000

    def _fields(self, name: str, run_id: str) -> dict[str, str] | None:
        raw = self._cmd("HGETALL", self._key("r", name, run_id))
        if not raw:
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
