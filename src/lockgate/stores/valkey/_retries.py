"""What a failed call to Valkey becomes: tried again with backoff while the server (on a
cluster: the node owning the slot) is unreachable or the cluster is down, then
:class:`StoreUnavailable`; a script's own refusal its lockgate error; a server's other refusal
:class:`StoreUnavailable`. Messages show the URL's password as ``***``."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from lockgate._errors import ConfigurationError, StoreUnavailable
from lockgate.stores.valkey._replies import script_error

try:
    import redis
    from redis.exceptions import (
        ClusterDownError,
        MovedError,
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
except ImportError:  # pragma: no cover - the extra is missing
    redis = None  # type: ignore[assignment]

log = logging.getLogger("lockgate.valkey")

#: Failures that may pass (a server or cluster node away, a failover under way): retried.
UNREACHABLE: tuple[type[BaseException], ...] = (
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


class ValkeyRetries:
    """Calls retried and their failures translated, for the store's connection."""

    #: The URL with any password shown as ``***``.
    url: str
    #: Whether the store talks to a Valkey cluster (keys routed to their slot's node).
    cluster: bool
    retry_attempts: int
    retry_base: float
    _secrets: list[str]

    def _scrub(self, error: object) -> str:
        """``error``'s text with the URL's password (if it shows up at all) as ``***``."""
        text = str(error)
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

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
        if isinstance(exc, UNREACHABLE):
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
                raise script_error(message) from None
            if isinstance(exc, MovedError) and not self.cluster:
                raise ConfigurationError(
                    f"Valkey at {self.url} is a cluster node and another node owns the "
                    f"keys of {what} ({self._scrub(message)}): leave cluster=None (or pass "
                    f"cluster=True) so the store routes every key to its node"
                ) from None
            raise StoreUnavailable(f"Valkey refused {what}: {self._scrub(message)}") from exc
        raise exc
