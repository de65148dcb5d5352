"""Workflows the worker processes of ``test_kafka_rebuild_processes`` serve: multi-step runs,
some behind a Limit, each step's effect recorded to the file ``LOCKGATE_TEST_RECORD`` names as
one line ``<run_id> <call_index> <pid>`` (written with ``O_APPEND``, so processes never
interleave), before its outcome is journaled."""

from __future__ import annotations

import os

from lockgate import Limit, StepContext, WorkflowContext, step, workflow

RECORD_ENV = "LOCKGATE_TEST_RECORD"


@step
async def rebuild_effect(label: str, ctx: StepContext) -> str:
    line = f"{ctx.run_id} {ctx.call_index} {os.getpid()}\n"
    fd = os.open(os.environ[RECORD_ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)
    return label


@workflow(name="rebuild_steps", version="1")
async def rebuild_steps(ctx: WorkflowContext, n: int, steps: int = 3) -> int:
    labels = [await rebuild_effect(f"step-{i}") for i in range(steps)]
    assert labels == [f"step-{i}" for i in range(steps)]
    return n


@workflow(name="rebuild_gated", version="1", concurrency=Limit(key="tenant", max=2))
async def rebuild_gated(ctx: WorkflowContext, tenant: str, n: int, steps: int = 3) -> int:
    labels = [await rebuild_effect(f"step-{i}") for i in range(steps)]
    assert labels == [f"step-{i}" for i in range(steps)]
    return n


WORKFLOWS = [rebuild_steps, rebuild_gated]
