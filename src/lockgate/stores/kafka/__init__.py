"""The Kafka event log: run journals in one topic, a partition per lifecycle shard."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lockgate._lazy import lazy_exports

if TYPE_CHECKING:
    from lockgate.stores.kafka._fold import ReplaySummary
    from lockgate.stores.kafka._replay import JournalRecord, JournalReplay, replay_journal
    from lockgate.stores.kafka._store import KafkaEventLogStore

__all__ = [
    "JournalRecord",
    "JournalReplay",
    "KafkaEventLogStore",
    "ReplaySummary",
    "replay_journal",
]


if not TYPE_CHECKING:  # a type checker sees the imports above, not a __getattr__
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "lockgate.stores.kafka._fold": ("ReplaySummary",),
            "lockgate.stores.kafka._replay": ("JournalRecord", "JournalReplay", "replay_journal"),
            "lockgate.stores.kafka._store": ("KafkaEventLogStore",),
        },
    )
