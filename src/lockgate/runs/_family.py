"""The family of a run: its open children, the terminate cascade, and the notice a run's end
sends its parent. Once a run is terminated, each open child's ``parent_close`` policy is
applied, and so on down to its grandchildren.

A child is open when its parent's journal names it (the ``members`` facts of a ``ctx.run_child``
or ``ctx.fan_out`` call, see ``journal/_members.py``) and records no outcome for it. Its policy:

- ``cancel``: terminated too (its own open children then have their policies applied); a child
  whose submit has not landed yet gets a cancel held for its id, so it starts cancelled; a
  child already asked to cancel is left to end that way;
- ``abandon``: left running.

Every step is idempotent, so a repeat of ``terminate`` on a run already terminated finishes a
cascade an earlier call did not (one that died half way).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from lockgate._clock import Clock, iso
from lockgate.journal._events import EventKind, RunEvent, RunStatus
from lockgate.journal._members import WAITS_ON_RUNS
from lockgate.journal._replay import ReplayState, reconstruct_state
from lockgate.runs._chains import Io, tail_info
from lockgate.stores._base import Store
from lockgate.stores._calls import call_store
from lockgate.stores._types import RunInfo, TerminateOutcome


@dataclass(frozen=True)
class CloseResult:
    """What closing a run's open children did, grandchildren included: how many were asked to
    cancel (a cancel held for a child whose submit had not landed, so it starts cancelled),
    terminated, and left running by their ``abandon`` policy. A child that had already ended,
    or was already asked to cancel, is not counted."""

    cancelled: int = 0
    terminated: int = 0
    abandoned: int = 0

    @property
    def total(self) -> int:
        return self.cancelled + self.terminated + self.abandoned

    def __add__(self, other: CloseResult) -> CloseResult:
        return CloseResult(
            self.cancelled + other.cancelled,
            self.terminated + other.terminated,
            self.abandoned + other.abandoned,
        )


@dataclass(frozen=True)
class ChildRef:
    """A child run a parent's journal names, and what becomes of it when the parent ends."""

    name: str
    run_id: str
    parent_close: str


def open_children(state: ReplayState) -> list[ChildRef]:
    """The children ``state`` (a parent's folded journal) started and has no outcome for."""
    refs = []
    for index in sorted(state.calls):
        record = state.calls[index]
        if record.kind not in WAITS_ON_RUNS:
            continue
        if record.kind == "child" and (record.done or record.failed):
            continue
        for member in sorted(record.members):
            entry = record.members[member]
            if entry.get("state") != "started" or "run_id" not in entry:
                continue
            refs.append(
                ChildRef(
                    str(entry["name"]),
                    str(entry["run_id"]),
                    str(entry.get("parent_close") or "cancel"),
                )
            )
    return refs


async def was_terminated(io: Io, store: Store, name: str, run_id: str) -> bool:
    last = await io(store.get_last_event, name, run_id)
    return bool(
        last is not None
        and last.kind == EventKind.RUN_ERROR
        and last.payload.get("code") == "terminated"
    )


async def cascade(
    io: Io,
    store: Store,
    name: str,
    run_id: str,
    *,
    reason: str | None = None,
    requested_by: str | None = None,
    _seen: set[tuple[str, str]] | None = None,
) -> tuple[CloseResult, tuple[tuple[str, str], ...]]:
    """Apply the ``parent_close`` policy of each open child of the terminated run ``run_id``,
    recursively. Returns the counts and the ``(name, run_id)`` of every run it terminated."""
    seen = _seen if _seen is not None else set()
    if (name, run_id) in seen:
        return CloseResult(), ()
    seen.add((name, run_id))
    events = await io(store.load_run, name, run_id)
    closed, ended = CloseResult(), list[tuple[str, str]]()
    cause = {"parent": {"name": name, "run_id": run_id}}
    for ref in open_children(reconstruct_state(events)):
        tail, info = await tail_info(io, store, ref.name, ref.run_id)
        if ref.parent_close == "abandon":
            if info is None or not info.status.is_terminal:
                closed += CloseResult(abandoned=1)
            continue
        if info is None:
            # Journaled by the parent but not submitted (yet): it starts cancelled if it lands.
            await io(
                store.request_cancel,
                ref.name,
                ref.run_id,
                detail={"reason": reason, "requested_by": requested_by, "cause": cause},
            )
            closed += CloseResult(cancelled=1)
            continue
        if info.status.is_terminal:
            if await was_terminated(io, store, ref.name, tail):
                more, more_ended = await cascade(
                    io, store, ref.name, tail, reason=reason, requested_by=requested_by, _seen=seen
                )
                closed, ended = closed + more, [*ended, *more_ended]
            continue
        if info.cancel_requested_at is not None:
            continue  # it ends cancelled by itself, closing its own children as it does
        outcome = await io(
            store.terminate_run,
            ref.name,
            tail,
            reason=reason,
            requested_by=requested_by,
            cause=cause,
        )
        if TerminateOutcome(outcome) != TerminateOutcome.TERMINATED:
            continue
        closed += CloseResult(terminated=1)
        ended.append((ref.name, tail))
        more, more_ended = await cascade(
            io, store, ref.name, tail, reason=reason, requested_by=requested_by, _seen=seen
        )
        closed, ended = closed + more, [*ended, *more_ended]
    return closed, tuple(ended)


def parent_of(init: dict[str, Any]) -> dict[str, Any] | None:
    """The parent a run's ``run:init`` payload names (``provenance.source.parent``), or None
    for a run no parent started."""
    provenance = init.get("provenance")
    source = provenance.get("source") if isinstance(provenance, dict) else None
    parent = source.get("parent") if isinstance(source, dict) else None
    if not isinstance(parent, dict) or not parent.get("name") or not parent.get("run_id"):
        return None
    return parent


async def notify_parent(
    io: Io, store: Store, sent_at: str, run_id: str, init: dict[str, Any]
) -> None:
    """Tell the parent of the run ``run_id`` (whose ``run:init`` payload is ``init``) that the
    run has ended: the signal its parent waits on (``notify``), sent once (keyed by the
    child's id) to the parent's live tail. A notice is only a wake-up: the parent reads the
    child's outcome from the store, and re-checks on a timer should a notice never come."""
    parent = parent_of(init)
    if parent is None or "signals" not in store.capabilities():
        return
    signal = parent.get("notify")
    if not isinstance(signal, str) or not signal:
        return
    tail, info = await tail_info(io, store, str(parent["name"]), str(parent["run_id"]))
    if info is None or info.status.is_terminal:
        return
    await io(
        store.send_signal,
        str(parent["name"]),
        tail,
        signal,
        {"run_id": run_id},
        sent_at,
        idempotency_key=f"child-end:{run_id}",
    )


async def after_store_ended(io: Io, store: Store, sent_at: str, name: str, run_id: str) -> None:
    """What a run's own attempt does as it ends, done for a run something else ended: the
    store (quarantined, or out of retries, when a worker found its lease lapsed) or a
    worker's stranded scan. Its parent is told (:func:`notify_parent`), and its open children
    whose ``parent_close`` is ``cancel`` are asked to cancel, at their live runs. Nothing for
    a run still going."""
    info: RunInfo | None = await io(store.get_run, name, run_id)
    if info is None or not info.status.is_terminal or info.status == RunStatus.CONTINUED:
        return
    events: list[RunEvent] = await io(store.load_run, name, run_id)
    if not events or events[0].kind != EventKind.RUN_INIT:
        return
    detail = {
        "reason": f"parent ended {info.status.value}",
        "requested_by": run_id,
        "cause": {"parent": {"name": name, "run_id": run_id}},
    }
    for ref in open_children(reconstruct_state(events)):
        if ref.parent_close != "cancel":
            continue
        tail, child = await tail_info(io, store, ref.name, ref.run_id)
        if child is None or not child.status.is_terminal:
            target = tail if child is not None else ref.run_id
            await io(store.request_cancel, ref.name, target, detail=detail)
    await notify_parent(io, store, sent_at, run_id, dict(events[0].payload))


async def after_terminate(
    store: Store,
    clock: Clock,
    name: str,
    run_id: str,
    outcome: TerminateOutcome,
    reason: str | None,
    requested_by: str | None,
) -> tuple[CloseResult, tuple[tuple[str, str], ...]]:
    """What follows a terminate of ``run_id``: its children's policies applied when this call
    or an earlier one terminated it, and its own parent told it ended."""
    io = functools.partial(call_store, store)
    if outcome != TerminateOutcome.TERMINATED and not await was_terminated(io, store, name, run_id):
        return CloseResult(), ()
    closed, ended = await cascade(io, store, name, run_id, reason=reason, requested_by=requested_by)
    if outcome == TerminateOutcome.TERMINATED:
        head = await io(store.load_run, name, run_id, max_events=1)
        if head:
            await notify_parent(io, store, iso(clock()), run_id, head[0].payload)
    return closed, ended
