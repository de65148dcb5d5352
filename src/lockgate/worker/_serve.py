"""Starting a worker on a store that may not answer yet: how ``lockgate worker`` starts.

:func:`serve` opens the store, trying again with backoff while it is unavailable (a Valkey
store connects as it is built), with the health endpoint listening meanwhile: ``/livez``
answers, ``/readyz`` says ``starting``. Once the store is open it runs a
:class:`WorkflowWorker` on it, which takes the endpoint over, until the worker is stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from lockgate._clock import Clock, as_clock
from lockgate._errors import StoreUnavailable
from lockgate.stores._base import Store
from lockgate.worker._health import HealthServer
from lockgate.worker._options import WorkerOptions
from lockgate.worker._runtime import StopSignal
from lockgate.worker._status import StoreState, backoff, status_log
from lockgate.worker._worker import (
    WorkflowWorker,
    handle_stop_signals,
    served_specs,
    unhandle_signals,
    worker_id_or_default,
)

T = TypeVar("T")

#: Seconds between tries to open the store while it is unavailable: doubling from the first
#: to the most, jittered.
OPEN_RETRY_FIRST = 0.5
OPEN_RETRY_MOST = 5.0


async def serve(
    open_store: Callable[[], Store],
    *,
    store_name: str,
    workflows: Iterable[Callable[..., Any]],
    options: WorkerOptions,
    clock: Clock | None = None,
) -> None:
    """Open the store ``open_store`` builds (``store_name`` names it in messages until then),
    waiting for it while it raises :class:`StoreUnavailable`, and serve ``workflows`` on it
    until SIGTERM or SIGINT (or, before the store opened, until either). Any other error
    opening the store is raised at once; the store is closed on return."""
    workflows = list(workflows)
    served_specs(workflows)  # a mistake there is told now, not once a store answers
    clock = as_clock(clock)
    worker_id = worker_id_or_default(None)
    state = StoreState(store_name, clock)
    health: HealthServer | None = None
    stop = StopSignal()
    stop.bind()
    handled = _stop_on_signals(stop, worker_id)
    store: Store | None = None
    try:
        if options.health_port is not None:
            health = HealthServer(worker_id=worker_id, not_ready=lambda: _opening(state))
            await health.start(options.health_host, options.health_port)
        store = await _open_when_available(open_store, state, stop, clock, health)
    finally:
        if store is None:
            unhandle_signals(handled)
            if health is not None:
                await health.close()
    if store is None:
        status_log.info("worker %s stopped before its store answered", worker_id)
        return
    try:
        worker = WorkflowWorker(
            workflows=workflows, store=store, worker_id=worker_id, options=options, clock=clock
        )
        if health is not None:
            worker.adopt_health(health)
        if stop.is_set:  # a signal came as the store opened
            worker.stop()
        # Its own signal handlers replace this function's as it starts (nothing awaited in
        # between, so no signal falls in a gap).
        await worker.run()
    finally:
        if health is not None:
            await health.close()
        store.close()


def _opening(state: StoreState) -> dict[str, str]:
    return {"status": "starting", **({"error": state.error} if state.error else {})}


async def _open_when_available(
    open_store: Callable[[], Store],
    state: StoreState,
    stop: StopSignal,
    clock: Clock,
    health: HealthServer | None,
) -> Store | None:
    """The opened store, or None when stopped first. Where the health endpoint listens is
    told with the first failure: the start-up line, which says it too, waits for the store."""
    for attempt, delay in enumerate(backoff(OPEN_RETRY_FIRST, OPEN_RETRY_MOST)):
        asked_at = clock()
        opening = asyncio.ensure_future(_on_daemon_thread(open_store))
        if await stop.race(opening):
            opening.add_done_callback(_close_unwanted)
            return None
        try:
            store = opening.result()
        except StoreUnavailable as exc:
            state.failed(exc, asked_at)
            if attempt == 0 and health is not None:
                status_log.info("health endpoint on %s: /readyz answers 503 until then", health.url)
        else:
            state.answered(asked_at)
            return store
        if await stop.sleep(clock, delay):
            return None
    raise AssertionError("backoff() never ends")


def _close_unwanted(opening: asyncio.Future[Store]) -> None:
    if not opening.cancelled() and opening.exception() is None:
        opening.result().close()


async def _on_daemon_thread(call: Callable[[], T]) -> T:
    """``call()`` on a thread of its own that does not hold up the process's exit: a store
    being opened when the worker is stopped is left to finish (or time out) by itself."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[T] = loop.create_future()

    def target() -> None:
        try:
            outcome: tuple[T | None, BaseException | None] = (call(), None)
        except BaseException as exc:
            outcome = (None, exc)
        # The loop may be gone by now (the worker stopped and the process is exiting).
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(_settle, done, *outcome)

    threading.Thread(target=target, name="lockgate-open-store", daemon=True).start()
    return await done


def _settle(done: asyncio.Future[T], result: T | None, error: BaseException | None) -> None:
    if done.cancelled():
        if isinstance(result, Store):
            result.close()
    elif error is not None:
        done.set_exception(error)
    else:
        done.set_result(result)  # type: ignore[arg-type]


def _stop_on_signals(stop: StopSignal, worker_id: str) -> list[signal.Signals]:
    """Stop on SIGTERM and SIGINT while the store is being opened."""

    def on_signal(sig: signal.Signals) -> None:
        if not stop.is_set:
            status_log.info("worker %s: %s received; stopping", worker_id, sig.name)
        stop.set()

    return handle_stop_signals(on_signal)
