"""Fault points: let a test kill the engine's own process at one boundary of an attempt.

Read from ``LOCKGATE_FAILPOINTS`` (set only by tests), e.g.
``LOCKGATE_FAILPOINTS=after_step_effect:crash``: the first time an attempt reaches that point,
the process sends itself SIGKILL, exactly as an out-of-memory kill or a power cut would end it:
no ``finally``, no flush, no lease release. ``name:crash@N`` crashes on the N-th hit instead.
"""

from __future__ import annotations

import os
import signal

from lockgate._errors import ConfigurationError

ENV = "LOCKGATE_FAILPOINTS"

#: The boundaries of an attempt a test can crash at, in the order an attempt meets them.
POINTS = (
    "before_step_effect",  # step:pending journaled, the step's effect not yet run
    "after_step_effect",  # the effect ran; its step:done not yet appended
    "after_step_append",  # step:done appended
    "after_terminal_append",  # the terminal appended (the store dropped the lock with it)
)

_armed: dict[str, list[int]] | None = None


def _parse(spec: str) -> dict[str, list[int]]:
    armed: dict[str, list[int]] = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        point, _, action = item.partition(":")
        nth = 1
        if "@" in action:
            action, _, count = action.partition("@")
            nth = int(count) if count.isdigit() and int(count) > 0 else 0
        if point not in POINTS or action != "crash" or nth < 1:
            raise ConfigurationError(
                f"{ENV}: {item!r} is not POINT:crash[@N] with POINT one of {', '.join(POINTS)}"
            )
        armed[point] = [nth, 0]
    return armed


def check() -> None:
    """Parse ``LOCKGATE_FAILPOINTS`` now, so a mistake in it fails a worker at start rather
    than inside a step."""
    global _armed
    if _armed is None:
        _armed = _parse(os.environ.get(ENV, ""))


def hit(point: str) -> None:
    """Mark that an attempt reached ``point``; die here if a test armed it."""
    global _armed
    if _armed is None:
        _armed = _parse(os.environ.get(ENV, ""))
    if not _armed:
        return
    state = _armed.get(point)
    if state is None:
        return
    state[1] += 1
    if state[1] == state[0]:
        os.kill(os.getpid(), signal.SIGKILL)
