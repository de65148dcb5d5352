"""How lockgate prints to a terminal (the CLI, the demo): aligned plain text for people, one JSON
object per line for programs."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from lockgate._text import readable_text

if TYPE_CHECKING:
    from lockgate.journal._events import RunEvent
    from lockgate.stores._types import RunInfo, WaitSpec

DETAIL_WIDTH = 96


def out(text: str = "") -> None:
    # readable_text: a value stored with a lone surrogate has no UTF-8 form to print.
    print(readable_text(text), flush=True)


def note(text: str) -> None:
    """A remark for the person at the terminal, kept off stdout so scripts read clean data."""
    print(f"lockgate: {text}", file=sys.stderr, flush=True)


def json_line(value: Any) -> None:
    out(json.dumps(value, sort_keys=True, default=str))


def compact(value: Any, limit: int = DETAIL_WIDTH) -> str:
    """``value`` as compact JSON, cut to ``limit`` characters."""
    text = json.dumps(value, separators=(",", ":"), sort_keys=True, default=str)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """Columns left-aligned to their widest cell, two spaces apart."""
    rows = [list(map(str, row)) for row in rows]
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]
    lines = [headers, *rows]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
        for line in lines
    )


def fields(pairs: Iterable[tuple[str, str]]) -> str:
    """``name  value`` lines with the values aligned."""
    pairs = list(pairs)
    width = max((len(name) for name, _ in pairs), default=0)
    return "\n".join(f"{name.ljust(width)}  {value}".rstrip() for name, value in pairs)


def stamp(ts: float | None) -> str:
    """An epoch time as ``2025-01-31T09:30:00Z`` (UTC, to the second)."""
    if ts is None:
        return "-"
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def relative(ts: float, now: float) -> str:
    """``3.2s ago`` or ``in 1m05s``."""
    delta = ts - now
    span = abs(delta)
    if span < 60:
        text = f"{span:.1f}s"
    elif span < 3600:
        text = f"{int(span // 60)}m{int(span % 60):02d}s"
    elif span < 86_400:
        text = f"{int(span // 3600)}h{int(span % 3600 // 60):02d}m"
    else:
        text = f"{int(span // 86_400)}d{int(span % 86_400 // 3600):02d}h"
    return f"in {text}" if delta > 0 else f"{text} ago"


def stamp_relative(ts: float | None, now: float) -> str:
    return "-" if ts is None else f"{stamp(ts)} ({relative(ts, now)})"


def wait_text(wait: WaitSpec | None, now: float) -> str:
    """What a parked run waits for, and until when."""
    if wait is None:
        return "-"
    what = {
        "start": "delayed start",
        "sleep": "sleep",
        "signal": f"signal {wait.signal!r}",
        "pause": "pause (until unpaused)",
        "interrupt": f"an answer to {wait.wait_id}",
    }.get(wait.kind, wait.kind)
    if wait.due_at is None:
        return what if wait.kind == "pause" else f"{what}, no deadline"
    verb = "until" if wait.kind in ("start", "sleep") else "deadline"
    return f"{what}, {verb} {stamp_relative(wait.due_at, now)}"


def run_row(info: RunInfo, now: float) -> list[str]:
    return [
        info.run_id,
        str(info.status),
        stamp(info.submitted_at),
        wait_text(info.wait, now) if info.wait is not None else "-",
        info.owner or "-",
    ]


RUN_HEADERS = ("RUN ID", "STATUS", "SUBMITTED", "WAITING ON", "OWNER")


def _step(payload: dict[str, Any]) -> str:
    name = payload.get("step_id", "?")
    attempt = payload.get("attempt")
    return f"{name}" + (f" (attempt {attempt})" if attempt not in (None, 1) else "")


def event_detail(event: RunEvent) -> str:
    """The one thing worth reading in an event's payload."""
    p = event.payload
    kind = event.kind
    if kind == "run:init":
        return f"params={compact(p.get('params', {}), 60)}"
    if kind in ("step:pending", "step:done", "step:error"):
        tail = ""
        if kind == "step:done":
            tail = f" -> {compact(p.get('result'), 60)}"
        elif kind == "step:error":
            error = p.get("error")
            message = error.get("message") if isinstance(error, dict) else p.get("message")
            tail = f": {message}" if message else ""
        return _step(p) + tail
    if kind == "run:sleeping":
        wake_at = p.get("wake_at")
        return f"until {stamp(wake_at)}" if isinstance(wake_at, int | float) else ""
    if kind in ("run:signal_waiting", "run:signal_received"):
        signal = repr(p.get("signal", "?"))
        return signal + (f" {compact(p.get('payload'), 60)}" if "payload" in p else "")
    if kind == "run:interrupted":
        return f"{p.get('wait_id', '?')} ({p.get('expects', '?')}) {compact(p.get('payload'), 60)}"
    if kind == "run:resumed":
        error = p.get("error")
        if isinstance(error, dict):
            return f"{p.get('wait_id', '?')} handler failed: {error.get('message', '')}"
        return f"{p.get('wait_id', '?')} {p.get('action', '?')} {compact(p.get('value'), 60)}"
    if kind == "run:complete":
        return f"result={compact(p.get('result'), 80)}"
    if kind == "run:error":
        code, message = str(p.get("code", "error")), str(p.get("message", ""))
        # A message that starts with its code (a termination's "terminated: <reason>") is
        # shown as it is, not with the code twice.
        return message if message.startswith(f"{code}:") else f"{code}: {message}".rstrip(": ")
    if kind == "run:cancel":
        detail = p.get("detail") or {}
        reason = detail.get("reason") if isinstance(detail, dict) else None
        return f"reason={reason!r}" if reason else ""
    if kind == "run:requeued":
        return f"{p.get('reason', '')} (#{p.get('count', '?')})"
    if kind in ("run:woken", "run:wait_timed_out", "run:paused", "run:unpaused"):
        return str(p.get("wait_id", ""))
    return compact(p) if p else ""


EVENT_HEADERS = ("SEQ", "EVENT", "DETAIL")


def event_row(event: RunEvent) -> list[str]:
    return [f"#{event.run_seq}", event.kind, event_detail(event)]


def outcome_text(events: Sequence[RunEvent]) -> str | None:
    """The run's result or error, from its terminal event, if it has ended."""
    if not events or not events[-1].is_terminal:
        return None
    last = events[-1]
    if last.kind == "run:complete":
        return compact(last.payload.get("result"), 200)
    return event_detail(last)


def run_fields(
    info: RunInfo,
    events: Sequence[RunEvent],
    now: float,
    last: int,
    queued_behind: str | None = None,
) -> str:
    """Everything ``runs show`` prints about one run; ``queued_behind`` says why a queued run
    has not started."""
    pairs = [
        ("run", info.run_id),
        ("workflow", info.name),
        ("status", str(info.status)),
        ("submitted", stamp_relative(info.submitted_at, now)),
        ("version", f"{info.version or '-'} ({info.version_behavior})"),
        ("params", compact(info.params, 200)),
        ("owner", info.owner or "-"),
        ("lock holder", info.lock_holder or "-"),
        ("waiting on", queued_behind or wait_text(info.wait, now)),
        ("cancel", f"requested at {info.cancel_requested_at}" if info.cancel_requested_at else "-"),
    ]
    if info.wait is not None and info.wait.kind == "interrupt":
        asked = _asked(events, info.wait.wait_id)
        if asked is not None:
            pairs.append(("question", f"({asked.get('expects')}) {compact(asked.get('payload'))}"))
    outcome = outcome_text(events)
    if events and events[-1].kind == "run:continued":
        successor = events[-1].payload.get("run_id")
        if events[-1].payload.get("reason") == "continue_as_new":
            hop = events[-1].payload.get("hop")
            pairs.append(("continued as", f"{successor} (continue_as_new, hop {hop})"))
        else:
            pairs.append(("handed on to", f"{successor} (its gates were out of date)"))
    elif outcome is not None:
        pairs.append(("result" if events[-1].kind == "run:complete" else "error", outcome))
    shown = list(events[-last:]) if last > 0 else []
    title = f"events ({len(events)}, last {len(shown)})" if len(shown) < len(events) else "events"
    body = table(EVENT_HEADERS, map(event_row, shown)) if shown else "(none)"
    indented = "\n".join("  " + line for line in body.splitlines())
    return f"{fields(pairs)}\n\n{title}:\n{indented}"


def _asked(events: Sequence[RunEvent], wait_id: str) -> dict[str, Any] | None:
    """The ``run:interrupted`` payload of the interrupt ``wait_id``, if the events hold it."""
    for event in reversed(events):
        if event.kind == "run:interrupted" and event.payload.get("wait_id") == wait_id:
            return event.payload
    return None


def flatten(data: Any, prefix: str = "") -> list[tuple[str, str]]:
    """Nested mappings as ``a.b  value`` pairs, for ``store info``."""
    if isinstance(data, dict) and data:
        pairs: list[tuple[str, str]] = []
        for key, value in data.items():
            pairs.extend(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
        return pairs
    if isinstance(data, str):
        return [(prefix, data)]
    return [(prefix, json.dumps(data, default=str))]
