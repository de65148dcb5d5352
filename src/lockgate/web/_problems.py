"""RFC 9457 problem details from lockgate's error tree.

Every error the API answers with is ``application/problem+json``: ``type`` (a URN naming our
:class:`ErrorCode`), ``title``, ``status``, ``detail``, ``code`` (the ``ErrorCode``) and, for
bad input, ``field`` (the part of the request that is wrong). A user's mistake is a 4xx; only
an engine or store failure is a 5xx."""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

from starlette.responses import JSONResponse

from lockgate._errors import (
    CapabilityMissing,
    ContinuationChainError,
    DuplicateRunError,
    ErrorCode,
    IdempotencyConflict,
    InvalidNameError,
    InvalidParamsError,
    InvalidTextError,
    LockgateError,
    PayloadTooLarge,
    QueryError,
    RetryRefused,
    RunFinishedError,
    RunNotFoundError,
    RunNotStartedError,
    RunNotWaitingError,
    StoreFault,
    UpdateError,
    UpdateRejected,
    UpdateTimeout,
    one_line,
)

PROBLEM_JSON = "application/problem+json"
#: Seconds a client is asked to wait before it retries a 429 or 503.
RETRY_AFTER_S = 1

#: The status of each error class; the first match in order wins (subclasses first).
_STATUS: tuple[tuple[type[BaseException], int], ...] = (
    (InvalidNameError, 400),
    (InvalidParamsError, 422),
    (InvalidTextError, 422),
    (PayloadTooLarge, 413),
    (RunNotFoundError, 404),
    (IdempotencyConflict, 409),
    (DuplicateRunError, 409),
    (RunFinishedError, 409),
    (RunNotStartedError, 409),
    (RunNotWaitingError, 409),
    (RetryRefused, 409),
    (ContinuationChainError, 409),
    (UpdateRejected, 422),
    (UpdateError, 409),
    (QueryError, 422),
    (UpdateTimeout, 504),
    (CapabilityMissing, 501),
    # The store away, or the server's file lost under it: not the caller's mistake, not a 400.
    (StoreFault, 503),
)


class ProblemError(Exception):
    """A refusal the API decides itself (not one from the client): answered as a problem."""

    def __init__(self, status: int, code: str, detail: str, *, field: str | None = None) -> None:
        super().__init__(detail)
        self.status = status
        self.code = code
        self.detail = detail
        self.field = field


def problem_type(code: str) -> str:
    return f"urn:lockgate:error:{code}"


def problem(
    status: int,
    code: str,
    detail: str,
    *,
    field: str | None = None,
    headers: dict[str, str] | None = None,
    extra: dict[str, Any] | None = None,
) -> JSONResponse:
    """A problem+json response."""
    body: dict[str, Any] = {
        "type": problem_type(code),
        "title": HTTPStatus(status).phrase,
        "status": status,
        "detail": detail,
        "code": code,
    }
    if field is not None:
        body["field"] = field
    if extra:
        body.update(extra)
    all_headers = dict(headers or {})
    if status in (429, 503) and "Retry-After" not in all_headers:
        all_headers["Retry-After"] = str(RETRY_AFTER_S)
    return JSONResponse(body, status_code=status, headers=all_headers, media_type=PROBLEM_JSON)


def status_for(exc: BaseException) -> int | None:
    """The HTTP status of ``exc``, None for an error that is not the caller's (a 500)."""
    for kind, status in _STATUS:
        if isinstance(exc, kind):
            return status
    if isinstance(exc, LockgateError | ValueError):
        return 400  # a ConfigurationError, ValueError: the request cannot work as given
    return None


def field_of(exc: BaseException) -> str | None:
    if isinstance(exc, InvalidParamsError):
        return f"body.{exc.parameter}" if exc.parameter else "body"
    if isinstance(exc, InvalidNameError):
        return exc.what
    if isinstance(exc, PayloadTooLarge):
        return "body"
    if isinstance(exc, InvalidTextError):
        return "body" if exc.path == "$" else f"body{exc.path[1:]}"
    return None


def from_error(exc: BaseException) -> JSONResponse:
    """The problem for an error a client call raised."""
    status = status_for(exc)
    if status is None:
        return problem(500, "internal", "the server failed; see its log")
    code = exc.code if isinstance(exc, LockgateError) else ErrorCode.INVALID_REQUEST
    return problem(status, str(code), one_line(exc), field=field_of(exc))
