"""The Kafka event log: run journals in one topic, a partition per lifecycle shard."""

from lockgate.stores.kafka._store import KafkaEventLogStore

__all__ = ["KafkaEventLogStore"]
