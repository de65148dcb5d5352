"""``WorkerOptions.cancel_timeout``: a body that a cancel reached but that does not get to a
boundary (where the cancel is raised in it) within that many seconds is stopped from outside.

The attempt's heartbeat sees the latched cancel; from then the attempt has ``cancel_timeout``
seconds. If its body is still running then, its task is cancelled and the attempt ends the run
cancelled itself, fenced by its lease as any terminal. A body that blocks the event loop cannot
be cancelled this way (nothing runs to cancel it): that is the poison path, where its lease
lapses and the run is counted as a crash.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from lockgate._clock import Clock

log = logging.getLogger("lockgate.executor")


class Cancellable(Protocol):
    """What the timer needs of an attempt."""

    run_id: str
    clock: Clock
    cancel_timeout: float | None
    cancel_forced: bool
    task: asyncio.Task[object] | None


def arm_cancel_timeout(attempt: Cancellable) -> asyncio.Task[None] | None:
    """Start the timer of an attempt that just saw its cancel (None: no timeout set)."""
    if attempt.cancel_timeout is None or attempt.task is None:
        return None
    return asyncio.create_task(_force_after(attempt, attempt.cancel_timeout))


async def _force_after(attempt: Cancellable, seconds: float) -> None:
    await attempt.clock.sleep(seconds)
    task = attempt.task
    if task is None or task.done():
        return
    log.warning(
        "run %s: the body did not reach a boundary within %gs of its cancel; cancelling it",
        attempt.run_id,
        seconds,
    )
    attempt.cancel_forced = True
    task.cancel()
