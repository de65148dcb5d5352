"""Triggered workflows that worker processes started by the trigger-topic tests serve."""

from __future__ import annotations

from typing import Any

from lockgate import Collect, WorkflowContext, workflow


@workflow(name="proc_collect50", trigger=Collect(key="k", max_events=50, window_seconds=1))
async def proc_collect50(
    ctx: WorkflowContext, key: str, events: list[dict[str, Any]], count: int
) -> int:
    return count


WORKFLOWS = [proc_collect50]
