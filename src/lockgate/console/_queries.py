"""What the overview and the runs list read from the store, each within a fixed number of
store reads: never a scan of every run.

The runs list walks the store's own pages (``list_runs``, newest first) and filters them
here; a page of the console stops after :data:`MAX_LIST_READS` store pages (and, with a gate
filter, :data:`MAX_GATE_READS` journal openings) or :data:`LIST_TIME_S` of reading, answering
what it found and a cursor to go on from where it stopped: always the end of a store page, so
the cursor is the store's own."""

from __future__ import annotations

import base64
import json
import math
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from lockgate.journal._events import EventKind, RunStatus
from lockgate.stores._base import Store
from lockgate.stores._calls import call_store
from lockgate.stores._types import RunInfo

#: Runs the overview reads per workflow (newest first), in store pages of :data:`LIST_PAGE`.
OVERVIEW_RUNS = 500
#: Open buffers the overview reads per triggered workflow, at most.
OVERVIEW_BUFFERS = 100
#: Runs a store page of the runs list asks for.
LIST_PAGE = 50
#: Rows a console page of the runs list shows at most.
PAGE_ROWS = 50
#: Store pages one console page reads at most.
MAX_LIST_READS = 20
#: Journal openings (``run:init``, for the gate filter) one console page reads at most.
MAX_GATE_READS = 200
#: Seconds of store reads one console page spends at most, whatever the budgets above allow:
#: on a slow store a filter matching little answers in time, with a cursor to go on.
LIST_TIME_S = 0.2
HOUR_S = 3600.0
FAILED = frozenset({RunStatus.ERROR, RunStatus.QUARANTINED})


class BadQuery(ValueError):
    """A filter or cursor that does not parse: answered 400 with the message."""


@dataclass
class WorkflowStats:
    name: str
    runs_read: int = 0
    counts: Counter[str] = field(default_factory=Counter)
    ended_last_hour: int = 0
    failed_last_hour: int = 0
    p50_s: float | None = None
    p95_s: float | None = None
    #: False when the runs read all fall inside the last hour, so the hour's figures are a floor.
    covers_hour: bool = True
    durations_known: bool = True

    @property
    def throughput_per_min(self) -> float:
        return self.ended_last_hour / 60.0

    @property
    def failure_rate(self) -> float | None:
        return self.failed_last_hour / self.ended_last_hour if self.ended_last_hour else None


def percentile(values: list[float], q: float) -> float | None:
    """The nearest-rank ``q`` percentile (0 < q <= 1) of ``values``; None for none."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


async def workflow_stats(store: Store, name: str, *, now: float | None = None) -> WorkflowStats:
    """Counts by status over the newest :data:`OVERVIEW_RUNS` runs; throughput, failure rate
    and p50/p95 duration (submit to end) of those that ended in the last hour."""
    now = time.time() if now is None else now
    stats = WorkflowStats(name)
    durations: list[float] = []
    cursor: str | None = None
    oldest = now
    while stats.runs_read < OVERVIEW_RUNS:
        want = min(LIST_PAGE, OVERVIEW_RUNS - stats.runs_read)
        page, cursor = await call_store(store, store.list_runs, name, limit=want, cursor=cursor)
        for info in page:
            stats.runs_read += 1
            stats.counts[str(info.status)] += 1
            oldest = min(oldest, info.submitted_at)
            if not info.status.is_terminal:
                continue
            if info.ended_at is None:
                stats.durations_known = False
                continue
            if info.ended_at >= now - HOUR_S:
                stats.ended_last_hour += 1
                stats.failed_last_hour += info.status in FAILED
                if info.status == RunStatus.COMPLETE:
                    durations.append(max(0.0, info.ended_at - info.submitted_at))
        if cursor is None or not page:
            break
    stats.covers_hour = cursor is None or oldest < now - HOUR_S
    stats.p50_s = percentile(durations, 0.50)
    stats.p95_s = percentile(durations, 0.95)
    return stats


@dataclass(frozen=True)
class BufferSummary:
    """A triggered workflow's open buffers as the store holds them: how many (``more`` when
    there are over :data:`OVERVIEW_BUFFERS`, only those counted), the events they hold and when
    the soonest is due (None: none is, or each fires only when full)."""

    buffers: int
    events: int
    next_due_at: float | None
    more: bool


async def buffer_summary(store: Store, name: str) -> BufferSummary | None:
    """The open buffers of ``name`` (a Collect or Debounce workflow) in one bounded read;
    None when the store does not report them (no ``insight`` group)."""
    if "insight" not in store.capabilities():
        return None
    held = await call_store(store, store.open_buffers, name, limit=OVERVIEW_BUFFERS + 1)
    counted = held[:OVERVIEW_BUFFERS]
    due = [b.due_at for b in counted if b.due_at is not None]
    return BufferSummary(
        buffers=len(counted),
        events=sum(b.events for b in counted),
        next_due_at=min(due) if due else None,
        more=len(held) > OVERVIEW_BUFFERS,
    )


@dataclass(frozen=True)
class RunFilter:
    workflow: str | None = None
    status: RunStatus | None = None
    owner: str | None = None
    gate: str | None = None
    since: float | None = None

    @property
    def filters_rows(self) -> bool:
        """Whether rows of a store page may be left out (every filter but the workflow)."""
        return any(v is not None for v in (self.status, self.owner, self.gate, self.since))

    def matches(self, info: RunInfo) -> bool:
        if self.status is not None and info.status != self.status:
            return False
        # Matched here, over bounded store pages: a store's own owner filter may read every
        # run of the workflow in one call when the owner has none.
        return self.owner is None or info.owner == self.owner


@dataclass
class Position:
    """Where a listing stands: the workflow (an index into the names listed) and the store
    cursor of its next store page (None: its newest)."""

    workflow: int = 0
    cursor: str | None = None

    def encode(self) -> str:
        text = json.dumps([self.workflow, self.cursor], separators=(",", ":"))
        return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")

    @classmethod
    def decode(cls, text: str | None) -> Position:
        if not text:
            return cls()
        try:
            raw = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
            workflow, cursor = raw
            if not isinstance(workflow, int) or isinstance(workflow, bool):
                raise TypeError
            if cursor is not None and not isinstance(cursor, str):
                raise TypeError
        except (ValueError, TypeError) as exc:
            raise BadQuery(f"the cursor {text[:40]!r} is not one this console gave") from exc
        if workflow < 0:
            raise BadQuery("the cursor is not one this console gave")
        return cls(workflow, cursor)


@dataclass
class RunsPage:
    rows: list[tuple[RunInfo, dict[str, Any]]]
    next_cursor: str | None
    runs_read: int
    store_reads: int
    #: True when the page stopped at its read budget rather than filling or reaching the end.
    budget_spent: bool


async def list_page(
    store: Store, names: list[str], query: RunFilter, cursor: str | None
) -> RunsPage:
    """One console page of runs of ``names`` (one after another, each newest first) that
    match ``query``, read from ``cursor``.

    A page always ends where a store page ends, so the cursor it answers with is the store's
    own (a keyset bound: runs submitted since, or removed by retention, move nothing): with
    no filter on rows it asks the store for just the rows still to show; with one, it reads
    each store page whole, so it may show up to ``LIST_PAGE - 1`` rows over
    :data:`PAGE_ROWS`. The budgets are checked between store pages."""
    at = Position.decode(cursor)
    rows: list[tuple[RunInfo, dict[str, Any]]] = []
    reads = gate_reads = runs_read = 0
    deadline = time.monotonic() + LIST_TIME_S
    filtered = query.filters_rows
    while at.workflow < len(names) and len(rows) < PAGE_ROWS:
        if reads >= MAX_LIST_READS or gate_reads >= MAX_GATE_READS:
            break
        if reads and time.monotonic() > deadline:
            break
        here = at.workflow
        name = names[here]
        want = LIST_PAGE if filtered else PAGE_ROWS - len(rows)
        try:
            page, following = await call_store(
                store, store.list_runs, name, limit=want, cursor=at.cursor
            )
        except ValueError as exc:
            raise BadQuery(f"the cursor does not fit this store: {exc}") from exc
        reads += 1
        at = Position(here, following) if following else Position(here + 1, None)
        for info in page:
            runs_read += 1
            if query.since is not None and info.submitted_at < query.since:
                # Newest first: nothing further in this workflow is recent enough.
                at = Position(here + 1, None)
                break
            if not query.matches(info):
                continue
            gates: dict[str, Any] = {}
            if query.gate is not None:
                gate_reads += 1
                gates = await stamped_gates(store, name, info.run_id)
                if query.gate not in gate_keys(gates):
                    continue
            rows.append((info, gates))
    more = at.workflow < len(names)
    return RunsPage(
        rows,
        at.encode() if more else None,
        runs_read,
        reads + gate_reads,
        budget_spent=more and len(rows) < PAGE_ROWS,
    )


def gate_keys(gates: dict[str, Any]) -> set[str]:
    """The keys of the gates a ``run:init`` names (``concurrency`` and ``rate``)."""
    found = set()
    for kind in ("concurrency", "rate"):
        gate = gates.get(kind)
        if isinstance(gate, dict) and gate.get("key") is not None:
            found.add(str(gate["key"]))
    return found


async def stamped_gates(store: Store, name: str, run_id: str) -> dict[str, Any]:
    """The gates the run was stamped with at submit, as its ``run:init`` names them
    (``{"concurrency": {"key", "max"}, "rate": {"key", "per_second", "burst"}}``); {} for
    none."""
    opening = await call_store(store, store.load_run, name, run_id, max_events=1)
    if not opening or opening[0].kind != EventKind.RUN_INIT:
        return {}
    gates = opening[0].payload.get("gates")
    return gates if isinstance(gates, dict) else {}


_RELATIVE = re.compile(r"(\d+(?:\.\d+)?)\s*([smhd])")
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_since(text: str | None, *, now: float | None = None) -> float | None:
    """``since`` as epoch seconds: a span back from now (``30m``, ``2h``, ``1d``) or an ISO
    8601 time (UTC when it names no zone)."""
    if text is None or not text.strip():
        return None
    text = text.strip()
    relative = _RELATIVE.fullmatch(text)
    if relative:
        return (time.time() if now is None else now) - float(relative[1]) * _UNITS[relative[2]]
    try:
        moment = datetime.fromisoformat(text)
    except ValueError as exc:
        raise BadQuery(
            f"since={text[:40]!r} is neither a span (30m, 2h, 1d) nor an ISO 8601 time"
        ) from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def parse_status(text: str | None) -> RunStatus | None:
    if text is None or not text.strip():
        return None
    try:
        return RunStatus(text.strip())
    except ValueError as exc:
        known = ", ".join(s.value for s in RunStatus)
        raise BadQuery(f"status={text[:40]!r} is not a run status ({known})") from exc
