"""Workflows the worker processes of ``test_kafka_rebuild_processes`` serve: multi-step runs,
some behind a Limit, each step's effect recorded to the file ``LOCKGATE_TEST_RECORD`` names as
one line ``<run_id> <call_index> <pid>`` (written with ``O_APPEND``, so processes never
interleave), before its outcome is journaled.

A gated run's last step waits, after recording its effect, until the file
``LOCKGATE_TEST_HOLD`` names exists (when that is set): the test holds those runs until it has
flushed Valkey, so the load cannot end before the flush however the machine schedules."""

from __future__ import annotations

import asyncio
import os

from lockgate import Limit, StepContext, WorkflowContext, step, workflow

RECORD_ENV = "LOCKGATE_TEST_RECORD"
HOLD_ENV = "LOCKGATE_TEST_HOLD"


@step
async def rebuild_effect(label: str, ctx: StepContext, hold: bool = False) -> str:
    line = f"{ctx.run_id} {ctx.call_index} {os.getpid()}\n"
    fd = os.open(os.environ[RECORD_ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)
    held = os.environ.get(HOLD_ENV)
    if hold and held:
        while not await asyncio.to_thread(os.path.exists, held):  # noqa: ASYNC110
            await asyncio.sleep(0.05)
    return label


@workflow(name="rebuild_steps", version="1")
async def rebuild_steps(ctx: WorkflowContext, n: int, steps: int = 3) -> int:
    labels = [await rebuild_effect(f"step-{i}") for i in range(steps)]
    assert labels == [f"step-{i}" for i in range(steps)]
    return n


@workflow(name="rebuild_gated", version="1", concurrency=Limit(key="tenant", max=2))
async def rebuild_gated(ctx: WorkflowContext, tenant: str, n: int, steps: int = 3) -> int:
    labels = [await rebuild_effect(f"step-{i}", hold=i == steps - 1) for i in range(steps)]
    assert labels == [f"step-{i}" for i in range(steps)]
    return n


WORKFLOWS = [rebuild_steps, rebuild_gated]
