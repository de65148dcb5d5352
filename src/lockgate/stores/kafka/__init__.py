"""The Kafka event log: run journals in one topic, a partition per lifecycle shard."""

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
