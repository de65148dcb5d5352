"""The journal topic made, or checked, before a :class:`KafkaEventLogStore` serves anything.

A topic the store creates gets one partition per lifecycle shard and
:data:`JOURNAL_TOPIC_CONFIG`. One that exists already must have that partition count
(:class:`JournalTopicMismatch` otherwise: a topic is never repartitioned) and must not compact
(:class:`JournalTopicUnsafe`); one that deletes records after a time is served with a warning.
"""

from __future__ import annotations

import contextlib
import logging
import re
import time
from collections.abc import Mapping

with contextlib.suppress(ImportError):  # the extra may be missing: no store is made then
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
    from confluent_kafka.admin import (  # type: ignore[attr-defined]  # not re-exported
        AdminClient,
        ConfigResource,
        ResourceType,
    )
    from confluent_kafka.cimpl import NewTopic

from lockgate._errors import (
    JournalTopicMismatch,
    JournalTopicUnsafe,
    StoreUnavailable,
    TriggerTopicMismatch,
)

#: The settings a journal topic is created with: a journal must outlive its run, so records are
#: kept until an operator decides otherwise, and never compacted (compaction keeps one record
#: per key, and the key is the gate key many events share).
JOURNAL_TOPIC_CONFIG: Mapping[str, str] = {
    "cleanup.policy": "delete",
    "retention.ms": "-1",
    "retention.bytes": "-1",
}
_log = logging.getLogger("lockgate.kafka")

#: What a ``topic_prefix`` may be: the journal topic is ``<prefix>.journal`` (a Kafka topic name).
TOPIC_PREFIX = re.compile(r"[A-Za-z0-9._-]{1,200}")


def prepare_topic(
    admin: AdminClient,
    topic: str,
    *,
    bootstrap: str,
    partitions: int,
    replication_factor: int,
    config: Mapping[str, str],
    timeout: float,
    journal: bool = True,
) -> None:
    """Create ``topic`` with ``partitions`` and ``config``, or check the one there (see the
    module docstring). A topic that is not a ``journal`` (a trigger topic) has its settings
    left unchecked, and another partition count is a :class:`TriggerTopicMismatch` for it;
    :class:`StoreUnavailable` when Kafka (at ``bootstrap``) does not answer in ``timeout``."""
    try:
        found = _partition_count(admin, topic, timeout)
        if found is None:
            new = NewTopic(topic, partitions, replication_factor, config=dict(config))
            try:
                admin.create_topics([new])[topic].result(timeout=timeout)
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise
            found = _listed_after_creation(admin, topic, timeout)
    except KafkaException as exc:
        raise StoreUnavailable(
            f"Kafka at {bootstrap} could not list or create the "
            f"{'journal' if journal else 'trigger'} topic {topic!r}: {exc}"
        ) from exc
    if found is not None and found != partitions:
        mismatch = JournalTopicMismatch if journal else TriggerTopicMismatch
        raise mismatch(topic, found, partitions)
    if journal:
        _check_config(admin, topic, bootstrap, timeout)


def existing_partitions(
    admin: AdminClient, topic: str, *, bootstrap: str, timeout: float
) -> int | None:
    """The partition count of ``topic``, or None when Kafka (at ``bootstrap``) has no such
    topic; :class:`StoreUnavailable` when it does not answer in ``timeout``."""
    try:
        return _partition_count(admin, topic, timeout)
    except KafkaException as exc:
        raise StoreUnavailable(
            f"Kafka at {bootstrap} could not list topics to find the journal topic {topic!r}: {exc}"
        ) from exc


def _listed_after_creation(admin: AdminClient, topic: str, timeout: float) -> int | None:
    """The partition count of a topic just created, once the broker lists it: a new topic's
    metadata reaches the broker answering a moment after the creation is acknowledged."""
    deadline = time.monotonic() + timeout
    while True:
        found = _partition_count(admin, topic, timeout)
        if found is not None or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def _partition_count(admin: AdminClient, topic: str, timeout: float) -> int | None:
    # The whole listing, never the one topic: asking for a missing topic's metadata may have a
    # broker with auto.create.topics.enable create it with its default count.
    listed = admin.list_topics(timeout=timeout).topics.get(topic)
    if listed is None or listed.error is not None:
        return None
    return len(listed.partitions)


def _check_config(admin: AdminClient, topic: str, bootstrap: str, timeout: float) -> None:
    """Refuse a topic that compacts (:class:`JournalTopicUnsafe`); warn about one that deletes
    records after a time, since a run older than that loses its journal."""
    resource = ConfigResource(ResourceType.TOPIC, topic)
    deadline = time.monotonic() + timeout
    while True:
        try:
            entries = admin.describe_configs([resource])[resource].result(timeout=timeout)
            break
        except KafkaException as exc:
            # A topic just created may not be known yet to the broker asked: ask again.
            unknown = exc.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
            if not unknown or time.monotonic() > deadline:
                raise StoreUnavailable(
                    f"Kafka at {bootstrap} did not describe the journal topic {topic!r}: {exc}"
                ) from exc
            time.sleep(0.05)
    values = {name: entry.value for name, entry in entries.items()}
    policy = values.get("cleanup.policy") or "delete"
    if "compact" in policy:
        raise JournalTopicUnsafe(topic, "cleanup.policy", policy)
    retention = values.get("retention.ms")
    if retention not in (None, "-1"):
        _log.warning(
            "the journal topic %r deletes records after retention.ms=%s: a run that lives "
            "longer, or is read after that, loses its journal",
            topic,
            retention,
        )


def watermarks(consumer: Consumer, topic: str, partition: int, timeout: float) -> tuple[int, int]:
    """The partition's low and high watermarks (its oldest offset kept, and the next offset to
    be written), asked of the broker now; :class:`StoreUnavailable` when it does not answer."""
    try:
        low, high = consumer.get_watermark_offsets(
            TopicPartition(topic, partition), timeout=timeout, cached=False
        )
    except KafkaException as exc:
        raise StoreUnavailable(f"Kafka did not answer for {topic!r}: {exc}") from exc
    return int(low), int(high)
