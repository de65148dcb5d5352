"""How async code calls a store, whose methods are synchronous."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from lockgate.stores._base import LifecycleStore


async def call_store(
    store: LifecycleStore, method: Callable[..., Any], *args: Any, **kwargs: Any
) -> Any:
    """Call ``method`` of ``store``: on a worker thread when the store may block on I/O
    (``blocking_io``), inline when it never does, so the event loop is never held up."""
    if store.blocking_io:
        return await asyncio.to_thread(method, *args, **kwargs)
    return method(*args, **kwargs)
