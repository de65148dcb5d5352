"""The workflows ``kafka_triggers.py`` measures. ``lockgate worker _triggers:collect`` serves
the ``Collect`` one in a worker process of its own (its trigger topic's consumer and its runs,
as any worker does); the Debounce ones are fired by a consumer in the bench's process."""

from __future__ import annotations

from typing import Any

from lockgate import Collect, Debounce, WorkflowContext, workflow

#: The quiet window of the Debounce with about 10,000 windows open, in seconds.
WINDOW = 20.0
#: The quiet window of the Debounce whose 100 windows fall due at once, in seconds.
SHORT_WINDOW = 1.0


@workflow(name="bench_collect", trigger=Collect(key="k", max_events=50, window_seconds=3600))
async def bench_collect(ctx: WorkflowContext, key: str, events: list[Any], count: int) -> int:
    return count


@workflow(name="bench_debounce", trigger=Debounce(key="k", window_seconds=WINDOW))
async def bench_debounce(ctx: WorkflowContext, key: str, events: list[Any], count: int) -> None:
    return None


@workflow(name="bench_at_once", trigger=Debounce(key="k", window_seconds=SHORT_WINDOW))
async def bench_at_once(ctx: WorkflowContext, key: str, events: list[Any], count: int) -> None:
    return None


collect = [bench_collect]
