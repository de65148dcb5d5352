"""Dropping the outboxes of ended runs for a :class:`CompositeStore`, many to a request.

Once a run's terminal is in the event log, its outbox in the lifecycle store goes. Every run a
worker finishes drops one, so on the event loop the drops asked for during one pass of the loop
go to the lifecycle together (``drop_outboxes``, one command on Valkey), each asker answered
when it is done: one request for a batch of finishing runs instead of one each.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol, runtime_checkable

from lockgate.stores._calls import call_owned

#: Drops waiting for the loop's next pass: (workflow, run id, the future its asker awaits).
_Queued = list[tuple[str, str, asyncio.Future[None]]]


@runtime_checkable
class DropsMany(Protocol):
    """A lifecycle store that drops many runs' outboxes in one request."""

    def drop_outboxes(self, runs: Sequence[tuple[str, str]]) -> None: ...


class OutboxDrops:
    """``drop``: forget a run's outbox, called as the composite calls its backends (a
    ``Call``): from a thread, with the lifecycle's ``drop_outbox``; on an event loop, batched
    as the module docstring says, when the lifecycle has ``drop_outboxes``."""

    blocking_io = True

    def __init__(self, outbox: Any) -> None:
        self._one: Callable[[str, str], None] = outbox.drop_outbox
        self._many = outbox.drop_outboxes if isinstance(outbox, DropsMany) else None
        self._queued: dict[asyncio.AbstractEventLoop, _Queued] = {}
        # The requests in flight (held here: the loop keeps only weak references to tasks).
        self._sending: set[asyncio.Task[None]] = set()

    def drop(self, name: str, run_id: str) -> None:
        self._one(name, run_id)

    def coroutine_for(self, method: Callable[..., Any]) -> Callable[..., Awaitable[Any]] | None:
        if self._many is None or getattr(method, "__self__", None) is not self:
            return None
        return self._drop_soon if getattr(method, "__name__", "") == "drop" else None

    async def _drop_soon(self, name: str, run_id: str) -> None:
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[None] = loop.create_future()
        queued = self._queued.get(loop)
        if queued is None:
            queued = self._queued[loop] = []
            loop.call_soon(self._send, loop)
        queued.append((name, run_id, answer))
        await answer

    def _send(self, loop: asyncio.AbstractEventLoop) -> None:
        queued = self._queued.pop(loop, [])
        task = loop.create_task(self._send_now(queued))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _send_now(self, queued: _Queued) -> None:
        asked = [(name, run_id) for name, run_id, answer in queued if not answer.done()]
        try:
            if asked and self._many is not None:
                await call_owned(self._many, asked)
        except Exception as exc:
            for *_, answer in queued:
                if not answer.done():
                    answer.set_exception(exc)
            return
        except BaseException:  # cancelled (the loop is shutting down): so are the askers
            for *_, answer in queued:
                answer.cancel()
            raise
        for *_, answer in queued:
            if not answer.done():
                answer.set_result(None)
