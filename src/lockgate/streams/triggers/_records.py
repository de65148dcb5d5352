"""A trigger topic's record made into an event and its key, or refused with the reason the
dead-letter topic records."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from lockgate._errors import one_line
from lockgate.journal._events import payload_size
from lockgate.streams._values import carried_problem
from lockgate.workflow._spec import WorkflowSpec

#: The reasons a record goes to the dead-letter topic (its ``lockgate.dlq.reason`` header).
NOT_JSON = "not-json"
NOT_AN_OBJECT = "not-an-object"
OVER_CAP = "over-cap"
NO_KEY = "no-key"
#: A batch the store refused to fire for good (not for being away): its events, as JSON.
UNFIREABLE = "unfireable"
#: Reading the record failed otherwise than for the reasons above (a bug, not the record's
#: fault alone): it is set aside all the same.
UNREADABLE = "unreadable"


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


def _finite(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise ValueError(f"{text} is out of a double's range")
    return number


#: The strict reader of every record (one, not one per record: ``json.loads`` with options
#: makes a decoder on each call).
_STRICT = json.JSONDecoder(parse_constant=_not_strict, parse_float=_finite)

#: A value's bytes, times this, bound its size as compact ASCII JSON: a character of two UTF-8
#: bytes becomes a six-byte escape, and a number such as ``1e15`` is written out in full
#: (``1000000000000000.0``). Only a value within this fraction of the cap needs no measuring.
GROWTH = 6


def read_record(spec: WorkflowSpec, value: bytes | None, key: bytes | None) -> Event | Refused:
    """The event in a record's ``value`` (a UTF-8 JSON object, strict: no NaN, no infinities,
    no lone surrogates, no nesting past ``MAX_DEPTH``) under its trigger key: the record's
    ``key`` when it has one, else what the workflow's trigger resolves from the event, which
    must be there (a missing or null field is no key)."""
    assert spec.trigger is not None
    raw = value or b""
    try:
        event = _STRICT.decode(raw.decode())
    except (UnicodeError, ValueError, RecursionError) as exc:
        return Refused(NOT_JSON, f"the value is not strict UTF-8 JSON: {one_line(exc)}")
    problem = carried_problem(raw, event)  # a lone surrogate, or nesting past MAX_DEPTH
    if problem is not None:
        return Refused(NOT_JSON, problem)
    if not isinstance(event, dict):
        return Refused(NOT_AN_OBJECT, f"the value is a JSON {type(event).__name__}, not an object")
    cap = spec.max_event_payload_bytes
    if cap is not None and len(raw) * GROWTH > cap:
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
    declared = spec.trigger.key
    if isinstance(declared, str) and event.get(declared) is None:
        return Refused(NO_KEY, f"the event has no {declared!r} and the record no key")
    try:
        resolved = spec.trigger.resolve(event)
        resolved.encode()
    except Exception as exc:  # a key function's own error: the record's fault, not ours
        return Refused(NO_KEY, f"no trigger key could be resolved from the event: {one_line(exc)}")
    return Event(resolved, event)
