"""Valkey operations written once, run from a thread or natively on an event loop.

An operation the worker calls on its hot path (a claim, a fenced append, a terminal, a
heartbeat, ...) is a generator of the requests it sends (:class:`Script`, :class:`Commands`):
it yields one, is sent the server's answer (or has the store's error thrown in), and returns its
result. ``ValkeyCore._run`` drives such an operation with the blocking client, for the store's
synchronous methods; ``ValkeyCore._arun`` drives the same generator with an asyncio client on
the running loop, so the worker's attempts wait on Valkey without a thread each (a thread hop per
call cost more than the call itself).

Asyncio clients belong to one event loop. :class:`LoopClients` keeps one per loop and closes it
when the loop shuts down (``asyncio.run`` closes a loop's async generators first; a small one
per client is the hook), or when the store is closed on that loop.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import AsyncGenerator, Callable, Generator
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Script:
    """Run the store's Lua script ``name`` with ``args`` on ``shard``'s keys (None: the
    namespace-wide ones); answered with the script's reply."""

    name: str
    args: tuple[Any, ...]
    shard: int | None = None


@dataclass(frozen=True, slots=True)
class Commands:
    """Send ``commands`` together (one round trip, no atomicity); answered with the list of
    their replies, in order."""

    commands: tuple[tuple[Any, ...], ...]
    what: str


Request = Script | Commands
#: An operation: yields requests, is sent their answers, returns its result.
Op = Generator[Request, Any, T]


def command(*args: Any) -> Commands:
    """One command, as a request (answered with a one-item list)."""
    return Commands((args,), str(args[0]))


class LoopClients:
    """One asyncio client per event loop, made by ``make`` on first use in that loop."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self._make = make
        self._lock = threading.Lock()
        # Each loop's client, and the async generator that closes it when the loop shuts down
        # (held here: the loop itself only keeps a weak reference to it).
        self._clients: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, tuple[Any, AsyncGenerator[None, None]]
        ] = weakref.WeakKeyDictionary()

    async def client(self) -> Any:
        loop = asyncio.get_running_loop()
        held = self._clients.get(loop)
        if held is not None:
            return held[0]
        client = self._make()
        closer = _close_at_shutdown(client)
        with self._lock:
            self._clients[loop] = (client, closer)
        await closer.__anext__()  # started: the loop now closes it at shutdown_asyncgens
        return client

    def close(self) -> None:
        """Close the clients of loops still running: on this thread's loop, as a task; on
        another thread's, through that loop. Those of loops that stopped were closed when
        their loops shut down."""
        with self._lock:
            held = list(self._clients.items())
            self._clients.clear()
        try:
            current: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            current = None
        for loop, (client, _) in held:
            if loop.is_closed():
                continue
            if loop is current:
                loop.create_task(client.aclose())
            elif loop.is_running():
                asyncio.run_coroutine_threadsafe(client.aclose(), loop)


async def _close_at_shutdown(client: Any) -> AsyncGenerator[None, None]:
    try:
        yield
    finally:
        await client.aclose()
