"""Trigger topics: the events of ``Collect`` and ``Debounce`` workflows on Kafka.

:class:`TriggerProducer` sends events, :class:`TriggerConsumer` is one worker's member of a
triggered workflow's consumer group (it keeps the open windows of the keys on the partitions it
owns and fires their runs), and :func:`trigger_status` reports each partition's progress. See
docs/kafka.md, "Trigger topics".
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lockgate._lazy import lazy_exports

if TYPE_CHECKING:
    from lockgate.streams.triggers._consumer import TriggerConsumer
    from lockgate.streams.triggers._produce import TriggerProducer, prepare_trigger_topics
    from lockgate.streams.triggers._status import PartitionStatus, trigger_status

__all__ = [
    "PartitionStatus",
    "TriggerConsumer",
    "TriggerProducer",
    "prepare_trigger_topics",
    "trigger_status",
]


if not TYPE_CHECKING:  # a type checker sees the imports above, not a __getattr__
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "lockgate.streams.triggers._consumer": ("TriggerConsumer",),
            "lockgate.streams.triggers._produce": ("TriggerProducer", "prepare_trigger_topics"),
            "lockgate.streams.triggers._status": ("PartitionStatus", "trigger_status"),
        },
    )
