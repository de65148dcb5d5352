"""Workflows the HTTP API tests serve (``lockgate serve http_workflows``) and run on workers
(``worker_main.py --workflows http_workflows``).

``http_limited`` (``Limit(key="tenant", max=2)``) appends to the file its ``record`` param names
one line as its step's body starts and one as it ends (``start|end <monotonic_ns> <run_id>``),
so a test can count how many held the tenant's slots at once."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from lockgate import Collect, Limit, StepContext, WorkflowContext, step, workflow


@workflow(name="http_wait", version="1")
async def http_wait(ctx: WorkflowContext, order: str, amount: int = 1) -> dict[str, Any]:
    """Waits for the signal ``go``; answers the query ``state`` and the update ``bump``."""
    bumped = {"n": 0}

    def bump(payload: dict[str, Any]) -> int:
        bumped["n"] += int(payload.get("by", 1))
        return bumped["n"]

    ctx.on_query("state", lambda: {"order": order, "bumped": bumped["n"]})
    ctx.on_update("bump", bump)
    go = await ctx.wait_for_signal("go")
    return {"order": order, "amount": amount, "go": go, "bumped": bumped["n"]}


@workflow(name="http_small", version="1", max_event_payload_bytes=1000)
async def http_small(ctx: WorkflowContext, text: str = "") -> int:
    return len(text)


@workflow(
    name="http_collect", version="1", trigger=Collect(key="k", max_events=3, window_seconds=60)
)
async def http_collect(
    ctx: WorkflowContext, key: str, events: list[dict[str, Any]], count: int
) -> int:
    return sum(int(e.get("n", 0)) for e in events)


def _append(path: str, line: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


@step
async def hold(record: str, pause: float, ctx: StepContext) -> None:
    _append(record, f"start {time.monotonic_ns()} {ctx.run_id}\n")
    await asyncio.sleep(pause)
    _append(record, f"end {time.monotonic_ns()} {ctx.run_id}\n")


@workflow(name="http_limited", version="1", concurrency=Limit(key="tenant", max=2))
async def http_limited(ctx: WorkflowContext, tenant: str, record: str, pause: float = 0.1) -> str:
    await hold(record, pause)
    return tenant


@workflow(name="http_ask", version="1")
async def http_ask(ctx: WorkflowContext, question: str) -> dict[str, Any]:
    answer = await ctx.interrupt({"question": question})
    return {"action": str(answer.action), "value": answer.value}


WORKFLOWS = [http_wait, http_small, http_collect, http_limited, http_ask]
