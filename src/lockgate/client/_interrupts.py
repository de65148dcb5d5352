"""Awaiting a run that may ask questions (``client.result`` and ``run_and_await`` with
``on_interrupt``): each question the run waits on is put to the caller's handler and its
answer sent (``runs/_interrupts.py``), until the run ends or the timeout passes.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from lockgate._errors import (
    DurableInterrupt,
    DurableInvocationCancelled,
    DurableInvocationError,
    DurableInvocationTimeout,
    RunNotFoundError,
    RunNotWaitingError,
)
from lockgate.journal._events import EventKind, RunEvent, RunStatus
from lockgate.runs._chains import live_run
from lockgate.runs._interrupts import (
    Question,
    fail_interrupt,
    journal_of,
    open_question,
    send_answer,
)
from lockgate.stores._calls import call_store
from lockgate.workflow._interrupt import InterruptAction, InterruptResponse, check_answer

if TYPE_CHECKING:
    from lockgate.client._client import WorkflowClient

#: What answers a run's interrupts for a caller awaiting it: called with the question (the
#: ``payload`` the body gave ``ctx.interrupt``), sync or async; an :class:`InterruptResponse`
#: it returns chooses the action, any other value is the value of a RESPOND.
InterruptHandler = Callable[[dict[str, Any]], Any | Awaitable[Any]]


def run_outcome(name: str, run_id: str, last: RunEvent | None) -> Any:
    """The result the run's last event ``last`` holds, or the error it ended with."""
    if last is None:
        raise RunNotFoundError(name, run_id)
    if last.kind == EventKind.RUN_COMPLETE:
        return last.payload.get("result")
    payload = last.payload
    detail = str(payload.get("message") or payload.get("code") or "failed")
    error = dict(payload.get("error") or {})
    if "user_code" in payload:
        error.setdefault("user_code", payload["user_code"])
    if payload.get("code") in ("cancelled", "terminated"):
        raise DurableInvocationCancelled(name, run_id, detail, error=error)
    raise DurableInvocationError(name, run_id, detail, error=error)


async def _answer_with(
    client: WorkflowClient,
    name: str,
    run_id: str,
    question: Question,
    handler: InterruptHandler,
    suspend_on: tuple[type[BaseException], ...],
) -> None:
    """Ask ``handler`` for the answer to ``question`` and send it. A handler that raises, or
    answers with an action the question does not take, fails the interrupt and its exception
    propagates; a :class:`DurableInterrupt` or an instance of ``suspend_on`` leaves the run
    parked on the question, and propagates."""
    try:
        reply = handler(dict(question.payload))
        if inspect.isawaitable(reply):
            reply = await reply
        if isinstance(reply, InterruptResponse):
            action, value = reply.action, reply.value
        else:
            action, value = InterruptAction.RESPOND, reply
        chosen = check_answer(question.expects, question.wait_id, action, value)
    except BaseException as exc:
        if isinstance(exc, (DurableInterrupt, *suspend_on)) or not isinstance(exc, Exception):
            raise
        await fail_interrupt(client.store, client.clock, name, run_id, question.wait_id, exc)
        raise
    # Answered by someone else meanwhile, or past its deadline: either way, wait on.
    with contextlib.suppress(RunNotWaitingError):
        await send_answer(
            client.store,
            client.clock,
            name,
            run_id,
            question.wait_id,
            {"action": chosen.value, "value": value},
        )


async def await_result(
    client: WorkflowClient,
    name: str,
    run_id: str,
    *,
    timeout: float | None = None,
    on_interrupt: InterruptHandler | None = None,
    suspend_on: tuple[type[BaseException], ...] = (),
    advance: Callable[[str, str], Awaitable[None]] | None = None,
) -> Any:
    """See :meth:`WorkflowClient.result`; ``suspend_on`` as ``run_and_await`` takes it.
    ``advance(name, run_id)`` is awaited between looks (the client's poll interval by
    default; an inline runner's client drives the run instead)."""
    if on_interrupt is not None and not callable(on_interrupt):
        raise TypeError(f"on_interrupt must be callable, not {on_interrupt!r}")
    deadline = None if timeout is None else client.clock() + timeout
    answered: set[tuple[str, str]] = set()
    while True:
        run_id, info = await live_run(client.store, name, run_id)
        if info.status.is_terminal:
            last = await call_store(client.store, client.store.get_last_event, name, run_id)
            return run_outcome(name, run_id, last)
        if info.status == RunStatus.INTERRUPTED:
            try:
                question: Question | None = open_question(
                    name, run_id, await journal_of(client.store, name, run_id), None
                )
            except RunNotWaitingError:
                question = None  # answered or ended since the status was read
            if question is not None and (run_id, question.wait_id) not in answered:
                if on_interrupt is None:
                    raise DurableInterrupt(
                        name, run_id, question.event_id, question.payload, wait_id=question.wait_id
                    )
                await _answer_with(client, name, run_id, question, on_interrupt, suspend_on)
                answered.add((run_id, question.wait_id))
                continue
        if deadline is not None and client.clock() >= deadline:
            raise DurableInvocationTimeout(
                name, run_id, f"still {info.status.value} after {timeout:g}s"
            )
        if advance is not None:
            await advance(name, run_id)
        else:
            await client.clock.sleep(client.poll_interval)
