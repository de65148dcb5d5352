"""How every system's figure is timed, the same way for all of them.

While a system works, the bench asks it how much work it has completed (runs or events,
counted in its own store or output) every POLL seconds, only to know when it is done. The
figure itself comes from the completion times each system records of each unit of work (a
run's or invocation's end, a workflow's last update, a window's emission): the work completed
after the first completion, over the time from the first completion to the last. So the start
of a worker, its group join and its first fetch are no part of any figure, and neither is the
asking.

Standard library only: the peers' own scripts (run in their own venvs) import it too.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

#: Seconds between two asks.
POLL = 0.05


class NotCompleted(RuntimeError):
    """The work did not complete: the worker died, or the time ran out."""


def wait_completion(
    completed: Callable[[], int],
    total: int,
    alive: Callable[[], bool],
    timeout: float = 900.0,
) -> float:
    """Asks ``completed()`` until it reaches ``total``; raises :class:`NotCompleted` when
    ``alive()`` says the worker is gone or ``timeout`` seconds pass first. Returns the rate
    the asking saw, a cross-check of the figure: the units completed after the first answer
    that was not zero, over the time from that answer to the last."""
    deadline = time.monotonic() + timeout
    while (first := completed()) == 0:
        _check(alive, deadline, 0, total)
        time.sleep(POLL)
    started, done = time.perf_counter(), first
    while done < total:
        _check(alive, deadline, done, total)
        time.sleep(POLL)
        done = completed()
    took = time.perf_counter() - started
    return (done - first) / took if took > 0 else 0.0


def span_rate(times: Iterable[float], per: float = 1.0) -> float:
    """Units per second between the first and the last of ``times`` (one a completion, each
    of ``per`` units), the first completion's own units not counted."""
    ordered = sorted(times)
    if len(ordered) < 2 or ordered[-1] <= ordered[0]:
        return 0.0
    return (len(ordered) - 1) * per / (ordered[-1] - ordered[0])


def _check(alive: Callable[[], bool], deadline: float, done: int, total: int) -> None:
    if not alive():
        raise NotCompleted(f"the worker stopped with {done} of {total} completed")
    if time.monotonic() > deadline:
        raise NotCompleted(f"only {done} of {total} completed in time")


def exactly_once(seen: Iterable[int], total: int, unit: str, output: str) -> tuple[str, bool]:
    """The check line for the ids ``seen`` in completed outputs (a repeat is an id seen
    twice) against ``range(total)``, and whether each was seen exactly once."""
    counts: dict[int, int] = {}
    for n in seen:
        counts[n] = counts.get(n, 0) + 1
    once = sum(1 for n in range(total) if counts.get(n) == 1)
    missing = sum(1 for n in range(total) if n not in counts)
    twice = sum(1 for c in counts.values() if c > 1)
    strays = sum(1 for n in counts if not 0 <= n < total)
    line = f"{once}/{total} {unit} in exactly one {output}"
    if missing or twice or strays:
        line += f" ({missing} in none, {twice} in more than one, {strays} unknown)"
    return line, once == total and not (missing or twice or strays)
