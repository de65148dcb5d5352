"""The demo's display: a table redrawn in place on a terminal, plain lines anywhere else.

Live mode needs only ANSI escapes (cursor up, clear to end of screen), which every terminal
lockgate runs in understands; ``NO_COLOR`` turns colour off but keeps the live table.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Sequence
from typing import TextIO

_COLOURS = {
    "complete": "32",
    "error": "31",
    "terminated": "31",
    "cancelled": "33",
    "in_progress": "1;36",
    "sleeping": "34",
    "signal_waiting": "35",
    "paused": "35",
}
HEADERS = ("ORDER", "STATUS", "LAST EVENT", "RUN")


class Board:
    """Narrative lines above a table of runs.

    ``say`` prints a line of the story. ``show`` takes the table's current rows, each
    ``(order, status, last event, run id)``: live, it redraws the table in place; plain, it
    prints one line per row that changed since the last call."""

    def __init__(self, stream: TextIO, *, live: bool, headers: tuple[str, ...] = HEADERS) -> None:
        self.stream = stream
        self.headers = headers
        self.live = live
        self.colour = live and not os.environ.get("NO_COLOR")
        self.started = time.monotonic()
        self._drawn = 0
        self._rows: list[tuple[str, ...]] = []
        self._seen: dict[str, tuple[str, ...]] = {}
        self._closed = False
        if live:
            self._write("\x1b[?25l")

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()

    def elapsed(self) -> str:
        return f"{time.monotonic() - self.started:5.1f}s"

    def say(self, text: str) -> None:
        if not self.live:
            self._write(f"{self.elapsed()}  {text}\n")
            return
        self._write(self._erase() + f"{self.elapsed()}  {text}\n" + self._table())

    def show(self, rows: Sequence[tuple[str, ...]]) -> None:
        new_rows = [tuple(row) for row in rows]
        changed, self._rows = new_rows != self._rows, new_rows
        if self.live:
            if changed or not self._drawn:
                self._write(self._erase() + self._table())
            return
        for row in self._rows:
            if self._seen.get(row[0]) != row:
                self._seen[row[0]] = row
                self._write(f"{self.elapsed()}  {self._plain(row)}\n")

    def _plain(self, row: tuple[str, ...]) -> str:
        if self.headers == HEADERS:  # the runs' table: order, status, last event
            order, status, last, _ = row
            return f"{order:<6} {status:<15} {last}"
        return "  ".join(row).rstrip()

    def close(self) -> None:
        """Leave the last table on screen and give the cursor back. Idempotent."""
        if self.live and not self._closed:
            self._write(self._erase() + self._table() + "\x1b[?25h")
            self._drawn = 0
        self._closed = True

    def _erase(self) -> str:
        if not self._drawn:
            return ""
        drawn, self._drawn = self._drawn, 0
        return f"\x1b[{drawn}F\x1b[J"

    def _table(self) -> str:
        if not self._rows:
            return ""
        width = shutil.get_terminal_size((100, 24)).columns
        heads = self.headers
        widths = [max(len(r[i]) for r in [heads, *self._rows]) for i in range(len(heads))]
        header = "  ".join(h.ljust(w) for h, w in zip(heads, widths, strict=True))
        lines = ["", header[: width - 1]]
        for row in self._rows:
            cells = [cell.ljust(w) for cell, w in zip(row, widths, strict=True)]
            line = "  ".join(cells)[: width - 1]
            if self.colour and row[1] in _COLOURS:
                status = cells[1]
                line = line.replace(status, f"\x1b[{_COLOURS[row[1]]}m{status}\x1b[0m", 1)
            lines.append(line)
        self._drawn = len(lines)
        return "\n".join(lines) + "\n"
