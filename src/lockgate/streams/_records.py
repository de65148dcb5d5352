"""A trigger topic's record made into an event and its key, or refused with the reason the
dead-letter topic records."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from lockgate.journal._events import payload_size
from lockgate.workflow._spec import WorkflowSpec

#: The reasons a record goes to the dead-letter topic (its ``lockgate.dlq.reason`` header).
NOT_JSON = "not-json"
NOT_AN_OBJECT = "not-an-object"
OVER_CAP = "over-cap"
NO_KEY = "no-key"


@dataclass(frozen=True)
class Event:
    """A record that is an event: its trigger key and the JSON object."""

    key: str
    event: dict[str, Any]


@dataclass(frozen=True)
class Refused:
    """A record that is not: why (one of the reasons above) and a line saying so."""

    reason: str
    detail: str


def _not_strict(constant: str) -> Any:
    raise ValueError(f"{constant} is not strict JSON")


def read_record(spec: WorkflowSpec, value: bytes | None, key: bytes | None) -> Event | Refused:
    """The event in a record's ``value`` (a UTF-8 JSON object) under its trigger key: the
    record's ``key`` when it has one, else what the workflow's trigger resolves from the
    event."""
    assert spec.trigger is not None
    try:
        event = json.loads(value or b"", parse_constant=_not_strict)
    except (UnicodeDecodeError, ValueError) as exc:
        return Refused(NOT_JSON, f"the value is not UTF-8 JSON: {exc}")
    if not isinstance(event, dict):
        return Refused(NOT_AN_OBJECT, f"the value is a JSON {type(event).__name__}, not an object")
    cap = spec.max_event_payload_bytes
    # The cap counts the event as compact ASCII JSON, which a valid JSON text at most triples
    # (a character of two UTF-8 bytes becomes a six-byte escape): only a value within a third of
    # the cap needs no measuring.
    if cap is not None and len(value or b"") * 3 > cap:
        size = payload_size(event)
        if size > cap:
            return Refused(
                OVER_CAP, f"the event is {size} bytes, over max_event_payload_bytes={cap}"
            )
    if key is not None:
        try:
            return Event(key.decode(), event)
        except UnicodeDecodeError:
            return Refused(NO_KEY, "the record key is not UTF-8")
    try:
        resolved = spec.trigger.resolve(event)
    except Exception as exc:  # a key function's own error: the record's fault, not ours
        return Refused(NO_KEY, f"no trigger key could be resolved from the event: {exc}")
    return Event(resolved, event)
