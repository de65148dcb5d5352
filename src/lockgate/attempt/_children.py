"""Child runs started from a body: ``ctx.run_child``, and what ``ctx.fan_out`` shares with it.

A child is started durably: the parent journals that it is about to submit it (``step:pending``
naming its workflow, run id and ``parent_close`` policy, fenced and flushed), then submits it
stamped with the child's own gates and a provenance naming the parent. The parent then waits
for it the way it waits for a signal, holding no worker slot: while the child runs the parent
is parked on the signal ``lockgate.child:{child id}``, which the child's attempt sends when it
ends (``notify_parent``), with a timer as a backstop should the notice never come. Woken, the
replay reaches the same call, reads the child's outcome from the store and journals it.

When the parent ends (completes, fails or is cancelled), before its terminal is written, each
open child whose policy is ``cancel`` is asked to cancel (``close_children``); ``abandon``
children run on. ``client.terminate`` applies the policies itself (``runs/_family.py``).
"""

from __future__ import annotations

import logging
import math
import uuid
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lockgate._clock import iso
from lockgate._errors import (
    ChildWorkflowError,
    DuplicateRunError,
    LockgateError,
    LockLost,
    StoreFault,
)
from lockgate._names import check_name
from lockgate.attempt._unwind import AttemptOutcome, LeaseLost, StoreFailed, Suspend
from lockgate.journal._events import EventKind, StepKind, error_status
from lockgate.runs._chains import tail_info
from lockgate.runs._family import ChildRef, cascade, notify_parent, open_children
from lockgate.runs._submit import check_params, queue_run
from lockgate.stores._calls import call_store
from lockgate.stores._types import TerminateOutcome, WaitOutcome, WaitSpec
from lockgate.workflow._spec import WorkflowSpec, json_ready
from lockgate.workflow._targets import child_target

if TYPE_CHECKING:
    from lockgate.attempt._attempt_core import AttemptCore

log = logging.getLogger("lockgate.children")

PARENT_CLOSE_POLICIES = ("cancel", "abandon")
#: The reserved signal a child's end is told to its parent by (``+ child run id``).
CHILD_NOTICE = "lockgate.child:"
#: Seconds the backstop timer of a wait on children starts at and grows to: the wait
#: re-reads its children's status that often even when no notice comes.
BACKSTOP_FIRST = 2.0
BACKSTOP_MOST = 300.0

#: The outcomes of an attempt after which its run has ended.
_ENDED = frozenset(
    {
        AttemptOutcome.COMPLETED,
        AttemptOutcome.FAILED,
        AttemptOutcome.CANCELLED,
        AttemptOutcome.ALREADY_ENDED,
    }
)


# -- checking a call ---------------------------------------------------------------------------


def child_params(name: str, spec: WorkflowSpec | None, params: object) -> dict[str, Any]:
    """``params`` checked as a submit of ``name`` checks them (:class:`InvalidParamsError`)."""
    return check_params(name, spec, {} if params is None else params)


def check_policy(what: str, parent_close: object) -> str:
    if parent_close not in PARENT_CLOSE_POLICIES:
        raise ValueError(
            f"{what} parent_close must be one of {', '.join(PARENT_CLOSE_POLICIES)}, "
            f"not {parent_close!r}"
        )
    return str(parent_close)


def check_timeout(what: str, timeout: object) -> float | None:
    if timeout is None:
        return None
    seconds = timeout.total_seconds() if hasattr(timeout, "total_seconds") else timeout
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise TypeError(f"{what} timeout takes seconds or a timedelta, not {timeout!r}")
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"{what} timeout must be a finite number of seconds > 0, not {timeout!r}")
    return float(seconds)


# -- the open children of an attempt ----------------------------------------------------------


@dataclass
class _Book:
    """The children of one attempt's run that are open: journaled as started, no outcome."""

    open: dict[str, ChildRef] = field(default_factory=dict)


_BOOKS: weakref.WeakKeyDictionary[AttemptCore, _Book] = weakref.WeakKeyDictionary()


def book(core: AttemptCore) -> _Book:
    found = _BOOKS.get(core)
    if found is None:
        found = _Book({ref.run_id: ref for ref in open_children(core.state)})
        _BOOKS[core] = found
    return found


async def close_children(core: AttemptCore, terminal_kind: str) -> None:
    """The run is about to write its terminal ``terminal_kind``: ask each open child whose
    policy is ``cancel`` to cancel (a child not submitted yet then starts cancelled). Written
    before the terminal, so an attempt that dies in between repeats it."""
    if terminal_kind == EventKind.RUN_CONTINUED or core.mode != "live":
        return
    if core not in _BOOKS and not any(record.members for record in core.state.calls.values()):
        return  # no child ever started: nothing to read
    for ref in list(book(core).open.values()):
        if ref.parent_close != "cancel":
            continue
        try:
            await cancel_child(
                core,
                ref,
                {
                    "reason": "parent ended",
                    "requested_by": core.run_id,
                    "cause": {"parent": {"name": core.spec.name, "run_id": core.run_id}},
                },
            )
        except LockgateError as exc:
            log.warning("run %s: could not cancel child %s: %s", core.run_id, ref.run_id, exc)


async def after_attempt(core: AttemptCore, outcome: AttemptOutcome) -> None:
    """The attempt ended with ``outcome``: when the run has ended and a parent started it,
    tell the parent. A notice that fails is only logged: the parent's backstop re-checks."""
    if outcome not in _ENDED or core.mode != "live":
        return
    init = core.state.init
    if "provenance" not in init:
        return
    try:
        await notify_parent(_plain_io(core), core.store, iso(core.clock()), core.run_id, init)
    except Exception as exc:
        log.info("run %s: telling its parent it ended failed: %s", core.run_id, exc)


def _plain_io(core: AttemptCore) -> Callable[..., Any]:
    async def io(method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return await call_store(core.store, method, *args, **kwargs)

    return io


# -- submitting and reading a child -----------------------------------------------------------


def provenance(core: AttemptCore, index: int, notify: str, parent_close: str) -> dict[str, Any]:
    return {
        "source": {
            "parent": {
                "name": core.spec.name,
                "run_id": core.run_id,
                "call_index": index,
                "notify": notify,
            },
            "parent_close": parent_close,
        }
    }


async def submit_child(
    core: AttemptCore,
    ref: ChildRef,
    params: dict[str, Any],
    spec: WorkflowSpec | None,
    prov: dict[str, Any],
) -> None:
    """Submit the child ``ref`` (stamped with its own gates, as ``client.submit`` stamps a
    run), unless it already exists: a replay after a crash between the journal and the
    submit, or after it. An id taken by a run that is not this parent's child raises
    :class:`DuplicateRunError`."""
    try:
        await queue_run(core.store, ref.name, ref.run_id, params, spec, provenance=prov)
    except DuplicateRunError:
        events = await core.io(core.store.load_run, ref.name, ref.run_id, max_events=1)
        init = events[0].payload if events else {}
        parent = ((init.get("provenance") or {}).get("source") or {}).get("parent") or {}
        if parent.get("run_id") != core.run_id:
            raise
    except LockLost as exc:
        raise LeaseLost() from exc
    except StoreFault as exc:
        raise StoreFailed(exc) from exc


@dataclass(frozen=True)
class ChildOutcome:
    """How a child ended: ``status`` ``complete`` with its ``result``, or another terminal
    status with the ``error`` payload of its ``run:error``."""

    status: str
    result: Any = None
    error: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == "complete"

    def member_fact(self, i: int) -> dict[str, Any]:
        if self.ok:
            return {"i": i, "result": self.result}
        return {"i": i, "status": self.status, "error": self.error}


#: What :func:`read_child` returns for a child whose submit has not landed.
MISSING = ChildOutcome("missing")


async def read_child(core: AttemptCore, ref: ChildRef) -> ChildOutcome | None:
    """The outcome of the child ``ref`` (followed to its chain's live tail), None while it has
    not ended, :data:`MISSING` when there is no such run yet."""
    tail, info = await tail_info(core.io, core.store, ref.name, ref.run_id)
    if info is None:
        return MISSING
    if not info.status.is_terminal:
        return None
    last = await core.io(core.store.get_last_event, ref.name, tail)
    if last is None:
        return None
    if last.kind == EventKind.RUN_COMPLETE:
        return ChildOutcome("complete", result=last.payload.get("result"))
    error = {
        "code": last.payload.get("code"),
        "message": last.payload.get("message"),
        "error": last.payload.get("error"),
    }
    return ChildOutcome(error_status(last.payload).value, error=error)


def child_error(ref: ChildRef, outcome: ChildOutcome) -> ChildWorkflowError:
    message = str(outcome.error.get("message") or outcome.error.get("code") or outcome.status)
    return ChildWorkflowError(ref.name, ref.run_id, outcome.status, message, error=outcome.error)


def describe_child_error(exc: ChildWorkflowError) -> dict[str, Any]:
    """The journal form of ``exc``, which :func:`rebuild_child_error` turns back into it."""
    return {
        "type": "lockgate._errors:ChildWorkflowError",
        "code": str(exc.code),
        "message": str(exc),
        "child": {
            "name": exc.name,
            "run_id": exc.run_id,
            "status": exc.status,
            "message": str(exc).split(": ", 1)[-1],
            "error": exc.error,
        },
    }


def rebuild_child_error(error: dict[str, Any]) -> ChildWorkflowError:
    child = error.get("child") or {}
    return ChildWorkflowError(
        str(child.get("name", "")),
        str(child.get("run_id", "")),
        str(child.get("status", "error")),
        str(child.get("message", "")),
        error=child.get("error") if isinstance(child.get("error"), dict) else None,
    )


async def cancel_child(core: AttemptCore, ref: ChildRef, detail: dict[str, Any]) -> None:
    """Ask the child ``ref`` to cancel: its live run, should it have continued as new (a
    cancel of the run it continued from would land on an ended run and do nothing), or its
    own id when its submit has not landed yet (the store holds the cancel for it)."""
    tail, info = await tail_info(core.io, core.store, ref.name, ref.run_id)
    target = tail if info is not None else ref.run_id
    await core.io(core.store.request_cancel, ref.name, target, detail=detail)


async def end_child(core: AttemptCore, ref: ChildRef, reason: str) -> ChildOutcome:
    """Terminate the child ``ref`` (its own cancel-policy children with it) and return how it
    ended: ``timed_out`` when this ended it, else the outcome it reached first."""
    tail, info = await tail_info(core.io, core.store, ref.name, ref.run_id)
    if info is None:
        await core.io(core.store.request_cancel, ref.name, ref.run_id, detail={"reason": reason})
        return ChildOutcome("timed_out", error={"code": "timed_out", "message": reason})
    if "terminate" in core.store.capabilities():
        outcome = await core.io(
            core.store.terminate_run,
            ref.name,
            tail,
            reason=reason,
            requested_by=core.run_id,
            cause={"parent": {"name": core.spec.name, "run_id": core.run_id}},
        )
        if TerminateOutcome(outcome) == TerminateOutcome.TERMINATED:
            await cascade(core.io, core.store, ref.name, tail, reason=reason)
            return ChildOutcome("timed_out", error={"code": "timed_out", "message": reason})
    else:
        await core.io(core.store.request_cancel, ref.name, tail, detail={"reason": reason})
        return ChildOutcome("timed_out", error={"code": "timed_out", "message": reason})
    ended = await read_child(core, ref)
    return ended if ended is not None and ended is not MISSING else ChildOutcome("timed_out")


# -- waiting on children ----------------------------------------------------------------------


async def drain_notices(core: AttemptCore, signal: str) -> int:
    """Take every buffered notice of ``signal``: they only woke the run, whose children are
    read from the store next. How many there were."""
    taken = 0
    while True:
        buffered = await core.io(core.store.peek_signal, core.spec.name, core.run_id, signal)
        if buffered is None:
            return taken
        await core.io(
            core.store.pop_signal_match,
            core.spec.name,
            core.run_id,
            signal,
            str(buffered["signal_id"]),
        )
        taken += 1


def backstop(waited: float) -> float:
    """Seconds until a wait that has lasted ``waited`` seconds re-reads its children anyway:
    about as long again, from :data:`BACKSTOP_FIRST` up to :data:`BACKSTOP_MOST`."""
    return min(BACKSTOP_MOST, max(BACKSTOP_FIRST, waited))


async def park_on_children(
    core: AttemptCore, index: int, signal: str, started_at: float, deadline: float | None
) -> None:
    """Park the run until ``signal`` comes, the backstop is due, or ``deadline``; returns
    when the park was superseded (a notice came meanwhile: read the children again)."""
    now = core.clock()
    due = now + backstop(now - started_at)
    if deadline is not None:
        due = min(due, deadline)
    wait = WaitSpec(
        "signal", f"children:{index}:{uuid.uuid4().hex[:8]}", index, due_at=due, signal=signal
    )
    if await core.park([], wait) == WaitOutcome.PARKED:
        raise Suspend()


# -- ctx.run_child ----------------------------------------------------------------------------


async def run_child(
    core: AttemptCore,
    target: object,
    params: object,
    *,
    run_id: str | None,
    parent_close: str,
    timeout: object,
) -> Any:
    """``ctx.run_child``: see :meth:`WorkflowContext.run_child`."""
    name, spec = child_target("ctx.run_child", target)
    checked = child_params(name, spec, params)
    policy = check_policy("ctx.run_child", parent_close)
    seconds = check_timeout("ctx.run_child", timeout)
    if run_id is not None:
        check_name("run id", run_id)
    if not json_ready(checked):
        raise TypeError("ctx.run_child params must be JSON-serializable")
    index, record = core.next_call(StepKind.CHILD, name)
    await core.before_call(index, record)
    if record is not None and record.done:
        return record.result
    if record is not None and record.failed:
        raise rebuild_child_error(record.errors[-1])
    base = {"call_index": index, "step_id": name, "kind": StepKind.CHILD.value}
    member = record.members.get(0) if record is not None else None
    if member is None:
        child_id = run_id or f"{core.run_id}.child{index}"
        started = core.clock()
        member = {
            "i": 0,
            "name": name,
            "run_id": child_id,
            "parent_close": policy,
            "started_at": started,
            "deadline": started + seconds if seconds is not None else None,
        }
        core.record_event(EventKind.STEP_PENDING, {**base, "members": [member]})
        await core.flush()
    ref = ChildRef(name, str(member["run_id"]), str(member.get("parent_close") or policy))
    book(core).open[ref.run_id] = ref
    notify = CHILD_NOTICE + ref.run_id
    prov = provenance(core, index, notify, ref.parent_close)
    if record is None:
        await submit_child(core, ref, checked, spec, prov)
    started_at = float(member.get("started_at") or core.clock())
    deadline = member.get("deadline")
    while True:
        await drain_notices(core, notify)
        outcome = await read_child(core, ref)
        if outcome is MISSING:
            await submit_child(core, ref, checked, spec, prov)  # journaled, never submitted
            continue
        if outcome is None and deadline is not None and core.clock() >= float(deadline):
            outcome = await end_child(
                core, ref, f"ctx.run_child timeout of {seconds or 0:g}s passed"
            )
        if outcome is not None:
            book(core).open.pop(ref.run_id, None)
            return await _journal_child_outcome(core, base, ref, outcome)
        await park_on_children(
            core, index, notify, started_at, float(deadline) if deadline is not None else None
        )


async def _journal_child_outcome(
    core: AttemptCore, base: dict[str, Any], ref: ChildRef, outcome: ChildOutcome
) -> Any:
    if outcome.ok:
        core.record_event(
            EventKind.STEP_DONE,
            {**base, "result": outcome.result},
            what=f"result of child run {ref.run_id!r}",
        )
        await core.flush()
        return outcome.result
    error = child_error(ref, outcome)
    core.record_event(
        EventKind.STEP_ERROR,
        {**base, "attempt": 1, "final": True, "error": describe_child_error(error)},
    )
    await core.flush()
    raise error
