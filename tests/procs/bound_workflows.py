"""Workflows bound to a topic, served by the ``lockgate worker`` processes the bound-topic
tests start (``bound_workflows:plain`` or ``bound_workflows:ordered``). The topic is
``LOCKGATE_TEST_BOUND_TOPIC``; an ordered run's start and end are appended to
``LOCKGATE_TEST_RECORD`` as ``partition offset pid start|end``."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from lockgate import KafkaTopic, WorkflowContext, workflow

TOPIC = os.environ.get("LOCKGATE_TEST_BOUND_TOPIC", "bound-test")


def note(ctx: WorkflowContext, what: str) -> None:
    """One line per attempt's start or end, appended with one write (whole, even across a
    kill)."""
    line = f"{ctx.record.partition} {ctx.record.offset} {os.getpid()} {what}\n".encode()
    fd = os.open(os.environ["LOCKGATE_TEST_RECORD"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def double(n: int) -> int:
    return n * 2


@workflow(name="bound_plain", topic=KafkaTopic(TOPIC, max_concurrency=32))
async def bound_plain(ctx: WorkflowContext, value: dict[str, Any]) -> int:
    return int(await ctx.step(double, value["n"]))


@workflow(name="bound_ordered", topic=KafkaTopic(TOPIC, ordered=True, max_concurrency=8))
async def bound_ordered(ctx: WorkflowContext, value: dict[str, Any]) -> int:
    note(ctx, "start")
    await ctx.step(asyncio.sleep, 0.01, name="work")
    note(ctx, "end")
    return int(value["n"])


plain = [bound_plain]
ordered = [bound_ordered]
