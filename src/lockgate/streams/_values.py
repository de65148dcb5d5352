"""Records of a user's topic as lockgate hands them on: a :class:`KafkaRecord` (defined in
``workflow/_record.py``, since bodies receive it) with its value decoded as JSON (the default)
or as Avro against a schema file, and :class:`Undecodable` for a record whose value is neither
(the caller sends it to the dead-letter topic). A JSON value must also be one lockgate can
carry on: no lone surrogate (UTF-8 has none), no nesting deeper than :data:`MAX_DEPTH` (each
later step, a params check, the store's encoding, the journal's, recurses through it).

:class:`~lockgate.streams.sources.KafkaSource` hands these records to a stream's batches.
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from lockgate.workflow._record import KafkaRecord, read_avro_schema

T = TypeVar("T")

#: Why a record was not decoded: the ``lockgate.dlq.reason`` header of its dead-letter copy.
NOT_JSON = "not-json"
NOT_AVRO = "not-avro"
NO_VALUE = "no-value"

#: How deeply a JSON value may nest its arrays and objects: ``[]`` is one level, ``[[]]`` two.
MAX_DEPTH = 256

Decoder = Callable[[bytes | None], Any]


class Undecodable(Exception):
    """A record's value could not be decoded: ``reason`` names why (a dead-letter reason),
    ``detail`` says what the decoder found."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


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
        timestamp=None if kind == 0 else timestamp_of(stamp),
        headers={text_of(k) or "": text_of(v) or "" for k, v in (message.headers() or [])},
    )


def timestamp_of(stamp_ms: int) -> datetime | None:
    """A record's timestamp (milliseconds since the epoch) as a datetime; None when it is
    negative or past what a datetime holds (a producer may set any 64-bit number)."""
    if stamp_ms < 0:
        return None
    try:
        return datetime.fromtimestamp(stamp_ms / 1000, UTC)
    except (OverflowError, ValueError, OSError):
        return None


def decode_json(raw: bytes | None) -> Any:
    """A value read as strict UTF-8 JSON (no NaN, no infinities, no number out of a double's
    range) that lockgate can carry on (see :func:`carried_problem`)."""
    if raw is None:
        raise Undecodable(NO_VALUE, "the record has no value (a tombstone)")
    try:
        value = _STRICT.decode(raw.decode())
    except (ValueError, UnicodeDecodeError) as exc:
        raise Undecodable(NOT_JSON, str(exc)) from exc
    except RecursionError as exc:  # nested past what the parser's stack holds
        raise Undecodable(NOT_JSON, f"the value nests too deeply to decode: {exc}") from exc
    problem = carried_problem(raw, value)
    if problem is not None:
        raise Undecodable(NOT_JSON, problem)
    return value


def carried_problem(raw: bytes, value: Any) -> str | None:
    """Why ``value``, decoded from the JSON ``raw``, cannot be carried on (None: it can): it
    nests deeper than MAX_DEPTH, or it holds a lone surrogate (an escape such as
    ``"\\ud800"``, which ``json`` decodes, but which no UTF-8 encoder, the store's or the
    journal's, takes)."""
    # Only a value with that many brackets can nest that deep, and only one with an escape
    # can hold a surrogate: most values are never walked.
    if raw.count(b"[") + raw.count(b"{") > MAX_DEPTH:
        depth = nesting(value, MAX_DEPTH)
        if depth > MAX_DEPTH:
            return f"the value nests deeper than {MAX_DEPTH} levels of arrays and objects"
    if b"\\u" in raw:
        try:
            json.dumps(value, ensure_ascii=False).encode()
        except UnicodeEncodeError as exc:
            found = ascii(exc.object[exc.start])
            return f"the value holds a lone surrogate escape ({found}), which UTF-8 cannot carry"
    return None


def nesting(value: Any, most: int) -> int:
    """How deeply ``value`` nests lists and dicts (0 for a scalar), counted without
    recursion; the count stops once it is past ``most``."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, depth)
        if deepest > most:
            return deepest
        stack.extend((child, depth + 1) for child in children)
    return deepest


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise ValueError(f"{text} is out of a double's range")
    return number


#: The strict reader of every value (one: ``json.loads`` with options makes one per call).
_STRICT = json.JSONDecoder(parse_constant=_refuse_constant, parse_float=_finite)


def avro_decoder(schema_file: str | Path) -> Decoder:
    """A decoder of values written as Avro binary (no container, no schema registry framing)
    with the schema in ``schema_file``. Raises :class:`ConfigurationError` when the file is
    missing, is no Avro schema, or fastavro is not installed."""
    schema = read_avro_schema(schema_file)
    import fastavro  # read_avro_schema found it installed

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
