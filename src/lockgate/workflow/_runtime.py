"""The runtime a body's calls reach, as ``workflow/`` sees it: the :class:`Runtime` protocol
that an attempt at a run implements (``attempt.Attempt``), the context variables that bind a
running task to its attempt and mark the atomic regions (steps, update handlers) no durable
operation may start from, and :class:`StepContext`, what a step is handed.

The body's API (``workflow/_context.py``, ``workflow/_step.py``) is written against the
protocol alone, so ``workflow/`` imports nothing of the runtime; temporalio's
``temporalio/workflow/_context.py`` ``_Runtime`` is the model.
"""

from __future__ import annotations

import contextvars
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

from lockgate._errors import NestedDurableOperationError, UnboundContextError

if TYPE_CHECKING:
    from lockgate.workflow._interrupt import InterruptResponse
    from lockgate.workflow._retry import RetryPolicy
    from lockgate.workflow._source import Batch, Source, StreamProgress
    from lockgate.workflow._spec import WorkflowSpec
    from lockgate.workflow._step import StepSpec


class Runtime(Protocol):
    """One attempt at a run, as the body's context calls it. Each durable operation takes the
    next call position and is journaled there; on replay the journaled outcome is returned.
    Arguments reach it checked (``workflow/_context.py``)."""

    run_id: str
    spec: WorkflowSpec
    params: dict[str, Any]
    metadata: dict[str, Any]

    async def run_step(
        self, spec: StepSpec, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any: ...

    async def sleep(self, seconds: float) -> None: ...

    async def wait_for_signal(self, signal: str, timeout: float | None) -> Any: ...

    async def emit(self, kind: str, payload: dict[str, Any]) -> None: ...

    def now(self) -> datetime: ...

    def uuid4(self) -> uuid.UUID: ...

    def random(self) -> float: ...

    def register_query(self, name: str, fn: Callable[..., Any]) -> None: ...

    def register_update(
        self, name: str, fn: Callable[..., Any], validator: Callable[..., Any] | None
    ) -> None: ...

    async def continue_as_new(self, params: dict[str, Any]) -> NoReturn: ...

    async def interrupt(
        self, question: dict[str, Any], expects: str, timeout: float | None
    ) -> InterruptResponse: ...

    async def consume(
        self,
        source: Source[Any],
        handler: Callable[[Batch[Any]], Any],
        *,
        name: str,
        max_batches: int | None,
        poll_timeout: float,
        retry: RetryPolicy | None,
    ) -> StreamProgress: ...

    async def run_child(
        self,
        target: object,
        params: object,
        *,
        run_id: str | None,
        parent_close: str,
        timeout: object,
    ) -> Any: ...

    async def fan_out(
        self,
        target: Callable[..., Any] | str,
        items: Iterable[Any],
        *,
        max_in_flight: int,
        parent_close: str,
    ) -> list[Any]: ...

    async def signal(self, name: str, run_id: str, signal: str, payload: dict[str, Any]) -> str: ...


@dataclass(frozen=True)
class Boundary:
    """An atomic region a durable operation may not be started from."""

    kind: str
    name: str


_attempt: contextvars.ContextVar[Runtime | None] = contextvars.ContextVar(
    "lockgate_attempt", default=None
)
_boundary: contextvars.ContextVar[Boundary | None] = contextvars.ContextVar(
    "lockgate_boundary", default=None
)


def bound_attempt(operation: str, name: str) -> Runtime:
    """The attempt running this task, for a durable ``operation`` called ``name``.

    Raises :class:`UnboundContextError` outside a run and
    :class:`NestedDurableOperationError` inside a step or an update handler."""
    boundary = _boundary.get()
    if boundary is not None:
        raise NestedDurableOperationError(operation, name, boundary.kind, boundary.name)
    attempt = _attempt.get()
    if attempt is None:
        raise UnboundContextError(
            f"{operation} {name!r} was called outside a workflow run; "
            f"call it from a workflow body (await it there)"
        )
    return attempt


def enter_boundary(kind: str, name: str) -> contextvars.Token[Boundary | None]:
    return _boundary.set(Boundary(kind, name))


def exit_boundary(token: contextvars.Token[Boundary | None]) -> None:
    _boundary.reset(token)


def bind_attempt(attempt: Runtime | None) -> contextvars.Token[Runtime | None]:
    return _attempt.set(attempt)


def unbind_attempt(token: contextvars.Token[Runtime | None]) -> None:
    _attempt.reset(token)


@dataclass(frozen=True)
class StepContext:
    """What a step sees when it declares a parameter annotated ``StepContext``.

    ``idempotency_key`` is stable across every attempt and replay of this call: pass it to an
    external API so a retried effect is applied once there."""

    run_id: str
    run_name: str
    step_id: str
    call_index: int
    attempt: int
    metadata: Mapping[str, Any] = field(default_factory=dict)
    _is_cancelled: Callable[[], bool] = field(default=lambda: False, repr=False)

    @property
    def idempotency_key(self) -> str:
        return f"{self.run_id}:{self.call_index}:{self.step_id}"

    @property
    def cancelled(self) -> bool:
        """True once a cancel of the run has been seen; a long step may stop early."""
        return self._is_cancelled()
