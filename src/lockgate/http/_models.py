"""Pydantic models of every request and response body the API documents."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from lockgate.journal._events import RunEvent
from lockgate.stores._types import RunInfo
from lockgate.workflow._spec import readable

_TEXT = Field(default=None, max_length=1000)


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Problem(BaseModel):
    """An RFC 9457 problem; ``code`` is lockgate's ``ErrorCode``."""

    type: str
    title: str
    status: int
    detail: str
    code: str
    field: str | None = None


class Submitted(BaseModel):
    name: str
    run_id: str
    #: False when an ``Idempotency-Key`` repeat returned the run the first request started.
    created: bool


class Triggered(BaseModel):
    #: The run this event started by completing a ``Collect`` batch, else None.
    run_id: str | None


class Run(BaseModel):
    name: str
    run_id: str
    status: str
    submitted_at: float
    params: dict[str, Any]
    owner: str | None
    metadata: dict[str, Any]
    version: str
    version_behavior: str
    lock_holder: str | None
    wait: dict[str, Any] | None
    cancel_requested_at: str | None

    @classmethod
    def of(cls, info: RunInfo) -> Run:
        # readable: a run stored with a lone surrogate must not fail the page it is on.
        return cls.model_validate(readable(info.to_dict()))


class RunPage(BaseModel):
    runs: list[Run]
    #: Pass as ``?cursor=`` for the next page; None at the end. A filtered page may hold
    #: fewer runs than ``limit`` (none, even) and still have a next page.
    next_cursor: str | None


class RunDetail(BaseModel):
    run: Run
    #: The ``Limit`` and ``Rate`` gates the run was stamped with, from its ``run:init``.
    gates: dict[str, Any]
    #: Why a queued run has not started yet, in one line; None when it is not queued.
    why_waiting: str | None


class Event(BaseModel):
    kind: str
    payload: dict[str, Any]
    run_id: str
    schema_version: str
    run_seq: int | None
    headers: dict[str, str]

    @classmethod
    def of(cls, event: RunEvent) -> Event:
        return cls.model_validate(readable(event.to_dict()))


class Events(BaseModel):
    events: list[Event]


class Interrupt(BaseModel):
    wait_id: str | None
    payload: dict[str, Any]


class Result(BaseModel):
    run_id: str
    status: str
    #: True once the run ended; ``result`` or ``error`` then says how.
    done: bool
    result: Any = None
    error: dict[str, Any] | None = None
    #: The question a run parked on ``ctx.interrupt`` asks (answer it with ``/resume``).
    interrupt: Interrupt | None = None


class Signalled(BaseModel):
    outcome: Literal["delivered", "buffered", "duplicate"]


class Updated(BaseModel):
    #: Send it again as ``Idempotency-Key`` to ask for the outcome of an update not done yet.
    update_id: str
    #: False (with status 202) when no worker applied it within ``timeout``: it stays queued.
    done: bool
    result: Any = None


class QueryRequest(_Request):
    args: list[Any] = Field(default_factory=list)
    kwargs: dict[str, Any] = Field(default_factory=dict)


class Queried(BaseModel):
    result: Any = None


class Reason(_Request):
    reason: str | None = _TEXT


class ResumeRequest(_Request):
    action: Literal["approve", "reject", "respond", "edit"]
    value: Any = None
    wait_id: str | None = Field(default=None, min_length=1, max_length=200)


class Accepted(BaseModel):
    run_id: str
    #: What was asked: the run acts on it at its next boundary.
    accepted: Literal["cancel", "pause", "unpause", "resume"]


class Terminated(BaseModel):
    run_id: str
    outcome: Literal["terminated", "already_ended", "not_found"]
    #: Each run the cascade terminated with it, as ``[name, run_id]``.
    ended: list[list[str]]


class Health(BaseModel):
    status: str
    error: str | None = None
