"""The caller's side of ``ctx.interrupt``, as functions of the store and clock: the question a
run waits on (:func:`open_question`) and answering it (:func:`resume`, which
``client.resume`` and ``lockgate runs resume`` make; :func:`send_answer`). Awaiting a run that
may ask some is the client's (``client/_interrupts.py``).

Which interrupt a run waits on, and whether it is still open, is read from its journal: an
interrupt is open from its ``run:interrupted`` until its ``run:resumed`` or its
``run:wait_timed_out``, while the run has not ended. An answer is the signal the interrupt
takes (see ``workflow/_interrupt.py``), sent with the idempotency key ``resume:{wait_id}``,
so of two answers racing for one interrupt the store keeps the first and refuses the other.
An answer sent while the run is not parked on the interrupt is buffered for it; should the
interrupt have reached its deadline between the journal read and the send, the answer is
taken back out of the buffer and refused, so an answer is applied or refused, never kept for
nothing.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

from lockgate._clock import Clock, iso
from lockgate._errors import (
    ErrorCode,
    RunNotFoundError,
    RunNotWaitingError,
    describe_error,
)
from lockgate._names import check_name, check_optional
from lockgate.journal._events import EventKind, RunEvent
from lockgate.runs._chains import live_run
from lockgate.runs._submit import check_cap
from lockgate.stores._base import Store
from lockgate.stores._calls import call_store
from lockgate.stores._types import interrupt_signal
from lockgate.workflow._interrupt import (
    InterruptAction,
    check_answer,
    parse_action,
)
from lockgate.workflow._spec import check_text, json_ready

#: Times a resume follows a run that moved on (continued) between finding it and reading it.
MAX_MOVES = 64


@dataclass(frozen=True)
class Question:
    """An interrupt a run asked, as its ``run:interrupted`` journals it. ``event_id`` is
    that event's place in the run's journal (its ``run_seq``)."""

    wait_id: str
    call_index: int
    payload: dict[str, Any]
    expects: str
    deadline: float | None
    event_id: str | None


def _question(event: RunEvent) -> Question:
    p = event.payload
    payload = p.get("payload")
    deadline = p.get("deadline")
    return Question(
        wait_id=str(p["wait_id"]),
        call_index=int(p.get("call_index", -1)),
        payload=dict(payload) if isinstance(payload, dict) else {},
        expects=str(p.get("expects") or "approval"),
        deadline=float(deadline) if deadline is not None else None,
        event_id=str(event.run_seq) if event.run_seq is not None else None,
    )


def open_question(name: str, run_id: str, events: list[RunEvent], wait_id: str | None) -> Question:
    """The interrupt ``wait_id`` of the run, or the one it waits on now when None, while it is
    open; else :class:`RunNotWaitingError` saying why not."""
    asked: dict[str, RunEvent] = {}
    closed: dict[str, str] = {}
    for event in events:
        key = event.payload.get("wait_id")
        if event.kind == EventKind.RUN_INTERRUPTED:
            asked[str(key)] = event
        elif event.kind == EventKind.RUN_RESUMED and str(key) in asked:
            closed.setdefault(str(key), "was answered already")
        elif event.kind == EventKind.RUN_WAIT_TIMED_OUT and str(key) in asked:
            closed.setdefault(str(key), "reached its deadline unanswered")
        elif event.is_terminal:
            raise RunNotWaitingError(
                f"run {run_id!r} of {name!r} has ended: it waits on no interrupt"
            )
    waiting = [event for key, event in asked.items() if key not in closed]
    now = _question(waiting[-1]) if waiting else None
    if wait_id is None:
        if now is None:
            last = next(reversed(asked), None)
            why = f" (its last, {last}, {closed[last]})" if last is not None else ""
            raise RunNotWaitingError(
                f"run {run_id!r} of {name!r} is not waiting on an interrupt{why}"
            )
        return now
    if now is not None and now.wait_id == wait_id:
        return now
    if wait_id in closed:
        why = f"{wait_id} of run {run_id!r} {closed[wait_id]}"
    else:
        why = f"run {run_id!r} of {name!r} never asked {wait_id}"
    also = f"; it waits on {now.wait_id} now" if now is not None else ""
    raise RunNotWaitingError(why + also)


async def journal_of(store: Store, name: str, run_id: str) -> list[RunEvent]:
    """The run's journal; :class:`RunNotFoundError` for none."""
    events: list[RunEvent] = await call_store(store, store.load_run, name, run_id)
    if not events:
        raise RunNotFoundError(name, run_id)
    return events


async def resume(
    store: Store,
    clock: Clock,
    name: str,
    run_id: str,
    action: InterruptAction | str,
    value: Any,
    wait_id: str | None,
) -> Question:
    """See :meth:`WorkflowClient.resume`; returns the question answered."""
    check_name("workflow name", name)
    check_name("run id", run_id, length=False)
    check_optional("wait id", wait_id)
    parse_action(action)  # the action and value alone, before anything is read
    check_text(value, "the value of an answer to an interrupt")
    if not json_ready(value):
        raise ValueError("the value of an answer to an interrupt must be JSON data")
    await check_cap(store, name, value, "value of an answer to an interrupt")

    # The answer goes to the run that asked, once: not through ``on_live_run``, which acts
    # again on a successor, where it could answer a later question no one answered. A run
    # that moved on before its journal was read is followed to the run carrying the work.
    for _ in range(MAX_MOVES):
        tail, _ = await live_run(store, name, run_id)
        events = await journal_of(store, name, tail)
        if events[-1].kind == EventKind.RUN_CONTINUED:
            run_id = tail
            continue
        question = open_question(name, tail, events, wait_id)
        chosen = check_answer(question.expects, question.wait_id, action, value)
        await send_answer(
            store, clock, name, tail, question.wait_id, {"action": chosen.value, "value": value}
        )
        return question
    raise RunNotWaitingError(f"run {run_id!r} of {name!r} kept moving on; it was not answered")


async def send_answer(
    store: Store, clock: Clock, name: str, run_id: str, wait_id: str, answer: dict[str, Any]
) -> None:
    """Send ``answer`` to the open interrupt ``wait_id`` (see the module docstring)."""
    signal, key = interrupt_signal(wait_id), f"resume:{wait_id}"
    sent = await call_store(
        store,
        store.send_signal,
        name,
        run_id,
        signal,
        answer,
        iso(clock()),
        idempotency_key=key,
    )
    if sent == "duplicate":
        raise RunNotWaitingError(f"{wait_id} of run {run_id!r} was answered already")
    if sent == "rejected":
        raise RunNotWaitingError(
            f"run {run_id!r} of {name!r} has ended or is being cancelled; {wait_id} takes no answer"
        )
    if sent != "buffered":
        return  # delivered: the run was parked on it, and is queued with its answer
    events = await journal_of(store, name, run_id)
    try:
        open_question(name, run_id, events, wait_id)
    except RunNotWaitingError:
        if any(
            e.kind == EventKind.RUN_RESUMED
            and e.payload.get("wait_id") == wait_id
            and e.payload.get("signal_id") == key
            for e in events
        ):
            return  # the run took this answer already
        await call_store(store, store.pop_signal_match, name, run_id, signal, key)
        raise


async def fail_interrupt(
    store: Store, clock: Clock, name: str, run_id: str, wait_id: str, exc: BaseException
) -> None:
    """Answer the interrupt ``wait_id`` with the failure of the handler that could not: the
    body's ``ctx.interrupt`` raises :class:`InterruptHandlerFailed`. An interrupt no longer
    open is left as it is."""
    error = {**describe_error(exc), "code": ErrorCode.INTERRUPT_HANDLER_FAILED.value}
    with contextlib.suppress(RunNotWaitingError):
        await send_answer(store, clock, name, run_id, wait_id, {"error": error})
