"""``ctx.interrupt``: a question put to a person, the run parked until ``client.resume``
answers it.

The call takes a call position of kind ``interrupt``; its wait id
(:func:`~lockgate.workflow._interrupt.interrupt_wait_id`) names that position and the run.

An interrupt is a signal wait underneath, on a signal of its own
(:func:`~lockgate.stores._types.interrupt_signal` of the wait id): an answer sent while the run
is not parked on it (running, or queued by an update) is buffered for that interrupt alone, and
the run takes it when it reaches the interrupt again, so no answer is lost. Live, the attempt
journals ``run:interrupted`` (the question, what it expects, its deadline) in the same step as
it parks on a wait of kind ``interrupt``, which every store reports as ``interrupted``. The
answer, ``{"action", "value"}`` or ``{"error"}`` when the caller's ``on_interrupt`` handler
could not give one, is journaled ``run:resumed`` before the body sees it; a replay returns the
journaled answer. With a timeout the interrupt ends at its deadline, as a signal wait does,
with ``run:wait_timed_out`` and :class:`WaitTimeout` raised in the body.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from lockgate._errors import InterruptHandlerFailed, WaitTimeout
from lockgate.attempt._unwind import Suspend
from lockgate.journal._events import EventKind, StepKind, payload_size
from lockgate.journal._replay import CallRecord
from lockgate.stores._types import WaitOutcome, WaitSpec, interrupt_signal
from lockgate.workflow._interrupt import InterruptResponse, interrupt_wait_id

if TYPE_CHECKING:
    from lockgate.attempt._attempt_core import AttemptCore


def _answered(record: CallRecord, wait_id: str) -> InterruptResponse:
    """The body's side of a journaled answer: the response, or the handler's failure."""
    result = record.result if isinstance(record.result, dict) else {}
    if record.outcome == "failed":
        kind = str(result.get("type") or "an error").rpartition(":")[2]
        detail = f"{kind}: {result['message']}" if result.get("message") else kind
        raise InterruptHandlerFailed(
            f"{wait_id} got no answer: the caller's on_interrupt handler failed ({detail})",
            error=result,
        )
    return InterruptResponse(str(result.get("action")), result.get("value"))


def _timed_out(wait_id: str, index: int, deadline: float | None) -> WaitTimeout:
    when = datetime.fromtimestamp(deadline, UTC) if deadline is not None else None
    return WaitTimeout(
        "interrupt",
        "interrupt",
        index,
        when,
        message=f"{wait_id} got no answer by its deadline",
    )


async def interrupt(
    attempt: AttemptCore, question: dict[str, Any], expects: str, timeout: float | None
) -> InterruptResponse:
    """Ask ``question`` and return its answer: journaled already on a replay, else taken from
    the buffer or waited for parked (see the module docstring)."""
    attempt.spec.check_payload(payload_size(question), "question of ctx.interrupt")
    index, record = attempt.next_call(StepKind.INTERRUPT, "interrupt")
    await attempt.before_call(index, record)
    wait_id = (record.wait_id if record is not None else None) or interrupt_wait_id(
        attempt.run_id, index
    )
    if record is not None and record.outcome in ("resumed", "failed"):
        return _answered(record, wait_id)
    if record is not None:
        deadline = record.due_at
    else:
        deadline = attempt.clock() + timeout if timeout is not None else None
    if record is not None and record.outcome == "timed_out":
        raise _timed_out(wait_id, index, deadline)
    signal = interrupt_signal(wait_id)
    wait = WaitSpec("interrupt", wait_id, index, due_at=deadline, signal=signal)
    opening = (
        []
        if record is not None
        else [
            attempt.new_event(
                EventKind.RUN_INTERRUPTED,
                {
                    "call_index": index,
                    "wait_id": wait_id,
                    "payload": question,
                    "expects": expects,
                    "deadline": deadline,
                },
            )
        ]
    )
    name, run_id = attempt.spec.name, attempt.run_id
    while True:
        buffered = await attempt.io(attempt.store.peek_signal, name, run_id, signal)
        if buffered is not None:
            # Answered before the run parked on it (or while it was parked and then queued for
            # something else): the question goes into the journal first, then the answer.
            attempt.buffer.extend(opening)
            attempt.event_count += len(opening)
            record = _resume(attempt, index, wait_id, buffered)
            await attempt.flush()
            await attempt.io(
                attempt.store.pop_signal_match, name, run_id, signal, str(buffered["signal_id"])
            )
            return _answered(record, wait_id)
        if deadline is not None and attempt.clock() >= deadline:
            attempt.buffer.extend(opening)
            attempt.event_count += len(opening)
            opening = []
            await attempt.flush()
            outcome = await attempt.io(
                attempt.store.time_out_wait, name, run_id, wait_id=wait_id, lease=attempt.lease
            )
            if outcome == WaitOutcome.SUPERSEDED:
                if await attempt.io(attempt.store.peek_signal, name, run_id, signal) is not None:
                    continue  # the answer came first
                attempt.record_event(
                    EventKind.RUN_WAIT_TIMED_OUT, {"call_index": index, "wait_id": wait_id}
                )
                await attempt.flush()
            raise _timed_out(wait_id, index, deadline)
        if await attempt.park(opening, wait) == WaitOutcome.PARKED:
            raise Suspend()


def _resume(attempt: AttemptCore, index: int, wait_id: str, buffered: dict[str, Any]) -> CallRecord:
    """Journal the buffered answer ``buffered`` (the answer signal) as ``run:resumed``, and
    return the call's record as a replay would fold it."""
    answer = buffered.get("payload")
    answer = answer if isinstance(answer, dict) else {}
    base = {"call_index": index, "wait_id": wait_id, "signal_id": str(buffered["signal_id"])}
    record = CallRecord(index, StepKind.INTERRUPT, "interrupt", wait_id=wait_id)
    error = answer.get("error")
    if isinstance(error, dict):
        attempt.record_event(EventKind.RUN_RESUMED, {**base, "error": error})
        record.outcome, record.result = "failed", dict(error)
        return record
    action, value = answer.get("action"), answer.get("value")
    attempt.record_event(
        EventKind.RUN_RESUMED,
        {**base, "action": action, "value": value},
        size=payload_size(value),
        what=f"value of the answer to {wait_id}",
    )
    record.outcome, record.result = "resumed", {"action": action, "value": value}
    return record
