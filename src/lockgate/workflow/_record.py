"""The record a bound workflow's body receives: :class:`KafkaRecord`, the place, key, timestamp
and headers of a record of a user's topic with its decoded value. ``streams/`` reads and decodes
records into it; a run carries its record's place and key in its metadata
(:meth:`KafkaRecord.to_metadata`, under :data:`RECORD_METADATA`), which ``ctx.record`` reads
back. :func:`read_avro_schema` reads a ``KafkaTopic(avro_schema=...)`` file, so a declaration
refuses a bad one at import and the stream decodes with the same parse.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Generic, TypeVar

from lockgate._errors import ConfigurationError

T = TypeVar("T")

#: The run metadata key a bound run's record is kept under.
RECORD_METADATA = "lockgate.record"


@dataclass(frozen=True)
class KafkaRecord(Generic[T]):
    """One record of a topic: where it was read, its key, its decoded value, its timestamp
    (None when the producer set none) and its headers. A key or header value that is not
    UTF-8 is kept with its undecodable bytes escaped (``\\xNN``); a header sent twice keeps
    its last value."""

    topic: str
    partition: int
    offset: int
    value: T
    key: str | None = None
    timestamp: datetime | None = None
    headers: Mapping[str, str] = field(default_factory=dict)

    def to_metadata(self) -> dict[str, Any]:
        """The record without its value, as JSON a run's metadata holds."""
        return {
            "topic": self.topic,
            "partition": self.partition,
            "offset": self.offset,
            "key": self.key,
            "timestamp_ms": None
            if self.timestamp is None
            else round(self.timestamp.timestamp() * 1000),
            "headers": dict(self.headers),
        }

    @classmethod
    def from_metadata(cls, meta: Mapping[str, Any], value: Any) -> KafkaRecord[Any]:
        """The record :meth:`to_metadata` described, with ``value``."""
        stamp = meta.get("timestamp_ms")
        return KafkaRecord(
            topic=str(meta["topic"]),
            partition=int(meta["partition"]),
            offset=int(meta["offset"]),
            value=value,
            key=meta.get("key"),
            timestamp=None if stamp is None else datetime.fromtimestamp(stamp / 1000, UTC),
            headers=dict(meta.get("headers") or {}),
        )


def read_avro_schema(schema_file: str | Path) -> Any:
    """The parsed Avro schema in ``schema_file``. Raises :class:`ConfigurationError` when the
    file is missing, is no Avro schema, or fastavro is not installed."""
    try:
        import fastavro
    except ImportError as exc:  # pragma: no cover - the extra is missing
        raise ConfigurationError(
            "Avro values need fastavro: pip install 'lockgate[kafka]'"
        ) from exc
    path = Path(schema_file)
    try:
        return fastavro.parse_schema(json.loads(path.read_text()))
    except OSError as exc:
        raise ConfigurationError(f"Avro schema file {str(path)!r} cannot be read: {exc}") from exc
    except (ValueError, TypeError, KeyError, fastavro.schema.SchemaParseException) as exc:
        raise ConfigurationError(f"{str(path)!r} is not an Avro schema: {exc}") from exc
