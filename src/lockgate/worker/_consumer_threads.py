"""The threads a worker's topic consumers run on (trigger topics, bound topics): each serves
until the worker stops, started again with backoff while Kafka or the store does not answer,
and hands what it calls back to the worker's event loop. :class:`Launch` starts one kind of
them, the callbacks they are made with included.

A consumer contains what one record does to it (the record is dead-lettered) and what one pass
meets (an outage, tried again). A thread that ends otherwise while the worker serves (an error
that is no lockgate error, a bug; or a return before the stop) fails its future with
:class:`~lockgate.ConsumerDied`, and the worker stops at once with one error line."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import traceback
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from lockgate._errors import ConsumerDied, LockgateError, StoreUnavailable, one_line
from lockgate.worker._status import backoff

if TYPE_CHECKING:
    from lockgate.worker._runtime import Runtime

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
        outcome: BaseException | None = None
        try:
            serve_until(consumer, stop)
            if not stop.is_set():
                outcome = ConsumerDied(
                    f"the {role} topic consumer of {consumer.topic!r} returned while the "
                    f"worker serves",
                    topic=consumer.topic,
                    role=role,
                )
        except LockgateError as exc:  # says what went wrong (a topic that cannot work)
            outcome = exc
        except BaseException as exc:  # handed to the loop: the worker's loop fails with it
            outcome = died(consumer.topic, role, exc)
        with contextlib.suppress(RuntimeError):  # unless that loop is gone already
            loop.call_soon_threadsafe(settle, outcome)

    threading.Thread(target=main, name=f"lockgate-{role}:{consumer.topic}", daemon=True).start()
    return done


def died(topic: str, role: str, error: BaseException) -> ConsumerDied:
    """The :class:`ConsumerDied` of a consumer that ``error`` ended: one line naming the
    error and where it was raised (its traceback goes to the debug log)."""
    where = ""
    frames = traceback.extract_tb(error.__traceback__)
    if frames:
        last = frames[-1]
        where = f" (at {last.filename.rsplit('/', 1)[-1]}:{last.lineno} in {last.name})"
    log.debug("topic %s: the consumer's error", topic, exc_info=error)
    dead = ConsumerDied(
        f"the {role} topic consumer of {topic!r} died of {type(error).__name__}: "
        f"{one_line(error)}{where}",
        topic=topic,
        role=role,
    )
    dead.__cause__ = error
    return dead


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


class Launch:
    """The worker starting its topic consumers of one kind (``role``: ``"trigger"``,
    ``"bound"``): the callbacks a consumer is made with, which land on the worker's event loop,
    and :meth:`serve`, which serves each consumer on a thread of its own until the worker
    stops. Made on the worker's event loop."""

    def __init__(self, rt: Runtime, role: str) -> None:
        self.rt = rt
        self.role = role
        self.loop = asyncio.get_running_loop()

    def woke(self, name: str) -> Callable[[], None]:
        """What a consumer calls once it made runs of ``name`` (a fire, a submit): the
        workflow's claim loop wakes, so it may start them at once."""
        return soon(self.loop, self.rt.wakeup(f"claim:{name}").set)

    def owned(
        self, name: str, shards: Callable[[list[int]], list[int]]
    ) -> Callable[[list[int]], None]:
        """What a consumer calls with the partitions it owns: their ``shards`` become the
        ones ``name``'s claims try first (``Runtime.owned``)."""

        def owned(partitions: list[int]) -> None:
            self.rt.owned[name] = shards(partitions)

        return soon(self.loop, owned)

    async def serve(self, consumers: Sequence[TopicConsumer]) -> None:
        """Serve each of ``consumers`` on a thread of its own (:func:`on_thread`) until the
        worker stops or one fails (:func:`serve_consumers`)."""
        stop = threading.Event()
        served = [on_thread(self.loop, consumer, stop, self.role) for consumer in consumers]
        await serve_consumers(asyncio.ensure_future(self.rt.stop.wait()), served, stop)
