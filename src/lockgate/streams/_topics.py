"""Where a triggered workflow's events live: its topic, its dead-letter topic, its consumer
group, and the journal store they hang off."""

from __future__ import annotations

import contextlib
import re
import time
from typing import Any

from lockgate._errors import ConfigurationError, StoreUnavailable
from lockgate.stores.kafka import KafkaEventLogStore
from lockgate.workflow._spec import WorkflowSpec

with contextlib.suppress(ImportError):  # the extra may be missing: no journal is made then
    from confluent_kafka import KafkaException

#: What Kafka takes in a topic name, with room left for ``.dlq``.
TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]{1,245}")


def trigger_topic(topic_prefix: str, spec: WorkflowSpec) -> str:
    """The topic of ``spec``'s trigger events: the one its ``Collect``/``Debounce`` names,
    else ``{topic_prefix}.trigger.{workflow name}``. :class:`ConfigurationError` when that is
    no name Kafka takes (with its dead-letter topic's ``.dlq``)."""
    if spec.trigger is None:
        raise ConfigurationError(f"workflow {spec.name!r} has no Collect or Debounce trigger")
    topic = spec.trigger.topic or f"{topic_prefix}.trigger.{spec.name}"
    if not TOPIC_NAME.fullmatch(topic) or topic in (".", ".."):
        raise ConfigurationError(
            f"the trigger topic of {spec.name!r} would be {topic!r}, which Kafka does not take: "
            f"a topic name is 1-245 of A-Z a-z 0-9 . _ - (before its '.dlq'); name one with "
            f"Collect/Debounce(topic=...)"
        )
    return topic


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


def committed_offsets(consumer: Any, partitions: list[Any], timeout: float) -> list[Any]:
    """``consumer.committed(partitions)``, asked again while the group's coordinator is not
    ready (a broker just started, or the coordinator moving: Kafka says so with a retriable
    error); :class:`StoreUnavailable` when it is not ready within ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            found: list[Any] = consumer.committed(partitions, timeout=timeout)
            return found
        except KafkaException as exc:
            if not exc.args[0].retriable() or time.monotonic() > deadline:
                raise StoreUnavailable(f"Kafka did not say where the group stands: {exc}") from exc
            time.sleep(0.1)
