"""The ``@step`` decorator: an atomic, journaled unit of work called from a workflow body."""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import math
import typing
import weakref
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Literal, TypeVar, overload

from pydantic import TypeAdapter, ValidationError

from lockgate._errors import ConfigurationError, StepResultTypeError
from lockgate.workflow._retry import RetryPolicy
from lockgate.workflow._runtime import StepContext, bound_attempt

Effect = Literal["read", "write"]
F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class StepSpec:
    """A step's declaration: how it is named, retried, timed out and its result typed."""

    fn: Callable[..., Any]
    name: str
    effect: Effect = "write"
    retry: RetryPolicy | None = None
    timeout: float | None = None
    context_param: str | None = None
    result_type: Any = None

    @functools.cached_property
    def adapter(self) -> TypeAdapter[Any] | None:
        if self.result_type is None:
            return None
        return TypeAdapter(self.result_type)

    def to_journal(self, value: Any) -> Any:
        """Validate ``value`` against the return annotation and turn it into JSON data."""
        adapter = self.adapter
        if adapter is None:
            # Through JSON now, so the live attempt gets exactly what a replay will: a tuple
            # comes back as a list on both.
            try:
                return json.loads(json.dumps(value, allow_nan=False))
            except (TypeError, ValueError) as exc:
                raise StepResultTypeError(
                    self.name,
                    TypeError(
                        f"{type(value).__name__} is not JSON-serializable; annotate the "
                        f"step's return type or return plain data"
                    ),
                ) from exc
        try:
            validated = adapter.validate_python(value)
            return adapter.dump_python(validated, mode="json")
        except ValidationError as exc:
            raise StepResultTypeError(self.name, exc) from exc

    def from_journal(self, data: Any) -> Any:
        """The value a journaled result stands for, typed as the step declares."""
        adapter = self.adapter
        return data if adapter is None else adapter.validate_python(data)

    async def invoke(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], step_ctx: StepContext
    ) -> Any:
        """Call the function once; a sync one runs on a worker thread."""
        if self.context_param is not None:
            kwargs = {**kwargs, self.context_param: step_ctx}
        if inspect.iscoroutinefunction(self.fn):
            return await self.fn(*args, **kwargs)
        import asyncio

        result = await asyncio.to_thread(self.fn, *args, **kwargs)
        if inspect.isawaitable(result):
            return await result
        return result


def _hints(fn: Callable[..., Any]) -> dict[str, Any]:
    try:
        return typing.get_type_hints(fn)
    except Exception:
        return dict(getattr(fn, "__annotations__", {}) or {})


def _context_param(fn: Callable[..., Any], hints: dict[str, Any]) -> str | None:
    for pname, hint in hints.items():
        if pname != "return" and (hint is StepContext or hint == "StepContext"):
            return pname
    return None


def _result_type(hints: dict[str, Any]) -> Any:
    if "return" not in hints:
        return None
    hint = hints["return"]
    origin = typing.get_origin(hint)
    if origin in (Awaitable, Coroutine):
        args = typing.get_args(hint)
        hint = args[-1] if args else Any
    if hint is Any:
        return None
    return hint


def _build(
    fn: Callable[..., Any],
    *,
    name: str | None,
    effect: str,
    retry: RetryPolicy | None,
    timeout: float | None,
) -> StepSpec:
    if not callable(fn):
        raise ConfigurationError(f"a step must be callable, got {fn!r}")
    if effect not in ("read", "write"):
        raise ConfigurationError(f"step effect must be 'read' or 'write', got {effect!r}")
    if retry is not None and not isinstance(retry, RetryPolicy):
        raise ConfigurationError(f"step retry must be a RetryPolicy, got {type(retry).__name__}")
    if timeout is not None and (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not math.isfinite(timeout)
        or timeout <= 0
    ):
        raise ConfigurationError(f"step timeout must be a number of seconds > 0, got {timeout!r}")
    step_name = str(name or getattr(fn, "__qualname__", None) or getattr(fn, "__name__", "step"))
    hints = _hints(fn)
    return StepSpec(
        fn=fn,
        name=step_name,
        effect=effect,  # type: ignore[arg-type]
        retry=retry,
        timeout=timeout,
        context_param=_context_param(fn, hints),
        result_type=_result_type(hints),
    )


_SPECS: weakref.WeakKeyDictionary[Any, StepSpec] = weakref.WeakKeyDictionary()


def step_spec_for(
    fn: Callable[..., Any], *, name: str | None = None, retry: RetryPolicy | None = None
) -> StepSpec:
    """The spec ``ctx.step`` journals ``fn`` under: its ``@step`` declaration when it has one,
    else one built (and cached) from the callable itself."""
    declared: StepSpec | None = getattr(fn, "__lockgate_step__", None)
    base = declared
    if base is None:
        try:
            base = _SPECS.get(fn)
        except TypeError:
            base = None
        if base is None:
            base = _build(fn, name=None, effect="write", retry=None, timeout=None)
            with contextlib.suppress(TypeError):
                _SPECS[fn] = base
    if name is None and retry is None:
        return base
    if retry is not None and not isinstance(retry, RetryPolicy):
        raise ConfigurationError(f"ctx.step(retry=...) must be a RetryPolicy, got {retry!r}")
    return StepSpec(
        fn=base.fn,
        name=name or base.name,
        effect=base.effect,
        retry=retry or base.retry,
        timeout=base.timeout,
        context_param=base.context_param,
        result_type=base.result_type,
    )


@overload
def step(fn: F, /) -> Callable[..., Coroutine[Any, Any, Any]]: ...


@overload
def step(
    fn: None = None,
    /,
    *,
    name: str | None = None,
    effect: Effect = "write",
    retry: RetryPolicy | None = None,
    timeout: float | None = None,
) -> Callable[[F], Callable[..., Coroutine[Any, Any, Any]]]: ...


def step(
    fn: F | None = None,
    /,
    *,
    name: str | None = None,
    effect: Effect = "write",
    retry: RetryPolicy | None = None,
    timeout: float | None = None,
) -> Any:
    """Declare a durable step, called from a workflow body as ``await my_step(...)``.

    Its result is journaled once it succeeds, so a replay returns it without running the step
    again. ``effect="write"`` (the default) journals ``step:pending`` before the call, so an
    attempt that died mid-step is known to be in doubt; ``"read"`` skips that write. ``retry``
    retries failures, ``timeout`` bounds one try. The result is validated against the return
    annotation; a mismatch raises :class:`StepResultTypeError`.
    """

    def decorate(body: F) -> Callable[..., Coroutine[Any, Any, Any]]:
        spec = _build(body, name=name, effect=effect, retry=retry, timeout=timeout)

        @functools.wraps(body)
        def call(*args: Any, **kwargs: Any) -> Coroutine[Any, Any, Any]:
            attempt = bound_attempt("step", spec.name)
            return attempt.run_step(spec, args, kwargs)

        call.__lockgate_step__ = spec  # type: ignore[attr-defined]
        return call

    if fn is not None:
        return decorate(fn)
    return decorate
