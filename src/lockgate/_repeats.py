"""Repeated log lines said once, with a count: the log set-up of ``lockgate worker`` and
``lockgate serve``.

A worker meeting the same trouble again and again (a broker that refuses every connection, a
body that warns on every record) would write the same warning once per occurrence, burying the
lines around it. :class:`RepeatCollapser` passes the first line on at once, counts the identical
ones that follow within :data:`WINDOW` seconds, and writes the count as one line when the window
ends, or when logging is flushed or closed, so a count is never lost at shutdown. Each distinct
line (logger, level, message) is counted on its own, so lines in between, an INFO line or a
second warning alternating with the first, do not end a series.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

#: Seconds over which identical lines are counted instead of written; a series that goes on
#: longer gets one count line per window.
WINDOW = 10.0

#: The distinct lines counted at once, at most. A new one beyond them ends the series whose
#: window began first (its count written now), so a flood of distinct lines cannot grow the
#: map: at worst they are written as they come, as without the collapser.
SERIES = 64

#: The line format of ``lockgate worker`` and ``lockgate serve``.
LINE_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

_Key = tuple[str, int, str]


@dataclass
class _Series:
    """One distinct line being counted: when its window began, and the repeats since."""

    since: float
    count: int = 0
    counted: logging.LogRecord | None = None  # the last repeat, the model of the count line


class RepeatCollapser(logging.Handler):
    """A handler passing records on to ``target``, with repeats collapsed.

    A WARNING or ERROR record opens a series for its logger, level and message (the key) and is
    passed on at once. A record with the key of an open series is counted, not passed on, while
    the window the series is in lasts (``window`` seconds by ``clock``); other records, of any
    level, in between change nothing. The count goes to ``target`` as a copy of the last counted
    record whose message ends with ``(repeated N times in the last S s)``: at the window's end
    (a timer thread, when ``timer`` is true; else at the next record or :meth:`flush`), and on
    :meth:`flush` and :meth:`close`. After a count the series' next window begins, so a line
    repeated without end is written once, then once a window as a count; a window with no
    repeat ends the series, and the next such line is written at once. At most ``series`` keys
    are counted at a time (:data:`SERIES`). Records below WARNING are never counted.
    """

    def __init__(
        self,
        target: logging.Handler,
        *,
        window: float = WINDOW,
        clock: Callable[[], float] = time.monotonic,
        timer: bool = True,
        series: int = SERIES,
    ) -> None:
        super().__init__()
        self.target = target
        self.window = window
        self.clock = clock
        self.timer = timer
        self.most = max(series, 1)
        # In the order their current windows began (a series whose window restarts moves to the
        # end), so the windows that end first are at the front.
        self._series: dict[_Key, _Series] = {}
        self._wake: threading.Timer | None = None
        self._wake_at = 0.0

    def emit(self, record: logging.LogRecord) -> None:
        # Handler.handle holds self.lock here, as the timer thread does in _on_timer.
        try:
            key = (record.name, record.levelno, record.getMessage())
        except Exception:  # a call whose arguments do not fit its message: logging's report
            self.handleError(record)
            return
        now = self.clock()
        self._windows_ended(now)
        if record.levelno < logging.WARNING:
            self.target.handle(record)
            return
        series = self._series.get(key)
        if series is not None:
            series.count += 1
            series.counted = record
            self._arm(now, series.since + self.window)
            return
        while len(self._series) >= self.most:
            oldest = next(iter(self._series))
            self._say_count(self._series.pop(oldest), now)
        self._series[key] = _Series(since=now)
        self.target.handle(record)

    def flush(self) -> None:
        """Write every pending count now, then flush ``target``."""
        self.acquire()
        try:
            self._say_counts(self.clock())
        finally:
            self.release()
        self.target.flush()

    def close(self) -> None:
        self.acquire()
        try:
            if self._wake is not None:
                self._wake.cancel()
                self._wake = None
            self._say_counts(self.clock())
            self._series.clear()
        finally:
            self.release()
        super().close()

    def _windows_ended(self, now: float) -> None:
        """End the windows that are over: a count for each series with one pending, which then
        begins its next window; the series that had no repeat are over."""
        ended = []
        for key, series in self._series.items():
            if now - series.since < self.window:
                break  # the rest began later
            ended.append(key)
        for key in ended:
            series = self._series.pop(key)
            if series.count:
                self._say_count(series, now)
                self._series[key] = series  # its next window, at the end of the order

    def _say_counts(self, now: float) -> None:
        """Every pending count, in the order the windows began; each series goes on counting."""
        pending = [key for key, series in self._series.items() if series.count]
        for key in pending:
            series = self._series.pop(key)
            self._say_count(series, now)
            self._series[key] = series

    def _say_count(self, series: _Series, now: float) -> None:
        """Pass the series' pending count on as one line, and begin its next window."""
        record, count = series.counted, series.count
        if record is None or not count:
            return
        span = now - series.since
        text = f"{span:.1f}" if span < 10 else f"{span:.0f}"
        times = "time" if count == 1 else "times"
        self.target.handle(
            logging.LogRecord(
                record.name,
                record.levelno,
                record.pathname,
                record.lineno,
                f"{record.getMessage()} (repeated {count} {times} in the last {text} s)",
                None,
                None,
                record.funcName,
            )
        )
        series.counted, series.count, series.since = None, 0, now

    def _arm(self, now: float, due: float) -> None:
        """Have the timer look at ``due`` (a window's end with a count pending), unless it is
        to look sooner already."""
        if not self.timer:
            return
        if self._wake is not None:
            if self._wake_at <= due:
                return
            self._wake.cancel()
        self._wake_at = due
        self._wake = threading.Timer(max(due - now, 0.0), self._on_timer)
        self._wake.daemon = True
        self._wake.start()

    def _on_timer(self) -> None:
        self.acquire()
        try:
            if self._wake is threading.current_thread():  # not one cancelled as it started
                self._wake = None
            now = self.clock()
            self._windows_ended(now)
            due = [s.since + self.window for s in self._series.values() if s.count]
            if due:  # another window with a count pending (or this one, not due by ``clock``)
                self._arm(now, min(due))
        finally:
            self.release()


def log_to_stderr(level: str) -> RepeatCollapser | None:
    """Send the root logger's records at ``level`` and above to stderr in :data:`LINE_FORMAT`,
    repeats collapsed; the collapser, for the caller to flush when it ends. Nothing is changed,
    and None returned, when the root logger already has handlers (a program's own set-up, a
    test runner's), as :func:`logging.basicConfig` would leave them."""
    root = logging.getLogger()
    if root.handlers:
        return None
    stream = logging.StreamHandler()
    stream.setFormatter(logging.Formatter(LINE_FORMAT))
    collapser = RepeatCollapser(stream)
    root.addHandler(collapser)
    root.setLevel(level.upper())
    return collapser
