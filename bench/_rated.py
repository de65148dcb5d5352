"""The workflows the Rate and fire-delay benches run, and how their worker processes find
them.

``rated(name, per_second, burst)`` declares a workflow under ``Rate(key="key", ...)`` whose
body returns the wall time it began; ``debounced(name, window)`` one fired by
``Debounce(key="k", window_seconds=window)``; ``sleeper(name)`` one that sleeps ``seconds``
and returns the wall time it woke. A worker process is a real ``lockgate worker`` serving this
module, from this directory, with ``BENCH_WORKFLOW`` saying which one to declare
(``rated,NAME,PER_SECOND,BURST``, ``debounced,NAME,WINDOW`` or ``sleeper,NAME``):

    BENCH_WORKFLOW=rated,bench_rate,50,1 python -m lockgate worker _rated --store URL
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from lockgate import Debounce, Rate, WorkflowContext, workflow


def rated(name: str, per_second: float, burst: int) -> Callable[..., Any]:
    async def rated_body(ctx: WorkflowContext, key: str) -> float:
        return time.time()

    limit = Rate(key="key", per_second=per_second, burst=burst)
    return workflow(name=name, rate_limit=limit)(rated_body)


def debounced(name: str, window: float) -> Callable[..., Any]:
    async def debounced_body(
        ctx: WorkflowContext, key: str, events: list[Any], count: int
    ) -> float:
        return time.time()

    return workflow(name=name, trigger=Debounce(key="k", window_seconds=window))(debounced_body)


def sleeper(name: str) -> Callable[..., Any]:
    async def sleeper_body(ctx: WorkflowContext, seconds: float) -> float:
        await ctx.sleep(seconds)
        return time.time()

    return workflow(name=name)(sleeper_body)


_wanted = os.environ.get("BENCH_WORKFLOW", "")
if _wanted:
    _kind, _name, *_args = _wanted.split(",")
    if _kind == "rated":
        bench_workflow = rated(_name, float(_args[0]), int(_args[1]))
    elif _kind == "debounced":
        bench_workflow = debounced(_name, float(_args[0]))
    else:
        bench_workflow = sleeper(_name)
