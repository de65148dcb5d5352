"""A :class:`CompositeStore` operation written once, run from a store thread or on the loop.

An operation of the composite (a fenced append, then the copy of the run's new events to the
event log) is a generator of the backend calls it makes (:class:`Call`, or :class:`Together`
for operations that may run side by side): it yields one, is sent the answer (or has the
backend's error thrown in), and returns its result. A store method made with :func:`composed`
drives its operation with plain calls, as any blocking store method does. On the event loop
(``CompositeStore.coroutine_for``), :func:`drive_natively` drives the same generator, making
each call the way the async runtime calls a store (``call_owned``): natively when its backend
has a coroutine for it (a Valkey script on the loop's pipelining client, a Kafka append
awaiting its delivery reports), else on a store thread. So a worker's attempts reach Valkey and
Kafka without a thread each, and their appends share produce batches.

It is the shape of the Valkey store's own operations (``stores/valkey/_loop.py``), one level up.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from typing import Any, Concatenate, ParamSpec, TypeVar

from lockgate.stores._calls import call_owned, native_call

T = TypeVar("T")
P = ParamSpec("P")
S = TypeVar("S")


@dataclass(frozen=True, slots=True)
class Call:
    """Call ``method`` (a bound method of one of the composite's backends) with ``args``."""

    method: Callable[..., Any]
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Together:
    """Run ``ops`` (operations of their own), answered with the list of their results in
    order: one after another from a thread, concurrently on the loop (so their requests share
    the backends' pipelines and batches). An op's error is the whole request's: from a thread
    the ops after it do not run; on the loop they all run to their end first."""

    ops: tuple[Generator[Any, Any, Any], ...]


#: An operation: yields backend calls, is sent their answers, returns its result.
Op = Generator[Call | Together, Any, T]


def drive(op: Op[T]) -> T:
    """Run ``op``, making each call here and now."""
    answer: Any = None
    error: Exception | None = None
    while True:
        try:
            call = op.send(answer) if error is None else op.throw(error)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        try:
            if isinstance(call, Together):
                answer, error = [drive(op) for op in call.ops], None
            else:
                answer, error = call.method(*call.args, **call.kwargs), None
        except Exception as exc:  # thrown into the operation
            answer, error = None, exc


async def drive_natively(op: Op[T]) -> T:
    """Run ``op`` on the running event loop, each call made as ``call_owned`` makes it."""
    answer: Any = None
    error: Exception | None = None
    while True:
        try:
            call = op.send(answer) if error is None else op.throw(error)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        try:
            if isinstance(call, Together):
                # Every op runs to its end (none is left running behind the caller), then
                # the first error, if any, is the request's.
                answers = await asyncio.gather(
                    *(drive_natively(op) for op in call.ops), return_exceptions=True
                )
                failed = next((a for a in answers if isinstance(a, BaseException)), None)
                if failed is not None:
                    raise failed
                answer = answers
            else:
                native = native_call(call.method, call.args, call.kwargs)
                if native is None:
                    native = call_owned(call.method, *call.args, **call.kwargs)
                answer = await native
            error = None
        except Exception as exc:  # thrown into the operation
            answer, error = None, exc


def composed(op: Callable[Concatenate[S, P], Op[T]]) -> Callable[Concatenate[S, P], T]:
    """A store method written as an operation: called, it runs ``op`` with plain calls;
    :func:`composed_op` hands ``op`` itself to ``coroutine_for``."""

    @functools.wraps(op)
    def method(self: S, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return drive(op(self, *args, **kwargs))

    method.__composed_op__ = op  # type: ignore[attr-defined]
    return method


def composed_op(method: Callable[..., Any]) -> Callable[..., Op[Any]] | None:
    """The operation of a method made with :func:`composed` (bound or not), else None."""
    found: Callable[..., Op[Any]] | None = getattr(
        getattr(method, "__func__", method), "__composed_op__", None
    )
    return found
