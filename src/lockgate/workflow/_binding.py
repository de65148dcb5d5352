"""A workflow's binding to a Kafka topic (``@workflow(topic=KafkaTopic(...))``): each record of
the topic becomes one durable run, started by the consumers of the workers serving it."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from lockgate._errors import ConfigurationError
from lockgate.workflow._record import read_avro_schema

#: What Kafka takes in a topic name.
_TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")
#: Runs of one binding in flight per worker when the declaration says nothing.
DEFAULT_MAX_CONCURRENCY = 16
#: The parameter a bound workflow's body receives the record's decoded value as.
VALUE_PARAM = "value"


@dataclass(frozen=True)
class KafkaTopic:
    """Bind a workflow to the Kafka topic ``name``: one run per record, its id derived from
    the record's topic, partition and offset, so a record read twice starts one run.

    ``max_concurrency`` is how many runs of this binding one worker runs at once (its consumer
    submits at most twice that many ahead of their end); with the topic's partition count (a
    partition is read by one worker of the group) it is how a bound workflow is throttled.
    ``ordered`` starts a partition's next record's run only once the previous one finished, so
    runs start in offset order per partition, one at a time. Values are JSON unless
    ``avro_schema`` names an Avro schema file (``.avsc``); the values are then plain Avro binary
    written with it."""

    name: str
    max_concurrency: int = DEFAULT_MAX_CONCURRENCY
    ordered: bool = False
    avro_schema: str | Path | None = None

    def __post_init__(self) -> None:
        if (
            not isinstance(self.name, str)
            or not _TOPIC_NAME.fullmatch(self.name)
            or self.name in (".", "..")
        ):
            raise ConfigurationError(
                f"KafkaTopic name must be a Kafka topic name (1 to 249 of A-Z a-z 0-9 . _ -), "
                f"got {self.name!r}"
            )
        if (
            isinstance(self.max_concurrency, bool)
            or not isinstance(self.max_concurrency, int)
            or self.max_concurrency < 1
        ):
            raise ConfigurationError(
                f"KafkaTopic(max_concurrency=...) must be a whole number >= 1, "
                f"got {self.max_concurrency!r}"
            )
        if not isinstance(self.ordered, bool):
            raise ConfigurationError(
                f"KafkaTopic(ordered=...) must be True or False, got {self.ordered!r}"
            )
        if self.avro_schema is not None:
            if not isinstance(self.avro_schema, str | Path):
                raise ConfigurationError(
                    f"KafkaTopic(avro_schema=...) must be the path of an .avsc file, "
                    f"got {self.avro_schema!r}"
                )
            read_avro_schema(self.avro_schema)  # the file is read and parsed now, not at a record

    @property
    def dlq(self) -> str:
        """The dead-letter topic of the records that start no run: ``{topic}.dlq``."""
        return f"{self.name}.dlq"


def as_binding(topic: object) -> KafkaTopic | None:
    """``@workflow(topic=...)`` as a :class:`KafkaTopic`: a plain name binds with defaults."""
    if topic is None or isinstance(topic, KafkaTopic):
        return topic
    if isinstance(topic, str):
        return KafkaTopic(topic)
    raise ConfigurationError(
        f"@workflow(topic=...) takes a topic name or a KafkaTopic, got {type(topic).__name__}"
    )
