"""A consumer group's progress on a topic, per partition, read from the broker alone: who owns
the partition (the group member's client id, which for lockgate's members is the worker id),
the offset the group committed, the partition's end (its high watermark) and the lag between.

Read-only and cheap: an admin client's metadata, group description, committed offsets and
watermark requests, never a consumer that joins the group or reads a record. So it can be
asked every few seconds (the console's windows page) without disturbing the members; what it
cannot tell is what a member holds in memory (a trigger topic's open windows: see
``triggers/_status.py``, which reads the records past the commit for them).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lockgate._errors import StoreUnavailable

with contextlib.suppress(ImportError):  # the extra may be missing: no journal is made then
    from confluent_kafka import (
        ConsumerGroupTopicPartitions,
        KafkaError,
        KafkaException,
        TopicPartition,
    )
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.admin._listoffsets import OffsetSpec

#: Partitions of one topic shown at most (the lowest numbered).
MOST_PARTITIONS = 1024


@dataclass(frozen=True)
class PartitionView:
    """One partition: ``owner`` the client id of the member it is assigned to (None: no
    member holds it), ``owner_host`` where that member connects from, ``committed`` the group's
    offset (None: never committed), ``end`` the next offset to be written, ``lag`` the records
    past the commit (past the partition's start when never committed, or when retention passed
    the commit)."""

    partition: int
    owner: str | None
    owner_host: str | None
    committed: int | None
    end: int
    lag: int


@dataclass(frozen=True)
class GroupView:
    """``group``'s progress on ``topic``: its state as Kafka names it (``STABLE``, ``EMPTY``,
    ``DEAD`` for a group never made, ...), its members' count and a :class:`PartitionView` per
    partition. ``exists`` is False when the topic is not there (yet); ``cut`` when the topic
    has more than :data:`MOST_PARTITIONS` partitions and only those are shown."""

    topic: str
    group: str
    state: str
    members: int
    partitions: tuple[PartitionView, ...]
    exists: bool = True
    cut: bool = False

    @property
    def lag(self) -> int:
        return sum(p.lag for p in self.partitions)


class GroupViewer:
    """Views of consumer groups on the brokers that ``client_config`` (librdkafka settings,
    ``bootstrap.servers`` among them) names, through one admin client made on first use and
    kept: every view waits at most ``timeout`` seconds per request, and a broker that does not
    answer is :class:`StoreUnavailable`. Safe to call from several threads."""

    def __init__(self, client_config: Mapping[str, Any], *, timeout: float = 3.0) -> None:
        self.client_config = dict(client_config)
        self.timeout = timeout
        self._admin: Any = None
        self._lock = threading.Lock()

    @property
    def bootstrap(self) -> str:
        return str(self.client_config.get("bootstrap.servers", ""))

    def _client(self) -> Any:
        with self._lock:
            if self._admin is None:
                self._admin = AdminClient(self.client_config)
            return self._admin

    def view(self, topic: str, group: str) -> GroupView:
        """``group``'s progress on ``topic`` now."""
        admin, timeout = self._client(), self.timeout
        try:
            listed = admin.list_topics(topic=topic, timeout=timeout).topics.get(topic)
            error = listed.error if listed is not None else None
            if error is not None and error.code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise KafkaException(error)  # not allowed to see it, say, or no leader yet
            if listed is None or error is not None or not listed.partitions:
                return GroupView(topic, group, "", 0, (), exists=False)
            numbers = sorted(listed.partitions)
            cut = len(numbers) > MOST_PARTITIONS
            numbers = numbers[:MOST_PARTITIONS]
            state, members = _members(admin, group, topic, timeout)
            committed = _committed(admin, group, topic, numbers, timeout)
            low = _offsets(admin, topic, numbers, _earliest(), timeout)
            high = _offsets(admin, topic, numbers, _latest(), timeout)
        except (KafkaException, TimeoutError) as exc:
            raise StoreUnavailable(
                f"Kafka at {self.bootstrap} did not answer for {topic!r} within "
                f"{self.timeout:g} s: {exc or type(exc).__name__}"
            ) from exc
        partitions = []
        for number in numbers:
            done = committed.get(number)
            start = max(done, low[number]) if done is not None else low[number]
            owner, host = members.get(number, (None, None))
            partitions.append(
                PartitionView(number, owner, host, done, high[number], max(0, high[number] - start))
            )
        owners = {owner for owner, _ in members.values()}
        return GroupView(topic, group, state, len(owners), tuple(partitions), cut=cut)


def _earliest() -> Any:
    return OffsetSpec.earliest()  # type: ignore[no-untyped-call]


def _latest() -> Any:
    return OffsetSpec.latest()  # type: ignore[no-untyped-call]


def _members(
    admin: Any, group: str, topic: str, timeout: float
) -> tuple[str, dict[int, tuple[str, str]]]:
    """The group's state and, per partition of ``topic`` assigned, its member's client id and
    host."""
    future = admin.describe_consumer_groups([group], request_timeout=timeout)[group]
    try:
        described = future.result(timeout=timeout)
    except KafkaException as exc:
        if exc.args[0].code() == KafkaError.GROUP_ID_NOT_FOUND:
            return "DEAD", {}
        raise
    owned: dict[int, tuple[str, str]] = {}
    for member in described.members:
        assignment = member.assignment
        for tp in assignment.topic_partitions if assignment is not None else []:
            if tp.topic == topic:
                owned[tp.partition] = (member.client_id, member.host)
    state = getattr(described.state, "name", str(described.state))
    return state, owned


def _committed(
    admin: Any, group: str, topic: str, numbers: list[int], timeout: float
) -> dict[int, int]:
    """The group's committed offset of each partition that has one."""
    asked = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, n) for n in numbers])
    future = admin.list_consumer_group_offsets([asked], request_timeout=timeout)[group]
    answer = future.result(timeout=timeout)
    found = {}
    for tp in answer.topic_partitions:
        if tp.error is not None:
            raise KafkaException(tp.error)
        if tp.offset >= 0:
            found[tp.partition] = tp.offset
    return found


def _offsets(
    admin: Any, topic: str, numbers: list[int], spec: Any, timeout: float
) -> dict[int, int]:
    """Each partition's offset as ``spec`` names it (its earliest or its latest)."""
    asked = {TopicPartition(topic, n): spec for n in numbers}
    futures = admin.list_offsets(asked, request_timeout=timeout)
    deadline = time.monotonic() + timeout
    return {
        tp.partition: future.result(timeout=max(0.1, deadline - time.monotonic())).offset
        for tp, future in futures.items()
    }
