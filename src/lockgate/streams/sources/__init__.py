"""Streams a workflow consumes in batches with ``ctx.consume``: the :class:`Source` protocol,
its :class:`Batch`, :class:`InMemorySource` for tests and :class:`KafkaSource` for a topic.

Each batch is handled in a journaled step and committed to its source after the step's
outcome is durable; a resumed run seeks its source to where the journal says the stream
stands. See docs/kafka.md, "Streaming inside a workflow: sources".
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lockgate._lazy import lazy_exports

if TYPE_CHECKING:
    from lockgate.streams.sources._kafka import KafkaSource
    from lockgate.streams.sources._memory import InMemorySource
    from lockgate.workflow._source import Batch, Source

__all__ = ["Batch", "InMemorySource", "KafkaSource", "Source"]


if not TYPE_CHECKING:  # a type checker sees the imports above, not a __getattr__
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "lockgate.streams.sources._kafka": ("KafkaSource",),
            "lockgate.streams.sources._memory": ("InMemorySource",),
            "lockgate.workflow._source": ("Batch", "Source"),
        },
    )
