"""What lockgate consumes from and produces to Kafka besides the run journals: trigger topics.

With a Kafka journal, the events of a ``Collect`` or ``Debounce`` workflow live on a topic of
its own (:func:`trigger_topic`), any producer may send them (:class:`TriggerProducer` is
lockgate's), and the workers serving the workflow consume it in one consumer group
(:class:`TriggerConsumer`), keeping the open windows of the keys on the partitions each owns
and firing their runs. See docs/kafka.md, "Trigger topics".
"""

from __future__ import annotations

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
