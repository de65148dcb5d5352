"""Streams a workflow consumes in batches with ``ctx.consume``: the :class:`Source` protocol,
its :class:`Batch`, :class:`InMemorySource` for tests and :class:`KafkaSource` for a topic.

Each batch is handled in a journaled step and committed to its source after the step's
outcome is durable; a resumed run seeks its source to where the journal says the stream
stands. See docs/kafka.md, "Streaming inside a workflow: sources".
"""

from __future__ import annotations

from lockgate.streams.sources._kafka import KafkaSource
from lockgate.streams.sources._memory import InMemorySource
from lockgate.streams.sources._source import Batch, Source

__all__ = ["Batch", "InMemorySource", "KafkaSource", "Source"]
