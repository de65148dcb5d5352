"""The timer and trigger loops: each sleeps until the soonest deadline its store reports, ends
what is due then (sleeps wake, signal waits time out, Collect windows and Debounce quiet
periods fire), and asks again.

A loop rests at most ``WorkerOptions.timer_poll_interval_s`` between two questions, so a
deadline another process set is seen that soon; one this process sets (an attempt of a worker
here parks, a client here sends a trigger event) posts a notice (``stores/_notices.py``) that
wakes the loop at once. A store without the ``wait_due`` or ``trigger_due`` group cannot say
when its next deadline is: the loop then polls every ``timer_poll_interval_s``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from lockgate._errors import StoreUnavailable
from lockgate.stores import _notices as notices
from lockgate.stores._gates import sooner
from lockgate.worker._loops import (
    end_due_waits,
    every,
    fire_due_timers,
    fire_due_triggers,
    fire_triggers_due,
)
from lockgate.worker._runtime import Runtime

log = logging.getLogger("lockgate.worker")

#: One round of a loop: end what is due now, and say when the next deadline after it is.
Round = Callable[[Runtime], Awaitable[float | None]]


async def timer_loop(rt: Runtime) -> None:
    """End every due wait in the store when it comes due, until the worker stops."""
    if "wait_due" not in rt.store.capabilities():
        await every(rt, fire_due_timers, rt.options.timer_poll_interval_s)
        return
    await on_time(rt, notices.WAITS, timers_round)


async def trigger_loop(rt: Runtime) -> None:
    """Fire the due buffers of this worker's triggered workflows when they come due, until
    the worker stops."""
    if "trigger_due" not in rt.store.capabilities():
        await every(rt, fire_due_triggers, rt.options.timer_poll_interval_s)
        return
    await on_time(rt, notices.TRIGGERS, triggers_round)


async def timers_round(rt: Runtime) -> float | None:
    """End every wait due now; the next wait's due time after now, or None."""
    now = rt.clock()
    while await end_due_waits(rt, now):
        now = rt.clock()
    due: float | None = await rt.io(rt.store.next_wait_due, now)
    return due


async def triggers_round(rt: Runtime) -> float | None:
    """Fire every due buffer of the served triggered workflows; the soonest time after now
    that one of their buffers falls due, or None."""
    now = rt.clock()
    while await fire_triggers_due(rt, now):
        now = rt.clock()
    due: float | None = None
    for name, spec in rt.specs.items():
        if spec.trigger is not None:
            due = sooner(due, await rt.io(rt.store.next_trigger_due, name, now))
    return due


async def on_time(rt: Runtime, topic: str, run_round: Round) -> None:
    """Run ``run_round`` now, then again at the deadline it answers, at the latest after
    ``timer_poll_interval_s``, or as soon as a notice of ``topic`` comes; until the worker
    stops. A store that is briefly unavailable is logged and asked again a poll later."""
    wakeup = rt.wakeup(topic)
    stop_listening = notices.listen(rt.store, topic, wakeup.set)
    recheck = rt.options.timer_poll_interval_s
    try:
        while not rt.stop.is_set:
            try:
                due = await run_round(rt)
            except StoreUnavailable as exc:
                # Debug: the worker's store state tells an outage once, not per round.
                log.debug("%s failed: %s", run_round.__name__, exc)
                due = None
            wait = recheck if due is None else min(recheck, max(0.0, due - rt.clock()))
            if await rt.rest(wait, wakeup):
                return
    finally:
        stop_listening()
