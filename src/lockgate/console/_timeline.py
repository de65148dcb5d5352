"""A run's journal as the run page's timeline: one entry per event, grouped by call.

The journal records what happened and in which order: the times shown are those the events
hold (a sleep's wake time, a wait's deadline, how long each try of a named step took, from its
``lg-step-seconds`` header), and the run's own duration comes from the store (submitted to
ended)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from lockgate.journal._events import STEP_SECONDS_HEADER, EventKind, RunEvent

#: Characters of a payload a timeline entry shows; the rest is cut with a note.
DETAIL_CHARS = 600


@dataclass
class Entry:
    seq: int | None
    kind: str
    title: str
    detail: str
    tone: str = ""


@dataclass
class Group:
    """Consecutive entries of one call (its ``call_index``), or one entry with none."""

    call_index: int | None
    entries: list[Entry] = field(default_factory=list)

    @property
    def summary(self) -> str:
        first = self.entries[0]
        if self.call_index is None:
            return first.title
        attempts = sum(1 for e in self.entries if e.kind == EventKind.STEP_PENDING)
        errors = sum(1 for e in self.entries if e.kind == EventKind.STEP_ERROR)
        said = f"call {self.call_index}: {first.title}"
        if attempts > 1 or errors:
            said += f" ({attempts or errors} attempt(s), {errors} error(s))"
        return said


def when(epoch: Any) -> str:
    """Epoch seconds as UTC ISO 8601 to the second; '' for no time."""
    if not isinstance(epoch, int | float) or isinstance(epoch, bool):
        return ""
    return datetime.fromtimestamp(float(epoch), UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def span(seconds: float | None) -> str:
    if seconds is None:
        return ""
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def shown(value: Any, most: int = DETAIL_CHARS) -> str:
    """``value`` as compact JSON text, cut at ``most`` characters."""
    try:
        text = json.dumps(value, sort_keys=True, default=str, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    if len(text) > most:
        return text[:most] + f"… ({len(text) - most} more characters)"
    return text


def error_text(error: Any) -> str:
    if isinstance(error, dict):
        kind = error.get("type") or error.get("code") or "error"
        message = error.get("message") or error.get("detail") or ""
        return f"{kind}: {message}" if message else str(kind)
    return shown(error)


def _step(event: RunEvent) -> str:
    p = event.payload
    return f"{p.get('kind', 'step')} {p.get('step_id', '?')}"


def took(event: RunEvent) -> str:
    """``" in 12 ms"`` for a try of a step whose event says how long it took, else ''."""
    raw = event.headers.get(STEP_SECONDS_HEADER)
    try:
        seconds = float(raw) if raw is not None else None
    except ValueError:
        return ""
    return f" in {span(seconds)}" if seconds is not None and seconds >= 0 else ""


def entry_of(event: RunEvent) -> Entry:
    """What one event says, in a line and a detail."""
    p = event.payload
    kind = event.kind
    seq = event.run_seq
    if kind == EventKind.RUN_INIT:
        return Entry(seq, kind, "submitted", f"params {shown(p.get('params'))}")
    if kind == EventKind.STEP_PENDING:
        return Entry(seq, kind, f"{_step(event)} started", f"attempt {p.get('attempt', 1)}")
    if kind == EventKind.STEP_DONE:
        attempt = f"attempt {p['attempt']}, " if "attempt" in p else ""
        result = f"{attempt}result {shown(p.get('result'))}"
        return Entry(seq, kind, f"{_step(event)} done{took(event)}", result)
    if kind == EventKind.STEP_ERROR:
        final = "gave up" if p.get("final") else "will retry"
        return Entry(
            seq,
            kind,
            f"{_step(event)} failed{took(event)} ({final})",
            f"attempt {p.get('attempt', '?')}: {error_text(p.get('error'))}",
            "bad",
        )
    if kind == EventKind.RUN_SLEEPING:
        return Entry(seq, kind, "sleeping", f"until {when(p.get('wake_at'))}")
    if kind == EventKind.RUN_WOKEN:
        return Entry(seq, kind, "woke", shown(p.get("wait_id")))
    if kind == EventKind.RUN_SIGNAL_WAITING:
        deadline = when(p.get("deadline"))
        detail = f"for signal {p.get('signal')!s}" + (f", until {deadline}" if deadline else "")
        return Entry(seq, kind, "waiting for a signal", detail)
    if kind == EventKind.RUN_SIGNAL_RECEIVED:
        return Entry(
            seq, kind, f"signal {p.get('signal')!s} received", f"payload {shown(p.get('payload'))}"
        )
    if kind == EventKind.RUN_WAIT_TIMED_OUT:
        return Entry(seq, kind, "wait timed out", shown(p.get("wait_id")), "warn")
    if kind == EventKind.RUN_INTERRUPTED:
        return Entry(seq, kind, "interrupted: asks a question", shown(p.get("payload")), "warn")
    if kind == EventKind.RUN_RESUMED:
        if "error" in p:
            return Entry(seq, kind, "answer failed", error_text(p.get("error")), "bad")
        return Entry(seq, kind, f"answered: {p.get('action')!s}", shown(p.get("value")))
    if kind == EventKind.RUN_UPDATE_RECEIVED:
        return Entry(seq, kind, f"update {p.get('update', p.get('name', ''))!s} received", shown(p))
    if kind == EventKind.RUN_UPDATE_COMPLETED:
        return Entry(seq, kind, "update applied", shown(p.get("result", p)))
    if kind == EventKind.RUN_UPDATE_FAILED:
        return Entry(seq, kind, "update failed", error_text(p.get("error", p)), "bad")
    if kind == EventKind.RUN_CANCEL:
        return Entry(seq, kind, "cancel requested", shown(p.get("detail") or p), "warn")
    if kind in (EventKind.RUN_PAUSE_REQUESTED, EventKind.RUN_PAUSED, EventKind.RUN_UNPAUSED):
        title = {
            EventKind.RUN_PAUSE_REQUESTED: "pause requested",
            EventKind.RUN_PAUSED: "paused",
            EventKind.RUN_UNPAUSED: "unpaused",
        }[EventKind(kind)]
        return Entry(seq, kind, title, shown(p), "warn")
    if kind == EventKind.RUN_REQUEUED:
        return Entry(seq, kind, "requeued", shown(p))
    if kind == EventKind.RUN_COMPLETE:
        return Entry(seq, kind, "complete", f"result {shown(p.get('result'))}", "good")
    if kind == EventKind.RUN_ERROR:
        return Entry(
            seq, kind, f"ended: {p.get('code', 'error')!s}", str(p.get("message", shown(p))), "bad"
        )
    if kind == EventKind.RUN_CONTINUED:
        return Entry(
            seq, kind, "handed on", f"to {p.get('name', '')!s} run {p.get('run_id', '')!s}"
        )
    return Entry(seq, kind, kind, shown(p))


def timeline(events: list[RunEvent]) -> list[Group]:
    """The journal's entries grouped: consecutive events of one call share a group."""
    groups: list[Group] = []
    for event in events:
        index = event.payload.get("call_index")
        call = index if isinstance(index, int) and not isinstance(index, bool) else None
        if call is None or not groups or groups[-1].call_index != call:
            groups.append(Group(call))
        groups[-1].entries.append(entry_of(event))
    return groups
