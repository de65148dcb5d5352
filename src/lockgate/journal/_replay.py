"""Folding a journal into the state a replaying attempt needs."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from lockgate._errors import JournalNeedsNewerRuntime, SchemaVersionMismatch
from lockgate.journal._events import (
    EPOCH_HEADER,
    EVENT_SCHEMA_VERSION,
    KNOWN_FEATURES,
    REQUIRES_HEADER,
    RESERVED_PREFIXES,
    EventKind,
    RunEvent,
    StepKind,
)
from lockgate.journal._members import WAITS_ON_RUNS, fold_members

_KNOWN_KINDS = frozenset(kind.value for kind in EventKind)
_KNOWN_STEP_KINDS = frozenset(kind.value for kind in StepKind)
_SCHEMA_MAJOR = int(EVENT_SCHEMA_VERSION.split(".")[0])


@dataclass
class CallRecord:
    """What the journal says about one durable call, identified by its call position.

    A wait (a sleep, a signal wait, an interrupt) has a ``wait_id`` and ends with an
    ``outcome``: ``woken``, ``received`` (``payload`` is the signal's), ``timed_out``, and for
    an interrupt ``resumed`` (``result`` holds the answer's ``action`` and ``value``) or
    ``failed`` (``result`` is the error of the handler that could not answer). An interrupt's
    ``payload`` is its question."""

    call_index: int
    kind: str
    name: str
    pending: bool = False
    done: bool = False
    result: Any = None
    errors: list[dict[str, Any]] = field(default_factory=list)
    failed: bool = False
    last_attempt: int = 0
    wait_id: str | None = None
    due_at: float | None = None
    outcome: str | None = None
    payload: Any = None
    signal_id: str | None = None
    #: The runs (or steps) a child or fan-out call started, by member index: what its
    #: ``members`` facts say of each (see ``journal/_members.py``).
    members: dict[int, dict[str, Any]] = field(default_factory=dict)

    @property
    def fingerprint(self) -> str:
        return f"{self.kind} {self.name!r}"


def is_final(record: CallRecord | None) -> bool:
    """Whether the journal holds the call's outcome: done, failed for good, or ended (a
    wait's outcome); an attempt replays it without running it, a retry carries it over."""
    return record is not None and (record.done or record.failed or record.outcome is not None)


@dataclass
class ReplayState:
    """A run's journal, folded: what every durable call returned, which waits are open, which
    updates were applied where, and whether the run has ended."""

    run_id: str = ""
    name: str = ""
    init: dict[str, Any] = field(default_factory=dict)
    calls: dict[int, CallRecord] = field(default_factory=dict)
    updates_by_frontier: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    journaled_update_ids: set[str] = field(default_factory=set)
    journaled_update_outcomes: dict[str, dict[str, Any]] = field(default_factory=dict)
    journaled_signal_ids: set[str] = field(default_factory=set)
    terminal: RunEvent | None = None
    paused_wait: str | None = None
    event_count: int = 0
    last_seq: int = 0
    highest_epoch: int = 0
    dropped_stale: int = 0

    @property
    def params(self) -> dict[str, Any]:
        params = self.init.get("params")
        return dict(params) if isinstance(params, dict) else {}

    @property
    def version(self) -> str:
        return str(self.init.get("version", ""))


def check_journal_readable(
    events: Iterable[RunEvent],
    *,
    extra_kinds: Iterable[str] = (),
    extra_features: Iterable[str] = (),
) -> None:
    """Raise before anything is folded if the journal holds a fact this runtime cannot read:
    a newer schema major, an engine event or step kind it does not know, a required feature."""
    kinds = _KNOWN_KINDS | frozenset(extra_kinds)
    features = KNOWN_FEATURES | frozenset(extra_features)
    missing: list[str] = []
    newer_schema = False
    for event in events:
        try:
            major = int(str(event.schema_version).split(".")[0])
        except ValueError:
            major = _SCHEMA_MAJOR + 1
        if major > _SCHEMA_MAJOR:
            newer_schema = True
            _note(missing, f"schema_version {event.schema_version}")
        if event.kind.startswith(RESERVED_PREFIXES) and event.kind not in kinds:
            _note(missing, f"event kind {event.kind}")
        if event.kind.startswith("step:"):
            step_kind = event.payload.get("kind")
            if step_kind is not None and step_kind not in _KNOWN_STEP_KINDS:
                _note(missing, f"step kind {step_kind}")
        for feature in filter(None, event.headers.get(REQUIRES_HEADER, "").split(",")):
            if feature.strip() not in features:
                _note(missing, f"feature {feature.strip()}")
    if missing:
        if newer_schema and all(m.startswith("schema_version") for m in missing):
            raise SchemaVersionMismatch(missing=missing)
        raise JournalNeedsNewerRuntime(missing=missing)


def _note(missing: list[str], fact: str) -> None:
    if fact not in missing:
        missing.append(fact)


def reconstruct_state(
    events: list[RunEvent],
    *,
    state: ReplayState | None = None,
    extra_kinds: Iterable[str] = (),
    extra_features: Iterable[str] = (),
) -> ReplayState:
    """Fold ``events`` (oldest first) into a :class:`ReplayState`.

    Raises :class:`JournalNeedsNewerRuntime` (or its subclass :class:`SchemaVersionMismatch`)
    before folding anything when the journal holds facts this runtime cannot read. Folding drops
    an event stamped with a fencing epoch below the highest epoch already seen, and stops at the
    first terminal event, so a journal is read the same way whichever store kept it.
    """
    check_journal_readable(events, extra_kinds=extra_kinds, extra_features=extra_features)
    state = state if state is not None else ReplayState()
    for event in events:
        if state.terminal is not None:
            break
        epoch = _epoch(event)
        if epoch is not None:
            if epoch < state.highest_epoch:
                state.dropped_stale += 1
                continue
            state.highest_epoch = epoch
        state.event_count += 1
        if event.run_seq is not None:
            state.last_seq = max(state.last_seq, event.run_seq)
        _fold(state, event)
    return state


def _epoch(event: RunEvent) -> int | None:
    raw = event.headers.get(EPOCH_HEADER)
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        return None


def _call(state: ReplayState, payload: dict[str, Any], kind: str, name: str) -> CallRecord:
    index = int(payload["call_index"])
    record = state.calls.get(index)
    if record is None:
        record = CallRecord(call_index=index, kind=kind, name=name)
        state.calls[index] = record
    return record


def _fold(state: ReplayState, event: RunEvent) -> None:
    kind, payload = event.kind, event.payload
    if kind == EventKind.RUN_INIT:
        state.init = dict(payload)
        state.run_id = event.run_id
        state.name = str(payload.get("name", ""))
    elif kind in (EventKind.STEP_PENDING, EventKind.STEP_DONE, EventKind.STEP_ERROR):
        record = _call(
            state,
            payload,
            str(payload.get("kind", StepKind.NAMED)),
            str(payload.get("step_id", "")),
        )
        record.last_attempt = max(record.last_attempt, int(payload.get("attempt") or 0))
        if "members" in payload:
            fold_members(record, kind, payload["members"])
        elif kind == EventKind.STEP_PENDING:
            record.pending = True
        elif kind == EventKind.STEP_DONE:
            record.done, record.result = True, payload.get("result")
        else:
            record.errors.append(dict(payload.get("error") or {}))
            record.failed = record.failed or bool(payload.get("final"))
    elif kind == EventKind.RUN_SLEEPING:
        record = _call(state, payload, StepKind.SLEEP, str(payload.get("name", "sleep")))
        record.wait_id, record.due_at = str(payload["wait_id"]), float(payload["wake_at"])
    elif kind == EventKind.RUN_SIGNAL_WAITING:
        record = _call(state, payload, StepKind.SIGNAL, str(payload["signal"]))
        record.wait_id = str(payload["wait_id"])
        deadline = payload.get("deadline")
        record.due_at = float(deadline) if deadline is not None else None
    elif kind == EventKind.RUN_INTERRUPTED:
        record = _call(state, payload, StepKind.INTERRUPT, "interrupt")
        record.wait_id, record.payload = str(payload["wait_id"]), payload.get("payload")
        deadline = payload.get("deadline")
        record.due_at = float(deadline) if deadline is not None else None
    elif kind == EventKind.RUN_RESUMED:
        record = _call(state, payload, StepKind.INTERRUPT, "interrupt")
        if record.outcome is None:
            error = payload.get("error")
            if isinstance(error, dict):
                record.outcome, record.result = "failed", dict(error)
            else:
                answer = {"action": payload.get("action"), "value": payload.get("value")}
                record.outcome, record.result = "resumed", answer
            record.signal_id = str(payload.get("signal_id"))
    elif kind in (EventKind.RUN_WOKEN, EventKind.RUN_WAIT_TIMED_OUT):
        ended = state.calls.get(int(payload["call_index"]))
        # A child or fan-out wait's timer is only its backstop: the call goes on waiting.
        if ended is not None and ended.outcome is None and ended.kind not in WAITS_ON_RUNS:
            ended.outcome = "woken" if kind == EventKind.RUN_WOKEN else "timed_out"
    elif kind == EventKind.RUN_SIGNAL_RECEIVED:
        record = _call(state, payload, StepKind.SIGNAL, str(payload["signal"]))
        if record.outcome is None:
            record.outcome, record.payload = "received", payload.get("payload")
            record.signal_id = str(payload.get("signal_id"))
        state.journaled_signal_ids.add(str(payload.get("signal_id")))
    elif kind == EventKind.RUN_UPDATE_RECEIVED:
        update_id = str(payload["update_id"])
        if update_id not in state.journaled_update_ids:
            state.journaled_update_ids.add(update_id)
            state.updates_by_frontier.setdefault(int(payload["frontier"]), []).append(dict(payload))
    elif kind in (EventKind.RUN_UPDATE_COMPLETED, EventKind.RUN_UPDATE_FAILED):
        state.journaled_update_outcomes[str(payload["update_id"])] = dict(payload)
    elif kind == EventKind.RUN_PAUSED:
        state.paused_wait = str(payload.get("wait_id", ""))
    elif kind == EventKind.RUN_UNPAUSED:
        state.paused_wait = None
    elif event.headers.get("lg-emit") and "call_index" in payload:
        record = _call(state, payload, StepKind.EMIT, kind)
        record.done = True
    elif event.is_terminal:
        state.terminal = event
