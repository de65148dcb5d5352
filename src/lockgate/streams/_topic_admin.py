"""Kafka topics made and looked at through the admin API: what ``lockgate topics`` does, and the
check a worker makes at start that the topic of each bound workflow exists.

A workflow bound to a topic reads a topic that is the user's: lockgate never creates it behind
the user's back (its partition count is how many workers can share it, a choice only its owner
can make), so something must create it, and the brokers ``make kafka`` starts do not create
topics on first use. :func:`create_topic` does, with the partitions, replication factor and
settings asked for; :func:`list_topics` and :func:`describe_topic` show what the brokers hold.

Every request waits at most the journal URL's ``read_timeout``. A broker that does not answer
is :class:`StoreUnavailable` (the operation failed: try again); a request the broker refuses
because of what it was given (a topic that exists, a setting it does not know, more replicas
than brokers) is :class:`ConfigurationError` (fix the command). The listing is always asked of
the whole cluster, never of one topic by name: asking a broker with
``auto.create.topics.enable`` for a missing topic's metadata may create it.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from lockgate._errors import ConfigurationError, StoreUnavailable
from lockgate.streams._topics import TOPIC_NAME

with contextlib.suppress(ImportError):  # the extra may be missing: no admin is made then
    from confluent_kafka import KafkaException, TopicPartition
    from confluent_kafka.admin import (  # type: ignore[attr-defined]  # not re-exported
        AdminClient,
        ConfigResource,
        ConfigSource,
        ResourceType,
    )
    from confluent_kafka.admin._listoffsets import OffsetSpec
    from confluent_kafka.cimpl import NewTopic

#: Seconds a request waits for Kafka when the journal URL names no ``read_timeout``.
READ_TIMEOUT = 10.0
#: The settings :func:`describe_topic` reports beside those set on the topic itself.
RETENTION = ("cleanup.policy", "retention.ms", "retention.bytes")

#: Kafka's answers that say the request cannot work as given: the command's to fix.
_REFUSALS = frozenset(
    {
        "TOPIC_ALREADY_EXISTS",
        "INVALID_CONFIG",
        "INVALID_PARTITIONS",
        "INVALID_REPLICATION_FACTOR",
        "INVALID_REPLICA_ASSIGNMENT",
        "TOPIC_EXCEPTION",
        "POLICY_VIOLATION",
        "INVALID_REQUEST",
        "TOPIC_AUTHORIZATION_FAILED",
        "CLUSTER_AUTHORIZATION_FAILED",
        "UNKNOWN_TOPIC_OR_PART",
    }
)


@dataclass(frozen=True)
class KafkaAdmin:
    """Where the admin requests go: ``bootstrap`` servers, the librdkafka ``config`` every
    client starts from, how long each request waits (``timeout``), and the replication factor
    a topic gets when none is asked for (the journal URL's ``replication_factor``; -1: the
    brokers' default)."""

    bootstrap: str
    config: Mapping[str, Any]
    timeout: float = READ_TIMEOUT
    replication_factor: int = -1

    @property
    def url(self) -> str:
        """The ``kafka://`` URL a command names these brokers with."""
        return f"kafka://{self.bootstrap}"

    def client(self) -> Any:
        if "AdminClient" not in globals():
            raise ConfigurationError(
                "talking to Kafka needs confluent-kafka: pip install 'lockgate[kafka]'"
            )
        return AdminClient(dict(self.config))


def admin_for_url(url: str) -> KafkaAdmin:
    """The :class:`KafkaAdmin` of a ``kafka://host:port[,host:port][?...]`` journal URL: its
    bootstrap servers, ``read_timeout`` and ``replication_factor`` (the URL's other options are
    about the journal and are accepted, so one URL serves every command)."""
    from lockgate.stores.kafka._redact import redacted_journal_url
    from lockgate.stores.kafka._replay import parse_journal_url

    bootstrap, _topic, timeout = parse_journal_url(url)
    options = dict(parse_qsl(urlsplit(url).query, keep_blank_values=True))
    replication = options.get("replication_factor", "-1")
    try:
        factor = int(replication)
    except ValueError:
        raise ConfigurationError(
            f"journal URL {redacted_journal_url(url)!r}: replication_factor must be a whole "
            f"number, not {replication!r}"
        ) from None
    config = {"bootstrap.servers": bootstrap, "logger": logging.getLogger("lockgate.kafka")}
    return KafkaAdmin(bootstrap, config, timeout=timeout, replication_factor=factor)


def admin_for_journal(journal: Any) -> KafkaAdmin:
    """The :class:`KafkaAdmin` of a :class:`~lockgate.stores.kafka.KafkaEventLogStore`."""
    return KafkaAdmin(
        journal.bootstrap_servers,
        journal.client_config,
        timeout=journal.read_timeout,
        replication_factor=journal.replication_factor,
    )


@dataclass(frozen=True)
class TopicSummary:
    """A topic as the cluster lists it: its partition count and replication factor."""

    name: str
    partitions: int
    replication_factor: int


@dataclass(frozen=True)
class PartitionInfo:
    """One partition: its ``leader`` broker (None: it has none now), its ``replicas`` and the
    replicas in sync (``isr``), the oldest offset kept (``start``) and the next to be written
    (``end``)."""

    partition: int
    leader: int | None
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    start: int
    end: int


@dataclass(frozen=True)
class TopicDescription:
    """A topic in full: its partitions, its replication factor, the retention settings that
    apply to it (``retention``: :data:`RETENTION`, from the topic or the brokers' defaults) and
    the settings set on the topic itself (``overrides``)."""

    name: str
    replication_factor: int
    partitions: tuple[PartitionInfo, ...]
    retention: dict[str, str] = field(default_factory=dict)
    overrides: dict[str, str] = field(default_factory=dict)

    @property
    def records(self) -> int:
        return sum(p.end - p.start for p in self.partitions)


@dataclass(frozen=True)
class Created:
    """What :func:`create_topic` did: ``created`` False when the topic was there already (and
    ``if_not_exists`` allowed it)."""

    name: str
    partitions: int
    created: bool


def check_topic_name(name: str) -> None:
    """:class:`ConfigurationError` unless Kafka takes ``name`` as a topic name, with room left
    for the ``.dlq`` of its dead-letter topic."""
    if not TOPIC_NAME.fullmatch(name) or name in (".", ".."):
        raise ConfigurationError(
            f"topic name {name!r} is not one Kafka takes: a topic name is 1-245 of A-Z a-z 0-9 "
            f". _ - (room left for the '.dlq' of its dead-letter topic), and not '.' or '..'"
        )


def parse_settings(items: Iterable[str]) -> dict[str, str]:
    """``KEY=VALUE`` topic settings as a dict; :class:`ConfigurationError` for an item with no
    ``=``, an empty key or a key given twice."""
    settings: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigurationError(
                f"--config {item!r} is not KEY=VALUE (e.g. --config retention.ms=604800000)"
            )
        if key in settings:
            raise ConfigurationError(f"--config {key} is given twice")
        settings[key] = value
    return settings


def _code(exc: BaseException) -> str:
    error: Any = exc.args[0] if exc.args else None
    return str(error.name()) if hasattr(error, "name") else ""


def _unavailable(admin: KafkaAdmin, what: str, exc: BaseException) -> StoreUnavailable:
    reason = exc.args[0].str() if exc.args and hasattr(exc.args[0], "str") else str(exc)
    return StoreUnavailable(
        f"Kafka at {admin.bootstrap} did not answer {what} within {admin.timeout:g} s: "
        f"{reason or type(exc).__name__}"
    )


def _metadata(admin: KafkaAdmin, client: Any) -> Any:
    try:
        return client.list_topics(timeout=admin.timeout)
    except KafkaException as exc:
        raise _unavailable(admin, "a listing of its topics", exc) from exc


def list_topics(admin: KafkaAdmin, *, internal: bool = False) -> list[TopicSummary]:
    """The cluster's topics, by name; Kafka's own (``__consumer_offsets``, ...) only with
    ``internal``."""
    listed = _metadata(admin, admin.client()).topics
    found = []
    for name in sorted(listed):
        if name.startswith("__") and not internal:
            continue
        partitions = listed[name].partitions
        factor = max((len(p.replicas) for p in partitions.values()), default=0)
        found.append(TopicSummary(name, len(partitions), factor))
    return found


def partition_count(admin: KafkaAdmin, client: Any, name: str) -> int | None:
    """How many partitions ``name`` has, or None when the cluster has no such topic."""
    listed = _metadata(admin, client).topics.get(name)
    if listed is None or listed.error is not None or not listed.partitions:
        return None
    return len(listed.partitions)


def create_topic(
    admin: KafkaAdmin,
    name: str,
    *,
    partitions: int,
    replication_factor: int | None = None,
    settings: Mapping[str, str] | None = None,
    if_not_exists: bool = False,
) -> Created:
    """Create ``name`` with ``partitions``, ``replication_factor`` (default: the admin's) and
    ``settings``, and wait until the cluster lists it. A topic there already is a
    :class:`ConfigurationError`, unless ``if_not_exists`` (then nothing is changed, and only a
    different partition count is refused)."""
    check_topic_name(name)
    if partitions < 1:
        raise ConfigurationError(f"--partitions must be 1 or more, got {partitions}")
    factor = admin.replication_factor if replication_factor is None else replication_factor
    if factor < 1 and factor != -1:
        raise ConfigurationError(
            f"--replication-factor must be 1 or more (-1: the brokers' default), got {factor}"
        )
    client = admin.client()
    found = partition_count(admin, client, name)
    if found is None:
        new = NewTopic(name, partitions, factor, config=dict(settings or {}))
        try:
            client.create_topics([new], request_timeout=admin.timeout)[name].result(
                timeout=admin.timeout
            )
        except KafkaException as exc:
            if _code(exc) not in _REFUSALS:
                raise _unavailable(admin, f"the creation of topic {name!r}", exc) from exc
            if _code(exc) != "TOPIC_ALREADY_EXISTS":
                raise ConfigurationError(
                    f"Kafka refused topic {name!r}: {exc.args[0].str()}"
                ) from None
            found = partition_count(admin, client, name)  # made meanwhile by another
        else:
            _wait_listed(admin, client, name)
            return Created(name, partitions, True)
    if not if_not_exists:
        raise ConfigurationError(
            f"topic {name!r} exists already ({found} partition(s)); pass --if-not-exists to "
            f"accept it as it is"
        )
    if found is not None and found != partitions:
        raise ConfigurationError(
            f"topic {name!r} exists already with {found} partition(s), not {partitions}"
        )
    return Created(name, found or partitions, False)


def _wait_listed(admin: KafkaAdmin, client: Any, name: str) -> None:
    """Until the cluster lists a topic just created: its metadata reaches the broker that
    answers a moment after the creation is acknowledged."""
    deadline = time.monotonic() + admin.timeout
    while partition_count(admin, client, name) is None and time.monotonic() < deadline:
        time.sleep(0.05)


def describe_topic(admin: KafkaAdmin, name: str) -> TopicDescription:
    """``name`` in full (see :class:`TopicDescription`); :class:`ConfigurationError` when the
    cluster has no such topic."""
    check_topic_name(name)
    client = admin.client()
    listed = _metadata(admin, client).topics.get(name)
    if listed is None or listed.error is not None or not listed.partitions:
        raise ConfigurationError(f"topic {name!r} does not exist on {admin.bootstrap}")
    numbers = sorted(listed.partitions)
    try:
        low = _offsets(admin, client, name, numbers, OffsetSpec.earliest())  # type: ignore[no-untyped-call]
        high = _offsets(admin, client, name, numbers, OffsetSpec.latest())  # type: ignore[no-untyped-call]
        configs = _configs(admin, client, name)
    except (KafkaException, TimeoutError) as exc:
        raise _unavailable(admin, f"a description of topic {name!r}", exc) from exc
    partitions = []
    for number in numbers:
        meta = listed.partitions[number]
        leader = meta.leader if meta.leader is not None and meta.leader >= 0 else None
        partitions.append(
            PartitionInfo(
                number, leader, tuple(meta.replicas), tuple(meta.isrs), low[number], high[number]
            )
        )
    factor = max((len(p.replicas) for p in partitions), default=0)
    retention = {key: configs[key][0] for key in RETENTION if key in configs}
    overrides = {key: value for key, (value, own) in sorted(configs.items()) if own}
    return TopicDescription(name, factor, tuple(partitions), retention, overrides)


def _offsets(
    admin: KafkaAdmin, client: Any, topic: str, numbers: list[int], spec: Any
) -> dict[int, int]:
    asked = {TopicPartition(topic, n): spec for n in numbers}
    futures = client.list_offsets(asked, request_timeout=admin.timeout)
    deadline = time.monotonic() + admin.timeout
    return {
        tp.partition: future.result(timeout=max(0.1, deadline - time.monotonic())).offset
        for tp, future in futures.items()
    }


def _configs(admin: KafkaAdmin, client: Any, topic: str) -> dict[str, tuple[str, bool]]:
    """Every setting of ``topic``: its value, and whether it is set on the topic itself."""
    resource = ConfigResource(ResourceType.TOPIC, topic)
    future = client.describe_configs([resource], request_timeout=admin.timeout)[resource]
    entries = future.result(timeout=admin.timeout)
    found = {}
    for key, entry in entries.items():
        # The source is a ConfigSource's int here; compare by value, whatever the version.
        own = (
            int(getattr(entry.source, "value", entry.source))
            == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
        )
        found[key] = (str(entry.value), own)
    return found


def missing_bound_topics(admin: KafkaAdmin, topics: Mapping[str, str]) -> list[tuple[str, str]]:
    """The ``(workflow, topic)`` pairs of ``topics`` (workflow -> the topic it is bound to)
    whose topic the cluster does not have. :class:`StoreUnavailable` when Kafka does not
    answer."""
    if not topics:
        return []
    listed = _metadata(admin, admin.client()).topics
    missing = []
    for workflow, topic in sorted(topics.items()):
        found = listed.get(topic)
        if found is None or found.error is not None or not found.partitions:
            missing.append((workflow, topic))
    return missing


def create_command(admin: KafkaAdmin, topic: str) -> str:
    """The command that creates ``topic`` on ``admin``'s brokers."""
    return f"lockgate topics create {topic} --partitions N --journal {admin.url}"
