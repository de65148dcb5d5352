"""What a worker tells its operator: whether its store answers, told once per change.

Every part of a worker (its loops, its attempts, its start-up) reports how its store calls end
to one :class:`StoreState`, so an outage is told twice, when it begins and when it ends, however
many calls fail in between. These lines, and the worker's other changes of state (serving,
draining, stopped), go to the ``lockgate.worker.status`` logger, which ``lockgate worker``
prints whatever its ``--log-level``.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterator

from lockgate._clock import Clock
from lockgate._errors import one_line

#: The logger of a worker's changes of state: a handful of lines in a worker's life.
status_log = logging.getLogger("lockgate.worker.status")

#: Jitter of a retry delay, as a fraction either way, so that workers started together do not
#: retry in lockstep.
JITTER = 0.2


def backoff(first: float, most: float) -> Iterator[float]:
    """Endless retry delays in seconds: doubling from ``first`` up to ``most``, each jittered
    by +-20%."""
    delay = first
    while True:
        yield delay * random.uniform(1 - JITTER, 1 + JITTER)
        delay = min(delay * 2, most)


def describe_store(store: object) -> str:
    """How messages name ``store``: its ``repr`` when it has one of its own (a Valkey store's
    names the server, with any password as ``***``, and the namespace), else its class and
    file, else its class."""
    cls = type(store)
    if cls.__repr__ is not object.__repr__:
        return repr(store)
    path = getattr(store, "path", None)
    return f"{cls.__name__}({str(path)!r})" if path is not None else cls.__name__


def runs(count: int) -> str:
    """``"1 run"``, ``"3 runs"``."""
    return f"{count} run" if count == 1 else f"{count} runs"


class StoreState:
    """Whether the store answers, as the latest store calls of one worker found it.

    :meth:`failed` with the first failure of an outage logs one warning; :meth:`answered` with
    the first call that gets through afterwards logs one info line. A failure of a call asked
    before the latest success is stale (it was retrying through an outage that has ended) and
    changes nothing, so the end of an outage is not told twice.

    Calls are told apart by ``method`` (the store method's name). An outage ends only when a
    call of a method that failed during it gets through (or, when only calls that report no
    success failed, such as an attempt's own writes, any call): a store that still answers
    reads but refuses every write (an SQLite file made read-only, a full disk, the write lock
    held past the busy timeout) is one outage until writes get through again, told once, not
    once per read that answers in between.
    """

    #: What a failure of an attempt's own store calls is reported as; they report no success.
    ATTEMPT = "attempt"

    def __init__(self, name: str, clock: Clock) -> None:
        self.name = name
        self._clock = clock
        #: None until a call has ended either way.
        self.reachable: bool | None = None
        #: The latest failure's message while the store is unreachable, else None.
        self.error: str | None = None
        self._down_since = 0.0
        #: When the call that ended the latest outage (or the first to get through) was asked.
        self._answered_at = float("-inf")
        #: When the latest call of each method that got through was asked.
        self._method_answered_at: dict[str, float] = {}
        #: The methods whose calls failed in the outage under way.
        self._failing: set[str] = set()

    def failed(self, error: BaseException, asked_at: float, method: str = "call") -> None:
        """A call of ``method`` asked at ``asked_at`` (on the worker's clock) found the store
        unavailable."""
        if asked_at < max(self._answered_at, self._method_answered_at.get(method, float("-inf"))):
            return
        self.error = one_line(error)
        self._failing.add(method)
        if self.reachable is not False:
            self.reachable = False
            self._down_since = self._clock()
            status_log.warning(
                "store %s is unreachable: %s; the worker waits for it", self.name, self.error
            )

    def answered(self, asked_at: float, method: str = "call") -> None:
        """A call of ``method`` asked at ``asked_at`` got through."""
        known = self._method_answered_at.get(method, float("-inf"))
        self._method_answered_at[method] = max(known, asked_at)
        if self.reachable is False:
            if method not in self._failing and self._failing - {self.ATTEMPT}:
                return  # other calls still fail: the outage goes on
            status_log.info(
                "store %s answers again, after %.1fs", self.name, self._clock() - self._down_since
            )
        self._answered_at = max(self._answered_at, asked_at)
        self._failing.clear()
        self.reachable = True
        self.error = None
