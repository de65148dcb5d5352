"""The worker's loop over trigger topics: with a Kafka journal, one
:class:`~lockgate.streams.TriggerConsumer` per served triggered workflow, each on a thread of
its own, for as long as the worker serves."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable

from lockgate._errors import ConfigurationError, StoreUnavailable
from lockgate.stores.kafka import KafkaEventLogStore
from lockgate.streams import TriggerConsumer, trigger_topic
from lockgate.worker._runtime import Runtime
from lockgate.worker._status import backoff

log = logging.getLogger("lockgate.worker")

#: Seconds between tries to start a consumer while Kafka does not answer: doubling, at most.
RETRY_FIRST = 0.5
RETRY_MOST = 10.0


async def serve_trigger_topics(rt: Runtime, journal: KafkaEventLogStore) -> None:
    """Serve the trigger topic of every triggered workflow of ``rt`` until the worker stops.
    Fires wake the workflow's claim loop; the partitions each consumer owns become the shards
    its claims try first (``Runtime.owned``)."""
    loop = asyncio.get_running_loop()
    stop = threading.Event()
    served_by: dict[str, str] = {}
    for name, spec in rt.specs.items():
        if spec.trigger is not None:
            topic = trigger_topic(journal.topic_prefix, spec)
            other = served_by.setdefault(topic, name)
            if other != name:  # one group would split the topic's events between the two
                raise ConfigurationError(
                    f"workflows {other!r} and {name!r} both take their events from {topic!r}: "
                    f"give each a topic of its own (Collect/Debounce(topic=...))"
                )
    consumers = [
        TriggerConsumer(
            rt.store,
            journal,
            spec,
            worker_id=rt.worker_id,
            clock=rt.clock,
            on_fired=_soon(loop, rt.wakeup(f"claim:{name}").set),
            on_assigned=_owned(loop, rt, name),
        )
        for name, spec in rt.specs.items()
        if spec.trigger is not None
    ]
    served = [_on_thread(loop, _serve, consumer, stop) for consumer in consumers]
    stopped = asyncio.ensure_future(rt.stop.wait())
    try:
        # Until the worker stops, or a consumer fails (one that cannot work: its error ends
        # this loop, and the worker with it).
        await asyncio.wait([stopped, *served], return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
        stop.set()
        await asyncio.gather(*served)


def _serve(consumer: TriggerConsumer, stop: threading.Event) -> None:
    """:meth:`TriggerConsumer.serve` until ``stop``, started again with backoff while Kafka or
    the store does not answer."""
    for delay in backoff(RETRY_FIRST, RETRY_MOST):
        try:
            consumer.serve(stop)
            return
        except StoreUnavailable as exc:
            log.warning("trigger topic %s: %s; trying again in %.1f s", consumer.topic, exc, delay)
        if stop.wait(delay):
            return


def _soon(loop: asyncio.AbstractEventLoop, call: Callable[[], None]) -> Callable[[], None]:
    def soon() -> None:
        with contextlib.suppress(RuntimeError):  # the worker's loop closed: nothing to nudge
            loop.call_soon_threadsafe(call)

    return soon


def _owned(loop: asyncio.AbstractEventLoop, rt: Runtime, name: str) -> Callable[[list[int]], None]:
    def assigned(partitions: list[int]) -> None:
        with contextlib.suppress(RuntimeError):  # the worker's loop closed: no claims to aim
            loop.call_soon_threadsafe(rt.owned.__setitem__, name, partitions)

    return assigned


def _on_thread(
    loop: asyncio.AbstractEventLoop,
    fn: Callable[[TriggerConsumer, threading.Event], None],
    consumer: TriggerConsumer,
    stop: threading.Event,
) -> asyncio.Future[None]:
    """Run ``fn`` on a thread of its own (not the loop's executor, whose few threads serve the
    store's calls); a future of its outcome."""
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
            fn(consumer, stop)
        except BaseException as exc:  # handed to the loop: the worker's loop fails with it
            with contextlib.suppress(RuntimeError):  # unless that loop is gone already
                loop.call_soon_threadsafe(settle, exc)
        else:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(settle, None)

    threading.Thread(target=main, name=f"lockgate-trigger:{consumer.topic}", daemon=True).start()
    return done
