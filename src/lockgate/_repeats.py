"""Repeated log lines said once, with a count: the log set-up of ``lockgate worker`` and
``lockgate serve``.

A worker meeting the same trouble again and again (a broker that refuses every connection, a
body that warns on every record) would write the same warning once per occurrence, burying the
lines around it. :class:`RepeatCollapser` passes the first line on at once, counts the identical
ones that follow within :data:`WINDOW` seconds, and writes the count as one line when the window
ends, when a different line comes (just before it), or when logging is flushed or closed, so a
count is never lost at shutdown.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

#: Seconds over which identical lines are counted instead of written; a series that goes on
#: longer gets one count line per window.
WINDOW = 10.0

#: The line format of ``lockgate worker`` and ``lockgate serve``.
LINE_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class RepeatCollapser(logging.Handler):
    """A handler passing records on to ``target``, with repeats collapsed.

    A WARNING or ERROR record with the same logger, level and message as the line written last
    is counted, not passed on, while the window that line opened lasts (``window`` seconds by
    ``clock``). The count goes to ``target`` as a copy of the last counted record whose message
    ends with ``(repeated N times in the last S s)``: at the window's end (a timer thread, when
    ``timer`` is true; else at the next record or :meth:`flush`), before a record that differs,
    and on :meth:`flush` and :meth:`close`. After a count the next window begins, so a line
    repeated without end is written once, then once a window as a count. Records below WARNING
    are never counted: each is passed on, after any pending count.
    """

    def __init__(
        self,
        target: logging.Handler,
        *,
        window: float = WINDOW,
        clock: Callable[[], float] = time.monotonic,
        timer: bool = True,
    ) -> None:
        super().__init__()
        self.target = target
        self.window = window
        self.clock = clock
        self.timer = timer
        self._last: tuple[str, int, str] | None = None
        self._counted: logging.LogRecord | None = None
        self._count = 0
        self._since = 0.0
        self._wake: threading.Timer | None = None

    def emit(self, record: logging.LogRecord) -> None:
        # Handler.handle holds self.lock here, as the timer thread does in _on_timer.
        try:
            key = (record.name, record.levelno, record.getMessage())
        except Exception:  # a call whose arguments do not fit its message: logging's report
            self.handleError(record)
            return
        now = self.clock()
        self._window_ended(now)
        if key == self._last:
            self._count += 1
            self._counted = record
            self._arm(now)
            return
        self._say_count(now)
        self._last = key if record.levelno >= logging.WARNING else None
        self._since = now
        self.target.handle(record)

    def flush(self) -> None:
        """Write any pending count now, then flush ``target``."""
        self.acquire()
        try:
            self._say_count(self.clock())
        finally:
            self.release()
        self.target.flush()

    def close(self) -> None:
        self.acquire()
        try:
            if self._wake is not None:
                self._wake.cancel()
                self._wake = None
            self._say_count(self.clock())
            self._last = None
        finally:
            self.release()
        super().close()

    def _window_ended(self, now: float) -> None:
        if self._last is None or now - self._since < self.window:
            return
        if self._count:
            self._say_count(now)
        else:  # a window with no repeat: the series is over, the next one is written
            self._last = None

    def _say_count(self, now: float) -> None:
        """Pass the pending count on as one line, and begin the next window."""
        record, count = self._counted, self._count
        if record is None or not count:
            return
        span = now - self._since
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
        self._counted, self._count, self._since = None, 0, now

    def _arm(self, now: float) -> None:
        if not self.timer or self._wake is not None:
            return
        self._wake = threading.Timer(max(self._since + self.window - now, 0.0), self._on_timer)
        self._wake.daemon = True
        self._wake.start()

    def _on_timer(self) -> None:
        self.acquire()
        try:
            self._wake = None
            self._window_ended(self.clock())
            if self._count:  # not due yet by ``clock``: look again when it may be
                self._arm(self.clock())
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
