"""A journal event as one Kafka record: an Avro value (fastavro, against ``run_event.avsc``)
and the headers a reader filters and fences by without decoding the value.

The schema shipped here is a copy of ``schemas/run_event.avsc`` (a test keeps them equal), so
an installed package needs no checkout. The value is schemaless Avro (no container header):
the schema version travels in the ``lg-schema`` record header instead.
"""

from __future__ import annotations

import hashlib
import hmac
import io
import json
import os
from collections.abc import Mapping, Sequence
from functools import cache
from importlib import resources
from typing import Any

try:
    import fastavro
except ImportError:  # pragma: no cover - the extra is missing
    fastavro = None  # type: ignore[assignment]

from lockgate._errors import ConfigurationError, SchemaVersionMismatch
from lockgate.journal._events import EPOCH_HEADER, RunEvent

#: Record headers: the workflow, the run id, its ``run_seq``, the fencing epoch (when the event
#: has one) and the value's schema version.
WORKFLOW_HEADER = "lg-workflow"
RUN_ID_HEADER = "lg-run-id"
RUN_SEQ_HEADER = "lg-run-seq"
RECORD_EPOCH_HEADER = EPOCH_HEADER
SCHEMA_HEADER = "lg-schema"
#: With a journal key: HMAC-SHA256 (hex) over the record's key, value and its other ``lg-*``
#: headers (see :func:`record_mac`).
MAC_HEADER = "lg-mac"
#: The environment variable a journal key may come from when the journal URL names none.
JOURNAL_KEY_ENV = "LOCKGATE_JOURNAL_KEY"
#: The schema version's major this runtime writes and reads: the version of ``run_event.avsc``.
#: A record's version is its ``lg-schema`` header (``MAJOR`` or ``MAJOR.MINOR``); minors never
#: change the Avro fields (see ``schemas/README.md``).
WIRE_MAJOR = 1


def codec_available() -> bool:
    """Whether fastavro (the ``kafka`` extra) is installed."""
    return fastavro is not None


@cache
def schema() -> Any:
    """The parsed ``RunEvent`` Avro schema."""
    text = (resources.files("lockgate.stores.kafka") / "run_event.avsc").read_text()
    return fastavro.parse_schema(json.loads(text))


def encode(event: RunEvent) -> bytes:
    """The event's Avro value; ``payload`` as compact JSON, as every store keeps it.

    Written here rather than by fastavro's writer, which costs an append more than half its
    time in Python: the six fields of ``run_event.avsc`` in order, as Avro's binary encoding
    lays them out (a test checks the bytes against fastavro's for any event). A change to the
    schema must change this too; reading stays fastavro's."""
    payload = json.dumps(event.payload, separators=(",", ":"), sort_keys=True)
    parts = [_string(event.kind), _string(payload), _string(event.run_id)]
    parts.append(_string(event.schema_version))
    parts.append(_NULL if event.run_seq is None else _LONG_BRANCH + _long(event.run_seq))
    headers = event.headers
    if headers:  # a map: one block of its pairs, then the empty block that ends it
        parts.append(_long(len(headers)))
        for key, value in headers.items():
            parts.append(_string(key))
            parts.append(_string(value))
    parts.append(_NULL)
    return b"".join(parts)


#: Union branch 0 (``null``), and the empty block that ends a map: the long 0.
_NULL = b"\x00"
#: Union branch 1 (``long``) of ``run_seq``.
_LONG_BRANCH = b"\x02"
#: The zig-zag varints of 0..63 (each one byte): most strings' lengths.
_SHORT = [bytes((n << 1,)) for n in range(64)]


def _long(n: int) -> bytes:
    """An Avro ``long``: zig-zag, then a little-endian base-128 varint."""
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _string(text: str) -> bytes:
    """An Avro ``string``: its UTF-8 length as a long, then the bytes."""
    data = text.encode()
    size = len(data)
    return (_SHORT[size] if size < 64 else _long(size)) + data


class NotARunEvent(ValueError):
    """A value that is not an Avro ``RunEvent`` (a reader says where it found it)."""


def decode(value: bytes, schema_version: str | None = None) -> RunEvent:
    """The event an Avro value holds, written with ``schema_version`` (its ``lg-schema``
    header; this runtime's when not given). :class:`NotARunEvent` when it holds none (the
    topic holds something lockgate did not write); :class:`SchemaVersionMismatch` when it was
    written with a newer major, read by no guess."""
    if schema_version is not None:
        check_schema_version(schema_version)
    try:
        record: Any = fastavro.schemaless_reader(io.BytesIO(value), schema(), None)
        payload = json.loads(record["payload"])
    except (EOFError, ValueError, TypeError, KeyError, IndexError) as exc:
        raise NotARunEvent(f"{type(exc).__name__}: {exc}") from exc
    return RunEvent(
        kind=record["kind"],
        payload=payload,
        run_id=record["run_id"],
        schema_version=record["schema_version"],
        run_seq=record["run_seq"],
        headers=dict(record["headers"]),
    )


def check_schema_version(version: str) -> None:
    """Refuse a record written with ``version`` (its ``lg-schema`` header) unless this runtime
    reads it: :class:`SchemaVersionMismatch` for another major, :class:`NotARunEvent` for a
    header that is no version."""
    if _major(version) != WIRE_MAJOR:
        raise SchemaVersionMismatch(
            f"a journal record was written with schema version {version}; this lockgate "
            f"reads version {WIRE_MAJOR}: upgrade lockgate to read it",
            missing=[f"schema_version {version}"],
        )


def _major(version: str) -> int:
    try:
        return int(version.split(".", 1)[0])
    except ValueError:
        raise NotARunEvent(
            f"its {SCHEMA_HEADER} header is not a schema version: {version!r}"
        ) from None


def record_headers(name: str, event: RunEvent) -> list[tuple[str, str | bytes | None]]:
    """The headers of the event's record."""
    headers: list[tuple[str, str | bytes | None]] = [
        (WORKFLOW_HEADER, name.encode()),
        (RUN_ID_HEADER, event.run_id.encode()),
        (RUN_SEQ_HEADER, str(event.run_seq).encode()),
        (SCHEMA_HEADER, event.schema_version.encode()),
    ]
    epoch = event.headers.get(EPOCH_HEADER)
    if epoch is not None:
        headers.append((RECORD_EPOCH_HEADER, epoch.encode()))
    return headers


def header_map(
    headers: Mapping[str, str | bytes | None] | Sequence[tuple[str, str | bytes | None]] | None,
) -> Mapping[str, str]:
    """A record's headers as text (the last value of a repeated header wins). Bytes that are
    not UTF-8 are read with U+FFFD in their place: anyone may add headers to a record (a binary
    ``traceparent``), and one such header must not stop a read. Whether lockgate's own are
    UTF-8 is :func:`undecodable_header`'s to say."""
    pairs = headers.items() if isinstance(headers, Mapping) else headers or ()
    return {
        k: v if isinstance(v, str) else v.decode(errors="replace")
        for k, v in pairs
        if v is not None
    }


def undecodable_header(
    headers: Mapping[str, str | bytes | None] | Sequence[tuple[str, str | bytes | None]] | None,
) -> str | None:
    """The name of the first ``lg-*`` header whose value is not UTF-8, or None: lockgate
    writes its own as text, so a record with one that is not was not written by it."""
    pairs = headers.items() if isinstance(headers, Mapping) else headers or ()
    for name, raw in pairs:
        if name.startswith("lg-") and isinstance(raw, bytes):
            try:
                raw.decode()
            except UnicodeDecodeError:
                return name
    return None


def record_mac(
    secret: bytes,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[tuple[str, str | bytes | None]] | None,
) -> str:
    """The ``lg-mac`` of a record: HMAC-SHA256 under ``secret`` over its key, its value and
    its ``lg-*`` headers but ``lg-mac`` (name and value, sorted by name, repeats in record
    order), each part preceded by its length (a missing key, value or header value is length
    -1), so no two records share an input."""
    mac = hmac.new(secret, digestmod=hashlib.sha256)

    def part(data: bytes | None) -> None:
        mac.update((-1 if data is None else len(data)).to_bytes(8, "big", signed=True))
        if data is not None:
            mac.update(data)

    part(key)
    part(value)
    # Sorted by name alone, a stable sort: repeated headers keep the order they have in the
    # record, so writer and reader agree, and a null value (length -1) is never compared.
    own = sorted(
        (
            (name, raw if isinstance(raw, bytes) else raw.encode() if raw is not None else None)
            for name, raw in headers or ()
            if name.startswith("lg-") and name != MAC_HEADER
        ),
        key=lambda pair: pair[0],
    )
    for name, raw in own:
        part(name.encode())
        part(raw)
    return mac.hexdigest()


def mac_problem(secret: bytes, msg: Any) -> str | None:
    """Why a consumed message's ``lg-mac`` does not verify under ``secret``, or None when it
    does."""
    headers = msg.headers() or []
    given = [raw for name, raw in headers if name == MAC_HEADER]
    if not given:
        return "it has no lg-mac header, and a journal key is set"
    raw = given[-1]
    text = raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)
    if not hmac.compare_digest(text, record_mac(secret, msg.key(), msg.value(), headers)):
        return "its lg-mac does not verify under the journal key"
    return None


def journal_secret(journal_key: str | None) -> bytes | None:
    """The journal key's bytes: ``journal_key`` when given, else ``LOCKGATE_JOURNAL_KEY``
    when set and not empty, else None (records are neither signed nor checked). A key given
    but empty, or shorter than 16 characters, is refused: it would sign nothing worth the
    name."""
    text = journal_key if journal_key is not None else os.environ.get(JOURNAL_KEY_ENV) or None
    if text is None:
        return None
    if len(text) < 16:
        where = "journal_key" if journal_key is not None else JOURNAL_KEY_ENV
        raise ConfigurationError(
            f"{where} must be at least 16 characters (a random secret, e.g. 32 hex digits)"
        )
    return text.encode()
