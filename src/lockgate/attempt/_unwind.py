"""How an attempt ends and unwinds: outcomes, the engine's unwinding signals, and the
journal form of errors."""

from __future__ import annotations

import enum
import importlib
from typing import Any

from lockgate._errors import (
    ErrorCode,
    LockgateError,
    StepFailedError,
    UserFailure,
    describe_error,
)
from lockgate.workflow._spec import json_ready


class AttemptOutcome(enum.StrEnum):
    """How one attempt ended."""

    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    SUSPENDED = "suspended"
    ABANDONED = "abandoned"
    HANDED_BACK = "handed_back"
    HANDED_ON = "handed_on"
    CONTINUED = "continued"
    ALREADY_ENDED = "already_ended"


class Unwind(BaseException):
    """Unwinds a body; a ``BaseException`` so a body's ``except Exception`` cannot hold it."""


class Suspend(Unwind):
    """The run parked on a wait; the attempt ends with nothing more to write."""


class HandedBack(Unwind):
    """The worker is shutting down: the run went back on the queue at a boundary, unrun past
    it, with no retry counted."""


class HandedOn(Unwind):
    """The run's gates were out of date: a successor stamped with this worker's took it over
    before the body ran, and the run ended ``run:continued``."""


class Cancelled(Unwind):
    """A cancel is latched; the run ends cancelled."""


class LeaseLost(Unwind):
    """The attempt's lease no longer holds the run; it stops without writing."""


class ReplayExhausted(Unwind):
    """A read-only replay reached the end of the journal."""


class Abort(Unwind):
    """The run ends in error whatever the body would do: over a cap, or non-deterministic."""

    def __init__(self, error: LockgateError, *, overflow: bool = False) -> None:
        super().__init__(str(error))
        self.error = error
        self.overflow = overflow


class StoreFailed(Unwind):
    def __init__(self, cause: Exception) -> None:
        super().__init__(str(cause))
        self.cause = cause


def rebuild_error(error: dict[str, Any], step_id: str) -> Exception:
    """The exception a journaled step failure stands for: its own type when that type can be
    imported and rebuilt from its recorded arguments, else :class:`StepFailedError`."""
    type_path = str(error.get("type", ""))
    module_name, _, qualname = type_path.partition(":")
    message = str(error.get("message", ""))
    user_code = error.get("user_code")
    try:
        target: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            target = getattr(target, part)
        if isinstance(target, type) and issubclass(target, Exception):
            args = error.get("args")
            exc = target(*args) if isinstance(args, list) else target(message)
            if isinstance(exc, UserFailure) and isinstance(user_code, str):
                exc.user_code = user_code
            return exc
    except Exception:
        pass
    return StepFailedError(
        message or type_path,
        step_id=step_id,
        error_type=type_path,
        user_code=user_code if isinstance(user_code, str) else None,
    )


def describe_with_args(exc: BaseException) -> dict[str, Any]:
    described = describe_error(exc)
    if exc.args and json_ready(list(exc.args)):
        described["args"] = list(exc.args)
    return described


def run_error_payload(exc: BaseException) -> dict[str, Any]:
    """The ``run:error`` payload for an exception that escaped the body."""
    described = describe_error(exc)
    code = exc.code if isinstance(exc, LockgateError) else ErrorCode.USER_ERROR
    if isinstance(exc, UserFailure):
        code = exc.code
    payload: dict[str, Any] = {
        "code": str(code),
        "message": str(exc) or type(exc).__name__,
        "error": described,
    }
    if "user_code" in described:
        payload["user_code"] = described["user_code"]
    return payload
