"""Bound topics: a workflow bound to a Kafka topic (``@workflow(topic=KafkaTopic(...))``) runs
once per record. :class:`BoundConsumer` is one worker's member of the binding's consumer group.
See docs/kafka.md, "Bound workflows"."""

from __future__ import annotations

from lockgate.streams.bound._consumer import (
    BoundConsumer,
    bound_group,
    bound_run_id,
    partition_shard_key,
)

__all__ = ["BoundConsumer", "bound_group", "bound_run_id", "partition_shard_key"]
