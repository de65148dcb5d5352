"""Triggered workflows that worker processes started by the trigger-topic tests serve."""

from __future__ import annotations

from typing import Any

from lockgate import Collect, Debounce, WorkflowContext, workflow


@workflow(name="proc_collect50", trigger=Collect(key="k", max_events=50, window_seconds=1))
async def proc_collect50(
    ctx: WorkflowContext, key: str, events: list[dict[str, Any]], count: int
) -> int:
    return count


@workflow(name="proc_debounce", trigger=Debounce(key="k", window_seconds=1, max_wait_seconds=2.5))
async def proc_debounce(
    ctx: WorkflowContext, key: str, events: list[dict[str, Any]], count: int
) -> int:
    return count


@workflow(
    name="proc_capped",
    trigger=Collect(key="k", max_events=3, window_seconds=0.3),
    max_event_payload_bytes=200,
)
async def proc_capped(
    ctx: WorkflowContext, key: str, events: list[dict[str, Any]], count: int
) -> int:
    return count


WORKFLOWS = [proc_collect50, proc_debounce, proc_capped]
