"""Bound topics: a workflow bound to a Kafka topic (``@workflow(topic=KafkaTopic(...))``) runs
once per record. :class:`BoundConsumer` is one worker's member of the binding's consumer group.
See docs/kafka.md, "Bound workflows"."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lockgate._lazy import lazy_exports

if TYPE_CHECKING:
    from lockgate.streams.bound._consumer import (
        BoundConsumer,
        bound_group,
        bound_run_id,
        partition_shard_key,
    )

__all__ = ["BoundConsumer", "bound_group", "bound_run_id", "partition_shard_key"]


if not TYPE_CHECKING:  # a type checker sees the imports above, not a __getattr__
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "lockgate.streams.bound._consumer": (
                "BoundConsumer",
                "bound_group",
                "bound_run_id",
                "partition_shard_key",
            ),
        },
    )
