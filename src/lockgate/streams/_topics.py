"""Where a triggered workflow's events live: its topic, its dead-letter topic, its consumer
group, and the journal store they hang off."""

from __future__ import annotations

from lockgate._errors import ConfigurationError
from lockgate.stores.kafka import KafkaEventLogStore
from lockgate.workflow._spec import WorkflowSpec


def trigger_topic(topic_prefix: str, spec: WorkflowSpec) -> str:
    """The topic of ``spec``'s trigger events: the one its ``Collect``/``Debounce`` names,
    else ``{topic_prefix}.trigger.{workflow name}``."""
    if spec.trigger is None:
        raise ConfigurationError(f"workflow {spec.name!r} has no Collect or Debounce trigger")
    return spec.trigger.topic or f"{topic_prefix}.trigger.{spec.name}"


def dlq_topic(topic: str) -> str:
    """Where the records of ``topic`` that cannot become events go, with their reason."""
    return f"{topic}.dlq"


def group_id(topic: str) -> str:
    """The consumer group of the workers serving ``topic``'s workflow."""
    return f"lockgate.{topic}"


def kafka_journal(store: object) -> KafkaEventLogStore | None:
    """The Kafka journal of ``store`` (a composite whose event log is Kafka), else None."""
    events = getattr(store, "events", None)
    return events if isinstance(events, KafkaEventLogStore) else None
