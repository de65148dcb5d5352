"""Retrying a run that ended without completing: a new run of the same workflow that carries on
from where the failed one stopped.

The plan (:class:`RetryPlan`) cuts the failed run's journal where its own failure begins: the
first event of the call whose failure escaped the body (every try of that step is run again; an
interrupt that went unanswered, past its deadline or for want of a working ``on_interrupt``
handler, is asked again), else its terminal. A wait still open before that point (a sleep, a
signal wait or an interrupt the run was cancelled in) moves the cut back to it, as a wait cannot
be carried over half done. The events before the cut, less ``run:init`` and the controls and
lifecycle the store wrote (cancels, pauses, requeues), are the *seed*: the retry is created
with them journaled right after its own ``run:init``, in the same step, so its first attempt
replays them and serves every call the failed run finished without running it again. A write
step that started and left no outcome (in doubt) runs again, once, as any in-doubt step does.

The retry's id is the first run's id followed by ``.retry{n}``, ``n`` counting retries from
that first run, so a retry asked for twice (a double click, a client that timed out) is one
run. A bound run's retry keeps its record (``ctx.record``) and its partition's shard.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from lockgate._errors import DuplicateRunError, ErrorCode, RetryRefused
from lockgate.journal._events import EPOCH_HEADER, EventKind, RunEvent, RunStatus
from lockgate.journal._replay import is_final, reconstruct_state
from lockgate.runs._chains import run_info
from lockgate.runs._grouping import SubmitGroup
from lockgate.runs._submit import queue_run
from lockgate.stores._base import Store
from lockgate.stores._calls import call_store
from lockgate.workflow._spec import get_workflow

log = logging.getLogger("lockgate.client")

#: The ``provenance.source`` keys a retry's ``run:init`` holds.
RETRY_OF = "retry_of"
RETRY_ROOT = "retry_root"
RETRY_NUMBER = "retry_number"

#: What the store, not the run's body, wrote: never carried into a retry.
NOT_SEEDED = frozenset(
    {
        EventKind.RUN_INIT,
        EventKind.RUN_CANCEL,
        EventKind.RUN_PAUSE_REQUESTED,
        EventKind.RUN_PAUSED,
        EventKind.RUN_UNPAUSED,
        EventKind.RUN_REQUEUED,
        EventKind.RUN_COMPLETE,
        EventKind.RUN_ERROR,
        EventKind.RUN_CONTINUED,
        EventKind.STREAM_OVERFLOW,
    }
)


@dataclass(frozen=True)
class RetryPlan:
    """What retrying the failed run ``source_run_id`` copies and starts: the run
    ``retry_run_id``, seeded with ``seed`` (the source's events before index ``cut``, less its
    ``run:init`` and what the store wrote), the write steps ``in_doubt`` (started, no outcome:
    the retry runs each once), and the retry's number ``attempt``."""

    name: str
    source_run_id: str
    retry_run_id: str
    cut: int
    seed: tuple[RunEvent, ...]
    seeded_events: int
    in_doubt: tuple[str, ...]
    attempt: int
    params: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    version: str = ""

    def provenance(self) -> dict[str, Any]:
        """What the retry's ``run:init`` records of where it comes from."""
        root = self.retry_run_id.rsplit(".retry", 1)[0]
        return {
            "source": {RETRY_OF: self.source_run_id, RETRY_ROOT: root, RETRY_NUMBER: self.attempt}
        }


async def plan_retry(store: Store, name: str, run_id: str) -> RetryPlan:
    """What retrying the run ``run_id`` would carry over and run again, starting nothing
    (:meth:`WorkflowClient.plan_retry <lockgate.WorkflowClient.plan_retry>`)."""
    plan, _ = await _planned(store, name, run_id)
    return plan


async def _planned(store: Store, name: str, run_id: str) -> tuple[RetryPlan, dict[str, Any]]:
    """The plan, and the failed run's ``run:init`` payload it was made from."""
    info = await run_info(store, name, run_id)
    if info.status == RunStatus.COMPLETE:
        raise RetryRefused(
            ErrorCode.INVALID_REQUEST,
            f"run {run_id} of {name!r} completed: there is nothing to retry",
        )
    if info.status == RunStatus.CONTINUED:
        raise RetryRefused(
            ErrorCode.INVALID_REQUEST,
            f"run {run_id} of {name!r} handed its work on to a successor: retry that run instead",
        )
    if not info.status.is_terminal:
        raise RetryRefused(
            ErrorCode.INVALID_REQUEST,
            f"run {run_id} of {name!r} has not ended ({info.status}): only an ended run is "
            f"retried; cancel or terminate it first",
        )
    events = await call_store(store, store.load_run, name, run_id)
    init = events[0].payload if events and events[0].kind == EventKind.RUN_INIT else {}
    source: dict[str, Any] = (init.get("provenance") or {}).get("source") or {}
    root = str(source.get(RETRY_ROOT) or run_id)
    number = int(source.get(RETRY_NUMBER) or 0) + 1
    cut = _cut(events)
    retry_id = f"{root}.retry{number}"
    state = reconstruct_state(events[:cut])
    in_doubt = tuple(
        record.name
        for record in state.calls.values()
        if record.pending and not is_final(record) and record.wait_id is None
    )
    seed = tuple(
        RunEvent(
            e.kind,
            dict(e.payload),
            retry_id,
            headers={k: v for k, v in e.headers.items() if k != EPOCH_HEADER},
        )
        for e in events[1:cut]
        if e.kind not in NOT_SEEDED
    )
    plan = RetryPlan(
        name=name,
        source_run_id=run_id,
        retry_run_id=retry_id,
        cut=cut,
        seed=seed,
        seeded_events=len(seed),
        in_doubt=in_doubt,
        attempt=number,
        params=dict(info.params),
        metadata=dict(info.metadata),
        version=info.version,
    )
    return plan, dict(init)


def _cut(events: list[RunEvent]) -> int:
    """Where the retry's own work begins in the failed run's journal (see the module
    docstring)."""
    cut = len(events)
    while cut > 0 and events[cut - 1].kind in NOT_SEEDED - {EventKind.RUN_INIT}:
        cut -= 1  # the terminal, and the cancel or requeues before it
    last = events[cut - 1] if cut > 0 else None
    if last is not None and last.kind == EventKind.STEP_ERROR and last.payload.get("final"):
        cut = _first_of(events, last.payload.get("call_index"), cut)
    elif last is not None and _unanswered_question(last):
        # The run failed on its question (no one answered in time, or the caller's handler
        # could not): the retry asks it again.
        cut = _first_of(events, last.payload.get("call_index"), cut)
    # A wait still open before the cut is where the retry picks up.
    state = reconstruct_state(events[:cut])
    for record in state.calls.values():
        if record.wait_id is not None and not is_final(record):
            cut = min(cut, _first_of(events, record.call_index, cut))
    return cut


def _unanswered_question(event: RunEvent) -> bool:
    """Whether ``event`` closed a ``ctx.interrupt`` without an answer: its deadline, or the
    failure of the handler that was to answer it."""
    if event.kind == EventKind.RUN_RESUMED:
        return isinstance(event.payload.get("error"), dict)
    wait_id = event.payload.get("wait_id")
    return (
        event.kind == EventKind.RUN_WAIT_TIMED_OUT
        and isinstance(wait_id, str)
        and wait_id.startswith("interrupt:")
    )


def _first_of(events: list[RunEvent], call_index: Any, before: int) -> int:
    """The index of the first event of the call at ``call_index``, before ``before``."""
    for index, event in enumerate(events[:before]):
        if event.payload.get("call_index") == call_index and event.kind != EventKind.RUN_INIT:
            return index
    return before


@dataclass(frozen=True)
class ExistingRetry:
    """A retry already started for the run ``source_run_id``: the run ``run_id``, its number
    ``attempt`` counted from the first run, and its status now."""

    name: str
    run_id: str
    source_run_id: str
    attempt: int
    status: RunStatus


def retry_candidates(run_id: str) -> list[str]:
    """The ids a retry of ``run_id`` can have: ``{run_id}.retry1`` for a first run, and the next
    number's for a run that is itself a retry (its id alone cannot tell: the candidate's
    ``run:init`` says)."""
    candidates = [f"{run_id}.retry1"]
    root, dot, number = run_id.rpartition(".retry")
    if dot and root and number.isdigit():
        candidates.insert(0, f"{root}.retry{int(number) + 1}")
    return candidates


async def find_retry(store: Store, name: str, run_id: str) -> ExistingRetry | None:
    """The retry already started for the run ``run_id``, or None
    (:meth:`WorkflowClient.find_retry <lockgate.WorkflowClient.find_retry>`)."""
    for candidate in retry_candidates(run_id):
        opening = await call_store(store, store.load_run, name, candidate, max_events=1)
        source = (opening[0].payload.get("provenance") or {}).get("source") if opening else None
        if isinstance(source, dict) and source.get(RETRY_OF) == run_id:
            info = await call_store(store, store.get_run, name, candidate)
            if info is None:
                continue
            return ExistingRetry(
                name, candidate, run_id, int(source.get(RETRY_NUMBER) or 1), info.status
            )
    return None


async def retry_run(
    store: Store, name: str, run_id: str, *, group: SubmitGroup | None = None
) -> str:
    """Start the retry of the run ``run_id`` (:meth:`WorkflowClient.retry
    <lockgate.WorkflowClient.retry>`), through ``group`` when given; returns its id, that of
    the retry already started when there is one."""
    plan, init = await _planned(store, name, run_id)
    spec = get_workflow(name)
    params = spec.validate_params(plan.params) if spec is not None else plan.params
    shard_key = init.get("shard_key")
    if plan.in_doubt:
        log.warning(
            "retry %s of run %s of %r: step(s) %s started without a recorded outcome and run again",
            plan.retry_run_id,
            run_id,
            name,
            ", ".join(plan.in_doubt),
        )
    try:
        return await queue_run(
            store,
            name,
            plan.retry_run_id,
            params,
            spec,
            group=group,
            metadata=plan.metadata,
            provenance=plan.provenance(),
            shard_key=shard_key if isinstance(shard_key, str) else None,
            seed=plan.seed,
        )
    except DuplicateRunError:
        existing = await call_store(store, store.load_run, name, plan.retry_run_id, max_events=1)
        made_by = (existing[0].payload.get("provenance") or {}).get("source") if existing else None
        if isinstance(made_by, dict) and made_by.get(RETRY_OF) == run_id:
            return plan.retry_run_id  # retried already: that retry
        raise
