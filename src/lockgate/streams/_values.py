"""Records of a user's topic as lockgate hands them on: :class:`KafkaRecord`, its value decoded
as JSON (the default) or as Avro against a schema file, and :class:`Undecodable` for a record
whose value is neither (the caller sends it to the dead-letter topic).

A bound workflow's run carries its record's place and key in its metadata
(:meth:`KafkaRecord.to_metadata`), and :class:`~lockgate.streams.sources.KafkaSource` hands
these records to a stream's batches.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Generic, TypeVar

from lockgate._errors import ConfigurationError

T = TypeVar("T")

#: The run metadata key a bound run's record is kept under.
RECORD_METADATA = "lockgate.record"

#: Why a record was not decoded: the ``lockgate.dlq.reason`` header of its dead-letter copy.
NOT_JSON = "not-json"
NOT_AVRO = "not-avro"
NO_VALUE = "no-value"

Decoder = Callable[[bytes | None], Any]


class Undecodable(Exception):
    """A record's value could not be decoded: ``reason`` names why (a dead-letter reason),
    ``detail`` says what the decoder found."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


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


def text_of(raw: bytes | str | None) -> str | None:
    if raw is None or isinstance(raw, str):
        return raw
    return raw.decode("utf-8", errors="backslashreplace")


def record_of(message: Any, decode: Decoder) -> KafkaRecord[Any]:
    """A consumed confluent-kafka message as a :class:`KafkaRecord`, its value decoded by
    ``decode``. Raises :class:`Undecodable` for a value ``decode`` refuses."""
    kind, stamp = message.timestamp()
    offset = message.offset()
    partition = message.partition()
    assert offset is not None  # a record always has both
    assert partition is not None
    return KafkaRecord(
        topic=message.topic(),
        partition=partition,
        offset=offset,
        value=decode(message.value()),
        key=text_of(message.key()),
        # 0: TIMESTAMP_NOT_AVAILABLE
        timestamp=None if kind == 0 or stamp < 0 else datetime.fromtimestamp(stamp / 1000, UTC),
        headers={k: text_of(v) or "" for k, v in (message.headers() or [])},
    )


def decode_json(raw: bytes | None) -> Any:
    """A value read as strict UTF-8 JSON (no NaN, no infinities)."""
    if raw is None:
        raise Undecodable(NO_VALUE, "the record has no value (a tombstone)")
    try:
        return json.loads(raw, parse_constant=_refuse_constant)
    except (ValueError, UnicodeDecodeError) as exc:
        raise Undecodable(NOT_JSON, str(exc)) from exc


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def avro_decoder(schema_file: str | Path) -> Decoder:
    """A decoder of values written as Avro binary (no container, no schema registry framing)
    with the schema in ``schema_file``. Raises :class:`ConfigurationError` when the file is
    missing, is no Avro schema, or fastavro is not installed."""
    try:
        import fastavro
    except ImportError as exc:  # pragma: no cover - the extra is missing
        raise ConfigurationError(
            "Avro values need fastavro: pip install 'lockgate[kafka]'"
        ) from exc
    path = Path(schema_file)
    try:
        schema = fastavro.parse_schema(json.loads(path.read_text()))
    except OSError as exc:
        raise ConfigurationError(f"Avro schema file {str(path)!r} cannot be read: {exc}") from exc
    except (ValueError, TypeError, KeyError, fastavro.schema.SchemaParseException) as exc:
        raise ConfigurationError(f"{str(path)!r} is not an Avro schema: {exc}") from exc

    def decode(raw: bytes | None) -> Any:
        if raw is None:
            raise Undecodable(NO_VALUE, "the record has no value (a tombstone)")
        buffer = io.BytesIO(raw)
        try:
            value = fastavro.schemaless_reader(buffer, schema, None)
        except Exception as exc:  # fastavro raises what the bytes lead it to
            raise Undecodable(NOT_AVRO, f"{type(exc).__name__}: {exc}") from exc
        if buffer.tell() != len(raw):
            raise Undecodable(
                NOT_AVRO, f"{len(raw) - buffer.tell()} bytes left after the value: another schema?"
            )
        return value

    return decode


def decoder_for(avro_schema: str | Path | None) -> Decoder:
    """JSON values, or Avro ones read with ``avro_schema``."""
    return decode_json if avro_schema is None else avro_decoder(avro_schema)
