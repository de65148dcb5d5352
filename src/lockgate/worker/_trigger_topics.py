"""The worker's loop over trigger topics: with a Kafka journal, one
:class:`~lockgate.streams.TriggerConsumer` per served triggered workflow, each on a thread of
its own, for as long as the worker serves."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

from lockgate._errors import ConfigurationError
from lockgate.stores.kafka import KafkaEventLogStore
from lockgate.streams import TriggerConsumer, trigger_topic
from lockgate.worker._consumer_threads import on_thread, serve_consumers, soon
from lockgate.worker._runtime import Runtime


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
            on_fired=soon(loop, rt.wakeup(f"claim:{name}").set),
            on_assigned=soon(loop, _owner_of(rt, name)),
        )
        for name, spec in rt.specs.items()
        if spec.trigger is not None
    ]
    served = [on_thread(loop, consumer, stop, "trigger") for consumer in consumers]
    await serve_consumers(asyncio.ensure_future(rt.stop.wait()), served, stop)


def _owner_of(rt: Runtime, name: str) -> Callable[[list[int]], None]:
    """What tells ``rt`` the partitions (the shards) of ``name``'s trigger topic it owns."""

    def owned(partitions: list[int]) -> None:
        rt.owned[name] = partitions

    return owned
