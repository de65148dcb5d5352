"""How async code calls a store, whose methods are synchronous."""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

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
    native = store.coroutine_for(method)
    if native is not None:
        return await native(*args, **kwargs)
    if store.blocking_io:
        call = functools.partial(contextvars.copy_context().run, method, *args, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(_executor(), call)
    return method(*args, **kwargs)
