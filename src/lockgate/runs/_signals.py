"""Sending a signal to a run: checked, held to its workflow's payload cap, and delivered to
the run that carries the work now (a chain's live tail), once per ``signal_id``. The
client's ``signal`` and a body's ``ctx.signal`` both send through here."""

from __future__ import annotations

import uuid
from typing import Any

from lockgate._clock import Clock, iso
from lockgate._errors import RunFinishedError
from lockgate._names import check_name, check_optional
from lockgate.runs._chains import on_live_run
from lockgate.runs._submit import check_cap
from lockgate.stores._base import Store
from lockgate.stores._calls import call_store
from lockgate.stores._types import INTERRUPT_SIGNAL_PREFIX
from lockgate.workflow._spec import check_text, json_ready


async def send_signal(
    store: Store,
    clock: Clock,
    name: str,
    run_id: str,
    signal: str,
    payload: dict[str, Any] | None = None,
    *,
    signal_id: str | None = None,
) -> str:
    """Send a signal; returns ``"delivered"`` or ``"buffered"``. ``signal_id`` makes a
    retried send apply once: a repeat returns ``"duplicate"`` and keeps nothing (its
    payload is not compared; the first send's stands). Raises :class:`RunFinishedError`
    once the run has ended or a cancel is latched."""
    check_name("signal name", signal)
    check_optional("signal id", signal_id)
    if signal.startswith(INTERRUPT_SIGNAL_PREFIX):
        raise ValueError(
            f"signal name {signal!r} is reserved for the answers of ctx.interrupt; "
            f"answer an interrupt with resume"
        )
    payload = {} if payload is None else payload
    check_text(payload, f"the payload of signal {signal!r}")
    if not isinstance(payload, dict) or not json_ready(payload):
        raise ValueError("a signal payload must be a JSON-serializable dict")
    await check_cap(store, name, payload, f"payload of signal {signal!r}")
    # One id for every send this call makes: a send repeated on a successor (a hand-on
    # landed meanwhile, moving the buffered signal with the run) is then a repeat, not a
    # second signal. The answer is the first send's: its signal is the one kept.
    key = signal_id if signal_id is not None else uuid.uuid4().hex
    answers: list[Any] = []

    async def send(tail: str) -> Any:
        answer = await call_store(
            store,
            store.send_signal,
            name,
            tail,
            signal,
            payload,
            iso(clock()),
            idempotency_key=key,
        )
        if answer == "duplicate" and answers:
            return answers[0]  # kept by this call's earlier send, before the run moved on
        if answer not in ("duplicate", "rejected"):
            answers.append(answer)
        return answer

    result = await on_live_run(store, name, run_id, send, landed=lambda sent: sent != "rejected")
    if result == "rejected":
        raise RunFinishedError(
            f"run {run_id!r} of {name!r} has ended or is being "
            f"cancelled; signal {signal!r} was not kept"
        )
    return str(result)
