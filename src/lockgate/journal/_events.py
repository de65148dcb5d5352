"""The journal's vocabulary: events, their kinds, step kinds and run statuses."""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

EVENT_SCHEMA_VERSION = "1"

#: Header naming the fencing epoch of the claim that appended an event. Stores stamp it on every
#: fenced append; a reader folding a journal drops an event whose epoch is below one already seen.
EPOCH_HEADER = "lg-epoch"
#: Header listing, comma-separated, journal features a reader must understand to replay the run.
REQUIRES_HEADER = "lg-requires"
#: Header marking an event written by ``ctx.emit``.
EMIT_HEADER = "lg-emit"
#: Header of a named step's ``step:done`` and ``step:error``: the seconds that try of the step
#: took on the attempt's clock, as a decimal string. Shown, never replayed: a body does not see
#: it, and a journal without it (an older one) is as good.
STEP_SECONDS_HEADER = "lg-step-seconds"

#: Features this runtime understands when a journal names them in ``REQUIRES_HEADER``.
KNOWN_FEATURES: frozenset[str] = frozenset({"epochs"})


class EventKind(enum.StrEnum):
    """Core event kinds. The set is open: ``RunEvent.kind`` is a plain string and may hold a
    kind written by ``ctx.emit``. Compare by value; never match exhaustively."""

    RUN_INIT = "run:init"
    RUN_CANCEL = "run:cancel"
    RUN_PAUSE_REQUESTED = "run:pause_requested"
    RUN_PAUSED = "run:paused"
    RUN_UNPAUSED = "run:unpaused"
    RUN_REQUEUED = "run:requeued"
    RUN_COMPLETE = "run:complete"
    RUN_ERROR = "run:error"
    RUN_CONTINUED = "run:continued"
    RUN_SLEEPING = "run:sleeping"
    RUN_WOKEN = "run:woken"
    RUN_WAIT_TIMED_OUT = "run:wait_timed_out"
    RUN_SIGNAL_WAITING = "run:signal_waiting"
    RUN_SIGNAL_RECEIVED = "run:signal_received"
    #: ``ctx.interrupt`` parks on a question: its ``payload``, what it ``expects``, its
    #: ``wait_id`` and ``deadline``.
    RUN_INTERRUPTED = "run:interrupted"
    #: The answer to an interrupt (``client.resume``): its ``action`` and ``value``, or the
    #: ``error`` of an ``on_interrupt`` handler that could not answer it.
    RUN_RESUMED = "run:resumed"
    RUN_UPDATE_RECEIVED = "run:update_received"
    RUN_UPDATE_COMPLETED = "run:update_completed"
    RUN_UPDATE_FAILED = "run:update_failed"
    STEP_PENDING = "step:pending"
    STEP_DONE = "step:done"
    STEP_ERROR = "step:error"
    STREAM_OVERFLOW = "stream:overflow"


TERMINAL_KINDS: frozenset[str] = frozenset(
    {EventKind.RUN_COMPLETE, EventKind.RUN_ERROR, EventKind.RUN_CONTINUED}
)
#: Namespaces reserved for the engine: ``ctx.emit`` may not use them, and a kind inside them that
#: this runtime does not know means the journal was written by a newer one.
RESERVED_PREFIXES: tuple[str, ...] = ("run:", "step:", "stream:")


class StepKind(enum.StrEnum):
    """What a journaled call was. The set is open; compare by value."""

    NAMED = "named"
    DETERMINISTIC = "deterministic"
    SLEEP = "sleep"
    SIGNAL = "signal"
    EMIT = "emit"
    #: One poll of a stream by ``ctx.consume``: a batch handled, or an empty poll.
    STREAM = "stream"
    #: A child run started by ``ctx.run_child``: its submit and its outcome.
    CHILD = "child"
    #: Many children or steps started together and gathered (``ctx.fan_out``).
    FANOUT = "fanout"
    #: A question put to a person by ``ctx.interrupt`` and its answer.
    INTERRUPT = "interrupt"
    #: A signal sent to another run from a body (``ctx.signal``), sent once.
    SIGNAL_SEND = "signal_send"


class RunStatus(enum.StrEnum):
    """Where a run is in its life. The set is open; compare by value."""

    PENDING = "pending"
    IN_PROGRESS = "in_progress"
    COMPLETE = "complete"
    CANCELLED = "cancelled"
    TERMINATED = "terminated"
    ERROR = "error"
    #: Ended because it kept taking its workers down (see ``WorkerOptions.poison_max_retries``);
    #: ``lockgate runs retry`` releases it.
    QUARANTINED = "quarantined"
    #: Parked on ``ctx.interrupt`` until ``client.resume`` answers it.
    INTERRUPTED = "interrupted"
    PAUSED = "paused"
    SLEEPING = "sleeping"
    SIGNAL_WAITING = "signal_waiting"
    #: Ended by handing its work on to a successor run (``run:continued`` names it).
    CONTINUED = "continued"

    @property
    def is_terminal(self) -> bool:
        return self in _TERMINAL_STATUSES


_TERMINAL_STATUSES = frozenset(
    {
        RunStatus.COMPLETE,
        RunStatus.CANCELLED,
        RunStatus.TERMINATED,
        RunStatus.ERROR,
        RunStatus.CONTINUED,
        RunStatus.QUARANTINED,
    }
)


@dataclass(frozen=True, slots=True)
class RunEvent:
    """One fact in a run's journal.

    The field set is closed; ``headers`` is the extension point for string facts a later release
    adds (fencing epochs, required features). ``run_seq`` is assigned by the store on append and
    counts from 1 within the run.
    """

    kind: str
    payload: dict[str, Any]
    run_id: str
    schema_version: str = EVENT_SCHEMA_VERSION
    run_seq: int | None = None
    headers: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if type(self.kind) is not str:
            object.__setattr__(self, "kind", str(self.kind))

    @property
    def is_terminal(self) -> bool:
        return self.kind in TERMINAL_KINDS

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "payload": self.payload,
            "run_id": self.run_id,
            "schema_version": self.schema_version,
            "run_seq": self.run_seq,
            "headers": dict(self.headers),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunEvent:
        return cls(
            kind=str(data["kind"]),
            payload=dict(data.get("payload") or {}),
            run_id=str(data["run_id"]),
            schema_version=str(data.get("schema_version", EVENT_SCHEMA_VERSION)),
            run_seq=data.get("run_seq"),
            headers={str(k): str(v) for k, v in (data.get("headers") or {}).items()},
        )

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> RunEvent:
        return cls.from_dict(json.loads(text))

    def with_seq(self, run_seq: int, **headers: str) -> RunEvent:
        """This event as stored: numbered, with extra headers merged in."""
        merged = {**self.headers, **headers} if headers else dict(self.headers)
        return RunEvent(self.kind, self.payload, self.run_id, self.schema_version, run_seq, merged)


def error_status(payload: Mapping[str, Any]) -> RunStatus:
    """The status a ``run:error`` payload ends a run in."""
    code = payload.get("code")
    if code == "cancelled":
        return RunStatus.CANCELLED
    if code == "terminated":
        return RunStatus.TERMINATED
    if code == "quarantined":
        return RunStatus.QUARANTINED
    return RunStatus.ERROR


def terminal_status(event: RunEvent) -> RunStatus:
    """The status a terminal event ends a run in."""
    if event.kind == EventKind.RUN_ERROR:
        return error_status(event.payload)
    if event.kind == EventKind.RUN_CONTINUED:
        return RunStatus.CONTINUED
    return RunStatus.COMPLETE


def as_stored(payload: dict[str, Any]) -> dict[str, Any]:
    """``payload`` as a store that keeps JSON gives it back (``json.loads(json.dumps(...))``):
    a new copy, tuples as lists. Plain data (dicts with string keys, lists, tuples, strings,
    numbers, booleans, None) is copied directly, a few times faster; anything else goes
    through JSON."""
    try:
        copied: dict[str, Any] = _plain_copy(payload)
    except _NotPlain:
        copied = json.loads(json.dumps(payload, allow_nan=False, separators=(",", ":")))
    return copied


class _NotPlain(Exception):
    pass


def _plain_copy(value: Any) -> Any:
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return value
    if kind is float:
        if value != value or value in (float("inf"), float("-inf")):
            raise _NotPlain  # JSON refuses it; let json.dumps say so
        return value
    if kind is dict:
        copied = {}
        for key, item in value.items():
            if type(key) is not str:
                raise _NotPlain  # JSON turns the key into a string
            copied[key] = _plain_copy(item)
        return copied
    if kind is list or kind is tuple:
        return [_plain_copy(item) for item in value]
    raise _NotPlain


def payload_size(payload: Any) -> int:
    """Bytes of ``payload`` as compact JSON, the unit of ``max_event_payload_bytes``."""
    return len(json.dumps(payload, separators=(",", ":"), allow_nan=False).encode())
