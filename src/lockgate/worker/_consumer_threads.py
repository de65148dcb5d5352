"""The threads a worker's topic consumers run on (trigger topics, bound topics): each serves
until the worker stops, started again with backoff while Kafka or the store does not answer,
and hands what it calls back to the worker's event loop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable
from typing import Any, Protocol

from lockgate._errors import StoreUnavailable
from lockgate.worker._status import backoff

log = logging.getLogger("lockgate.worker")

#: Seconds between tries to start a consumer while Kafka does not answer: doubling, at most.
RETRY_FIRST = 0.5
RETRY_MOST = 10.0


class TopicConsumer(Protocol):
    topic: str

    def serve(self, stop: threading.Event) -> None: ...


def serve_until(consumer: TopicConsumer, stop: threading.Event) -> None:
    """``consumer.serve(stop)`` until ``stop``, started again with backoff while Kafka or the
    store does not answer."""
    for delay in backoff(RETRY_FIRST, RETRY_MOST):
        try:
            consumer.serve(stop)
            return
        except StoreUnavailable as exc:
            log.warning("topic %s: %s; trying again in %.1f s", consumer.topic, exc, delay)
        if stop.wait(delay):
            return


def soon(loop: asyncio.AbstractEventLoop, call: Callable[..., None]) -> Callable[..., None]:
    """``call``, made from any thread as a callback on ``loop``."""

    def on_loop(*args: object) -> None:
        with contextlib.suppress(RuntimeError):  # the worker's loop closed: nothing to tell
            loop.call_soon_threadsafe(call, *args)

    return on_loop


def on_thread(
    loop: asyncio.AbstractEventLoop, consumer: TopicConsumer, stop: threading.Event, role: str
) -> asyncio.Future[None]:
    """Serve ``consumer`` (:func:`serve_until`) on a thread of its own (not the loop's
    executor, whose few threads serve the store's calls); a future of its outcome."""
    done: asyncio.Future[None] = loop.create_future()

    def settle(error: BaseException | None) -> None:
        if done.done():
            return
        if error is None:
            done.set_result(None)
        else:
            done.set_exception(error)

    def main() -> None:
        try:
            serve_until(consumer, stop)
        except BaseException as exc:  # handed to the loop: the worker's loop fails with it
            with contextlib.suppress(RuntimeError):  # unless that loop is gone already
                loop.call_soon_threadsafe(settle, exc)
        else:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(settle, None)

    threading.Thread(target=main, name=f"lockgate-{role}:{consumer.topic}", daemon=True).start()
    return done


async def serve_consumers(
    stopped: asyncio.Future[Any],
    served: list[asyncio.Future[None]],
    stop: threading.Event,
) -> None:
    """Until the worker stops (``stopped``) or a consumer fails (one that cannot work: its
    error ends this, and the worker with it); then stop every consumer and wait for them."""
    try:
        await asyncio.wait([stopped, *served], return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
        stop.set()
        await asyncio.gather(*served)
