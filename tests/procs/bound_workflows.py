"""Workflows bound to a topic, served by the ``lockgate worker`` processes the bound-topic
tests start (``bound_workflows:plain``, ``:ordered``, ``:noted``, ``:broken`` or ``:held``).
The topic is ``LOCKGATE_TEST_BOUND_TOPIC``; an ordered run's start and end, and each run of a
noted run's step, are appended to ``LOCKGATE_TEST_RECORD`` as
``partition offset pid start|end|step``."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Annotated, Any

from pydantic import BeforeValidator

from lockgate import KafkaTopic, WorkflowContext, workflow

TOPIC = os.environ.get("LOCKGATE_TEST_BOUND_TOPIC", "bound-test")


def note(ctx: WorkflowContext, what: str) -> None:
    """One line per attempt's start or end, appended with one write (whole, even across a
    kill)."""
    note_at(ctx.record.partition, ctx.record.offset, what)


def note_at(partition: int, offset: int, what: str) -> None:
    line = f"{partition} {offset} {os.getpid()} {what}\n".encode()
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


def step_noted(partition: int, offset: int) -> int:
    note_at(partition, offset, "step")
    return offset


@workflow(name="bound_noted", topic=KafkaTopic(TOPIC, max_concurrency=16))
async def bound_noted(ctx: WorkflowContext, value: Any) -> int:
    """Each run of its one step is a line: a record run twice would show."""
    return int(await ctx.step(step_noted, ctx.record.partition, ctx.record.offset))


class ValidatorBroke(BaseException):
    """What a buggy validator may raise: no ``Exception``, so nothing a consumer sets aside
    as one record's fault."""


def breaks_on_request(value: Any) -> Any:
    if isinstance(value, dict) and value.get("break"):
        raise ValidatorBroke("the validator of value broke")
    return value


@workflow(name="bound_broken", topic=KafkaTopic(TOPIC))
async def bound_broken(
    ctx: WorkflowContext, value: Annotated[dict[str, Any], BeforeValidator(breaks_on_request)]
) -> int:
    return int(value["n"])


def wait_for_release(release: str) -> None:
    while not os.path.exists(release):
        time.sleep(0.02)


async def held_until_released(partition: int, offset: int) -> int:
    """Runs until the file ``LOCKGATE_TEST_RECORD.release`` exists: a run in flight."""
    await asyncio.to_thread(wait_for_release, f"{os.environ['LOCKGATE_TEST_RECORD']}.release")
    return offset


@workflow(name="bound_held", topic=KafkaTopic(TOPIC, max_concurrency=8))
async def bound_held(ctx: WorkflowContext, value: dict[str, Any]) -> int:
    """``{"hold": true}`` runs until released; ``{"nap": S}`` sleeps S seconds (it waits,
    holding no slot); anything else ends at once."""
    if value.get("nap"):
        await ctx.sleep(float(value["nap"]))
    if value.get("hold"):
        await ctx.step(held_until_released, ctx.record.partition, ctx.record.offset)
    return ctx.record.offset


plain = [bound_plain]
ordered = [bound_ordered]
noted = [bound_noted]
broken = [bound_broken]
held = [bound_held]
