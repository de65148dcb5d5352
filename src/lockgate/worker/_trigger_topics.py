"""The worker's loop over trigger topics: with a Kafka journal, one
:class:`~lockgate.streams.TriggerConsumer` per served triggered workflow, each on a thread of
its own, for as long as the worker serves."""

from __future__ import annotations

from lockgate._errors import ConfigurationError
from lockgate.stores.kafka import KafkaEventLogStore
from lockgate.streams import TriggerConsumer, trigger_topic
from lockgate.worker._consumer_threads import Launch
from lockgate.worker._runtime import Runtime


async def serve_trigger_topics(rt: Runtime, journal: KafkaEventLogStore) -> None:
    """Serve the trigger topic of every triggered workflow of ``rt`` until the worker stops.
    Fires wake the workflow's claim loop; the partitions each consumer owns become the shards
    its claims try first (``Runtime.owned``)."""
    launch = Launch(rt, "trigger")
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
            on_fired=launch.woke(name),
            on_assigned=launch.owned(name, _partitions_are_shards),
        )
        for name, spec in rt.specs.items()
        if spec.trigger is not None
    ]
    await launch.serve(consumers)


def _partitions_are_shards(partitions: list[int]) -> list[int]:
    """A triggered workflow's runs are sharded by their trigger topic's partition."""
    return partitions
