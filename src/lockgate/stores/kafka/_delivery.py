"""The delivery reports of one journal append, and the event loops that await them.

librdkafka reports each record on the producer's reports thread (``_producer``). An append
from a thread waits on its :class:`Delivery` there; an append on an event loop awaits
``Delivery.settled``, which the loop's :class:`Inbox` resolves. The inbox is what keeps the
hot path cheap with many appends in flight:

- finished deliveries are handed to the loop in batches: the reports thread wakes the loop
  once for all the deliveries that finished before the loop got to them, not once each;
- one timer per loop, not one per append, expires deliveries whose reports never came by
  their deadline (librdkafka reports every record by ``delivery.timeout.ms``; the deadline is
  for a producer that stopped serving its reports).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import weakref
from collections.abc import Callable
from typing import Any

#: Seconds between two looks at a loop's deliveries for ones past their deadline.
SWEEP_EVERY = 1.0
#: Reports may be served on two threads at once (a flush beside the reports thread).
_counting = threading.Lock()


class Delivery:
    """The reports of ``count`` records: a thread waits with :meth:`wait`; on a loop,
    ``settled`` (made by the loop's inbox) resolves once every record is reported."""

    __slots__ = ("_done", "_inbox", "deadline", "errors", "expired", "left", "offsets", "settled")

    def __init__(self, count: int, inbox: Inbox | None = None) -> None:
        self.left = count
        self.offsets: list[int] = []
        self.errors: list[Any] = []
        self._inbox = inbox
        self._done = threading.Event() if inbox is None else None
        self.settled: asyncio.Future[None] | None = None
        #: On a loop: when (``loop.time()``) the inbox gives up on the reports, and what makes
        #: the error it then sets on ``settled`` (given the delivery: a closure over it would
        #: make each delivery a reference cycle, left for the garbage collector).
        self.deadline = 0.0
        self.expired: Callable[[Delivery], BaseException] | None = None

    def report(self, err: Any, msg: Any) -> None:
        """librdkafka's report of one record (``on_delivery``)."""
        with _counting:
            if err is not None:
                self.errors.append(err)
            else:
                self.offsets.append(msg.offset() or 0)
            self.left -= 1
            last = self.left == 0
        if last:
            self._finish()

    def wait(self, timeout: float) -> bool:
        """From a thread: whether every record was reported within ``timeout`` seconds."""
        assert self._done is not None, "a delivery made for a loop is awaited (settled)"
        return self._done.wait(timeout)

    def _finish(self) -> None:
        if self._inbox is not None:
            self._inbox.finished(self)
        elif self._done is not None:
            self._done.set()


class Inbox:
    """One event loop's deliveries in flight (see the module docstring). Made by
    :func:`inbox_of`; its methods other than :meth:`finished` are called on the loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = weakref.ref(loop)  # an inbox must not keep its loop alive
        self._lock = threading.Lock()
        self._done: list[Delivery] = []
        self._woken = False
        self._pending: set[Delivery] = set()
        self._sweep: asyncio.TimerHandle | None = None

    def delivery(
        self, count: int, timeout: float, expired: Callable[[Delivery], BaseException]
    ) -> Delivery:
        """A delivery of ``count`` records, to be reported within ``timeout`` seconds, else
        ``settled`` fails with ``expired(delivery)``."""
        loop = asyncio.get_running_loop()
        delivery = Delivery(count, self)
        delivery.settled = loop.create_future()
        delivery.deadline = loop.time() + timeout
        delivery.expired = expired
        self._pending.add(delivery)
        if self._sweep is None:
            self._sweep = loop.call_later(SWEEP_EVERY, self._expire_overdue)
        if count == 0:
            self.finished(delivery)
        return delivery

    def finished(self, delivery: Delivery) -> None:
        """From any thread: every record of ``delivery`` was reported."""
        with self._lock:
            self._done.append(delivery)
            if self._woken:
                return  # the loop has yet to take the ones before: it takes this one too
            self._woken = True
        loop = self._loop()
        if loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody awaits these
                loop.call_soon_threadsafe(self._settle)

    def _settle(self) -> None:
        with self._lock:
            done, self._done = self._done, []
            self._woken = False
        for delivery in done:
            self._pending.discard(delivery)
            if delivery.settled is not None and not delivery.settled.done():
                delivery.settled.set_result(None)

    def _expire_overdue(self) -> None:
        self._sweep = None
        loop = self._loop()
        if loop is None:
            return
        now = loop.time()
        for delivery in [d for d in self._pending if d.deadline <= now]:
            self._pending.discard(delivery)
            settled = delivery.settled
            if settled is not None and not settled.done() and delivery.expired is not None:
                settled.set_exception(delivery.expired(delivery))
        if self._pending:
            self._sweep = loop.call_later(SWEEP_EVERY, self._expire_overdue)


_inboxes: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Inbox] = weakref.WeakKeyDictionary()
_inboxes_lock = threading.Lock()


def inbox_of(loop: asyncio.AbstractEventLoop) -> Inbox:
    """``loop``'s inbox, shared by every store appending on it."""
    inbox = _inboxes.get(loop)
    if inbox is None:
        with _inboxes_lock:
            inbox = _inboxes.get(loop)
            if inbox is None:
                inbox = _inboxes[loop] = Inbox(loop)
    return inbox
