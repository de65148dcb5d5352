"""How async code calls a store, whose methods are synchronous."""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from lockgate._clock import Clock, SystemClock, block_until, sleep_precisely
from lockgate.stores._base import LifecycleStore

#: Threads that carry blocking store calls. A networked store spends a call waiting on its
#: server, so a worker with many attempts in flight needs more threads than asyncio's default
#: pool (at most cores + 4) to keep them all moving.
STORE_THREADS = 64
_pool: ThreadPoolExecutor | None = None


def _executor() -> ThreadPoolExecutor:
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(max_workers=STORE_THREADS, thread_name_prefix="lockgate-store")
    return _pool


async def call_store(
    store: LifecycleStore, method: Callable[..., Any], *args: Any, **kwargs: Any
) -> Any:
    """Call ``method`` of ``store``: natively on the event loop when the store has a coroutine
    for it (:meth:`~LifecycleStore.coroutine_for`), else on a store thread when the store may
    block on I/O (``blocking_io``), else inline; so the event loop is never held up."""
    return await _call(store, method, *args, **kwargs)


async def call_owned(method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """:func:`call_store` for a bound method of any store, lifecycle or event log (a
    :class:`CompositeStore` calls its backends' methods so): natively when its store has a
    coroutine for it, else on a store thread when its store may block, else inline."""
    return await _call(getattr(method, "__self__", None), method, *args, **kwargs)


def native_call(
    method: Callable[..., Any], args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> Awaitable[Any] | None:
    """The awaitable of ``method(*args, **kwargs)`` made natively on the loop, when the
    method's store has a coroutine for it; else None (:func:`call_owned` then makes it). For
    callers on the hot path, which await it with no coroutine of their own in between."""
    return _native(getattr(method, "__self__", None), method, args, kwargs)


def _native(
    store: Any, method: Callable[..., Any], args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> Awaitable[Any] | None:
    coroutine_for = getattr(store, "coroutine_for", None)
    native = coroutine_for(method) if coroutine_for is not None else None
    return native(*args, **kwargs) if native is not None else None


async def _call(store: Any, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    native = _native(store, method, args, kwargs)
    if native is not None:
        return await native
    if getattr(store, "blocking_io", True):
        call = functools.partial(contextvars.copy_context().run, method, *args, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(_executor(), call)
    return method(*args, **kwargs)


async def call_store_at(
    store: LifecycleStore,
    clock: Clock,
    at: float | None,
    method: Callable[..., Any],
    *args: Any,
    **kwargs: Any,
) -> tuple[Any, float]:
    """:func:`call_store`, made no sooner than ``at`` on ``clock`` (None: now) and as soon
    after it as the machine allows; returns the answer and the time on ``clock`` just before
    the call was made (on the store thread, for a blocking store), from which the caller can
    tell when the store acted without counting the hop to the thread.

    On the system clock a blocking store's call sleeps out the rest of the wait on its store
    thread and is made from there: no trip through the event loop between the wait and the
    call, which costs a few tenths of a millisecond. Otherwise it waits with
    :func:`~lockgate._clock.sleep_precisely`. The thread's wait cannot be cut short, so a
    caller waits out all but the last few milliseconds first."""
    if isinstance(clock, SystemClock) and store.blocking_io and store.coroutine_for(method) is None:

        def on_time() -> tuple[Any, float]:
            if at is not None:
                block_until(at, clock)
            started = clock()
            return method(*args, **kwargs), started

        call = functools.partial(contextvars.copy_context().run, on_time)
        answer: tuple[Any, float] = await asyncio.get_running_loop().run_in_executor(
            _executor(), call
        )
        return answer
    if at is not None:
        await sleep_precisely(clock, at - clock())
    started = clock()
    return await call_store(store, method, *args, **kwargs), started
