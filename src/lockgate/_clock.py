"""Time, injected: every component that reads the time or waits takes a :class:`Clock`."""

from __future__ import annotations

import heapq
import itertools
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    # Imported where a clock waits, always on a running loop: a process that only reads a
    # store (`lockgate runs list`) imports this module for `iso` and runs no event loop.
    import asyncio


@runtime_checkable
class Clock(Protocol):
    """A time source. Calling it returns epoch seconds; ``sleep`` waits on the same time line."""

    def __call__(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...


class SystemClock:
    """The wall clock, with ``asyncio.sleep`` for waiting."""

    def __call__(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        import asyncio

        await asyncio.sleep(max(0.0, seconds))


class ManualClock:
    """A clock that moves only when told to, for tests.

    ``sleep`` parks the caller until :meth:`advance` moves time past its deadline, so a test can
    make an hour pass in a microsecond and see every timer due in that hour fire in order.
    """

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._now = start
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._ids = itertools.count()

    def __call__(self) -> float:
        return self._now

    async def sleep(self, seconds: float) -> None:
        import asyncio

        if seconds <= 0:
            await asyncio.sleep(0)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self._now + seconds, next(self._ids), future))
        await future

    def advance(self, seconds: float) -> None:
        """Move time forward and wake every sleeper whose deadline has come."""
        if seconds < 0:
            raise ValueError("a clock only moves forward")
        self._now += seconds
        while self._sleepers and self._sleepers[0][0] <= self._now:
            _, _, future = heapq.heappop(self._sleepers)
            if not future.done():
                future.set_result(None)

    @property
    def sleepers(self) -> int:
        """How many callers are parked in ``sleep``."""
        return sum(1 for _, _, future in self._sleepers if not future.done())

    @property
    def next_wake(self) -> float | None:
        """The soonest deadline of a caller parked in ``sleep``, or None: where a test that
        plays time forward event by event advances to next."""
        return min((at for at, _, future in self._sleepers if not future.done()), default=None)


#: The last seconds of a :func:`sleep_precisely` on the system clock, slept on a thread: the
#: event loop wakes a timer up to a millisecond or two late (epoll waits in whole milliseconds,
#: and a busy loop adds its own delay), a thread's sleep a tenth of that.
PRECISE_TAIL = 0.005


#: A thread's sleep overshoots by a tenth of a millisecond or so: the last of a precise wait
#: yields the processor in a loop instead.
SPIN = 0.0002


def block_until(deadline: float, now: Callable[[], float]) -> None:
    """Block this thread until ``now()`` reaches ``deadline``, overshooting by microseconds."""
    rest = deadline - now()
    if rest > SPIN:
        time.sleep(rest - SPIN)
    while now() < deadline:
        time.sleep(0)  # lets other threads (the event loop) run meanwhile


async def sleep_precisely(clock: Clock, seconds: float) -> None:
    """``clock.sleep(seconds)``, ending within some microseconds of the deadline on the system
    clock: for a wait that costs something for every millisecond it overshoots (a claim
    waiting for a Rate token). Any other clock just sleeps."""
    import asyncio

    if not isinstance(clock, SystemClock) or seconds <= 0:
        await clock.sleep(seconds)
        return
    deadline = time.perf_counter() + seconds
    if seconds > PRECISE_TAIL:
        await asyncio.sleep(seconds - PRECISE_TAIL)
    if deadline > time.perf_counter():
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, block_until, deadline, time.perf_counter)


def as_clock(clock: Clock | None) -> Clock:
    """``clock``, or the system clock when None."""
    return clock if clock is not None else SystemClock()


def iso(ts: float) -> str:
    """Epoch seconds as an ISO-8601 UTC timestamp."""
    return datetime.fromtimestamp(ts, UTC).isoformat()
