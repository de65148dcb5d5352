"""What lockgate consumes from and produces to Kafka besides the run journals, by role:

- ``triggers/``: the events of ``Collect`` and ``Debounce`` workflows on a topic of their own
  (:func:`trigger_topic`), sent by :class:`TriggerProducer` or any producer, and consumed by
  the workers serving the workflow in one group (:class:`TriggerConsumer`), which keep the
  open windows of the keys on the partitions each owns and fire their runs;
- ``bound/``: workflows bound to a user's topic, one run per record
  (:class:`~lockgate.streams.bound.BoundConsumer`);
- ``sources/``: streams a run reads itself, batch by batch, with ``ctx.consume``
  (:class:`~lockgate.streams.sources.Source`, ``InMemorySource``, ``KafkaSource``).

Beside them: the topic and group names (``_topics``), the dead-letter copies
(``_dead_letters``), what group members share (``_member``) and the records of users' topics
with their decoding (``_values``). See docs/kafka.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lockgate._lazy import lazy_exports

if TYPE_CHECKING:
    from lockgate.streams._topics import dlq_topic, group_id, trigger_topic
    from lockgate.streams.triggers._consumer import TriggerConsumer
    from lockgate.streams.triggers._produce import TriggerProducer
    from lockgate.streams.triggers._status import PartitionStatus, trigger_status

__all__ = [
    "PartitionStatus",
    "TriggerConsumer",
    "TriggerProducer",
    "dlq_topic",
    "group_id",
    "trigger_status",
    "trigger_topic",
]


if not TYPE_CHECKING:  # a type checker sees the imports above, not a __getattr__
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "lockgate.streams._topics": ("dlq_topic", "group_id", "trigger_topic"),
            "lockgate.streams.triggers._consumer": ("TriggerConsumer",),
            "lockgate.streams.triggers._produce": ("TriggerProducer",),
            "lockgate.streams.triggers._status": ("PartitionStatus", "trigger_status"),
        },
    )
