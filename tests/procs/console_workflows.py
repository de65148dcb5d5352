"""Workflows the console's browser tests serve (``lockgate serve console_workflows:WORKFLOWS``)
and run on a worker (``worker_main.py --workflows console_workflows``). Each stays where a page
can show it for as long as the test needs:

- ``console_wait`` parks on the signal ``go``;
- ``console_held`` (``Limit(key="tenant", max=1)``) holds its key's one slot in a step until
  the file its ``release`` param names exists, so a second run of the tenant queues behind it;
- ``console_rated`` (``Rate(key="tenant", per_second=0.01, burst=1)``): the first run of a
  tenant takes the bucket's one token, the next waits 100 s for another;
- ``console_collect`` and ``console_debounce`` hold their events for ten minutes;
- ``console_flaky`` fails its step once, then succeeds (a retry in its timeline)."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from lockgate import (
    Collect,
    Debounce,
    Limit,
    Rate,
    RetryPolicy,
    StepContext,
    WorkflowContext,
    step,
    workflow,
)


@workflow(name="console_wait", version="1")
async def console_wait(ctx: WorkflowContext, order: str) -> dict[str, Any]:
    go = await ctx.wait_for_signal("go")
    return {"order": order, "go": go}


@step
async def hold(release: str) -> None:
    # The test makes the file from another process: there is no event here to await.
    while not await asyncio.to_thread(os.path.exists, release):  # noqa: ASYNC110
        await asyncio.sleep(0.05)


@workflow(name="console_held", version="1", concurrency=Limit(key="tenant", max=1))
async def console_held(ctx: WorkflowContext, tenant: str, release: str) -> str:
    await hold(release)
    return tenant


@workflow(
    name="console_rated",
    version="1",
    rate_limit=Rate(key="tenant", per_second=0.01, burst=1),
)
async def console_rated(ctx: WorkflowContext, tenant: str) -> str:
    return tenant


@workflow(
    name="console_collect",
    version="1",
    trigger=Collect(key="k", max_events=5, window_seconds=600),
)
async def console_collect(
    ctx: WorkflowContext, key: str, events: list[dict[str, Any]], count: int
) -> int:
    return count


@workflow(name="console_debounce", version="1", trigger=Debounce(key="doc", window_seconds=600))
async def console_debounce(
    ctx: WorkflowContext, key: str, events: list[dict[str, Any]], count: int
) -> int:
    return count


@step(retry=RetryPolicy(max_attempts=2, initial_backoff=0.05))
async def flaky(ctx: StepContext) -> str:
    if ctx.attempt == 1:
        raise RuntimeError("the partner's API answered 503")
    return "ok"


@workflow(name="console_flaky", version="1")
async def console_flaky(ctx: WorkflowContext) -> str:
    return await flaky()


WORKFLOWS = [
    console_wait,
    console_held,
    console_rated,
    console_collect,
    console_debounce,
    console_flaky,
]
