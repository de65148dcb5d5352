"""``ctx.signal``: a signal sent from a body to another run, once.

The send takes a call position (``StepKind.SIGNAL_SEND``) and goes out with an idempotency key
made of this run's id and that position, to the target's live tail (``runs/_signals.py``, as
``client.signal`` sends). An attempt that dies after the send and before its outcome is
journaled sends it again on replay with the same key, and the target's store keeps it once
(the answer is then ``"duplicate"``). The outcome (the store's answer, or the error the send
met) is journaled and returned on every later replay without sending.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lockgate import _failpoints as failpoints
from lockgate._errors import (
    LockgateError,
    LockLost,
    RunNotFoundError,
    StoreFault,
)
from lockgate.attempt._unwind import (
    LeaseLost,
    StoreFailed,
    describe_with_args,
    rebuild_error,
)
from lockgate.journal._events import EventKind, StepKind
from lockgate.runs._signals import send_signal as runs_signal

if TYPE_CHECKING:
    from lockgate.attempt._attempt_core import AttemptCore


async def send_signal(
    core: AttemptCore, name: str, run_id: str, signal: str, payload: dict[str, Any]
) -> str:
    """Send ``signal`` to the run ``run_id`` of ``name`` once; see ``ctx.signal``."""
    index, record = core.next_call(StepKind.SIGNAL_SEND, signal)
    await core.before_call(index, record)
    if record is not None and record.done:
        return str(record.result)
    if record is not None and record.failed:
        error = record.errors[-1]
        target = error.get("target") or {}
        if error.get("code") == RunNotFoundError.code and target:
            raise RunNotFoundError(str(target.get("name")), str(target.get("run_id")))
        raise rebuild_error(error, signal)
    base = {
        "call_index": index,
        "step_id": signal,
        "kind": StepKind.SIGNAL_SEND.value,
        "target": {"name": name, "run_id": run_id},
    }
    try:
        answer = await runs_signal(
            core.store,
            core.clock,
            name,
            run_id,
            signal,
            payload,
            signal_id=f"signal-send:{core.run_id}:{index}",
        )
    except LockLost as exc:
        raise LeaseLost() from exc
    except StoreFault as exc:
        raise StoreFailed(exc) from exc
    except LockgateError as exc:
        described = describe_with_args(exc)
        described["target"] = {"name": name, "run_id": run_id}
        core.record_event(
            EventKind.STEP_ERROR, {**base, "attempt": 1, "final": True, "error": described}
        )
        await core.flush()
        raise
    failpoints.hit("after_step_effect")  # sent; its outcome not yet journaled
    core.record_event(EventKind.STEP_DONE, {**base, "attempt": 1, "result": answer})
    await core.flush()
    return answer
