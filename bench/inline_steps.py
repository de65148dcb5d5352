"""Journaling overhead of the durable core, measured against the raw baseline in one run.

Prints: journaled steps per second of a 100-step workflow driven by InlineWorkflowRunner on
MemoryStore; the same step function called in a plain loop; their ratio; and the events per
second reconstruct_state folds on a 10,000-event journal. Not a test: figures drift with the
machine, so read the ratio, and record both in docs/performance.md with this command:

    .venv/bin/python bench/inline_steps.py
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

from lockgate import (
    InlineWorkflowRunner,
    MemoryStore,
    RunEvent,
    WorkflowContext,
    reconstruct_state,
    step,
    workflow,
)

STEPS = 100
RUNS = 30
JOURNAL_EVENTS = 10_000


async def add_one(value: int) -> int:
    return value + 1


@step(name="bench_add_one")
async def journaled_add_one(value: int) -> int:
    return await add_one(value)


@workflow(name="bench_hundred_steps")
async def hundred_steps(ctx: WorkflowContext, steps: int) -> int:
    value = 0
    for _ in range(steps):
        value = await journaled_add_one(value)
    return value


async def journaled_rate() -> float:
    store = MemoryStore()
    runner = InlineWorkflowRunner(store=store, workflows=[hundred_steps])
    rates = []
    for _ in range(RUNS):
        handle = await runner.client.submit("bench_hundred_steps", {"steps": STEPS})
        started = time.perf_counter()
        await runner.run("bench_hundred_steps", handle.run_id)
        elapsed = time.perf_counter() - started
        assert await handle.result() == STEPS
        rates.append(STEPS / elapsed)
    return statistics.median(rates)


async def plain_rate() -> float:
    rates = []
    for _ in range(RUNS):
        value = 0
        started = time.perf_counter()
        for _ in range(STEPS):
            value = await add_one(value)
        elapsed = time.perf_counter() - started
        assert value == STEPS
        rates.append(STEPS / elapsed)
    return statistics.median(rates)


def journal(size: int) -> list[RunEvent]:
    events = [RunEvent("run:init", {"name": "w", "params": {}}, "r", run_seq=1)]
    for index in range((size - 1) // 2):
        base: dict[str, Any] = {"call_index": index, "step_id": "s", "kind": "named"}
        events.append(
            RunEvent(
                "step:pending",
                {**base, "attempt": 1},
                "r",
                run_seq=len(events) + 1,
                headers={"lg-epoch": "1"},
            )
        )
        events.append(
            RunEvent(
                "step:done",
                {**base, "attempt": 1, "result": index},
                "r",
                run_seq=len(events) + 1,
                headers={"lg-epoch": "1"},
            )
        )
    return events


def fold_rate() -> float:
    events = journal(JOURNAL_EVENTS)
    rates = []
    for _ in range(15):
        started = time.perf_counter()
        state = reconstruct_state(events)
        elapsed = time.perf_counter() - started
        assert state.event_count == len(events)
        rates.append(len(events) / elapsed)
    return statistics.median(rates)


def main() -> None:
    journaled = asyncio.run(journaled_rate())
    plain = asyncio.run(plain_rate())
    folded = fold_rate()
    print(
        f"journaled steps/s (100-step workflow, InlineWorkflowRunner, MemoryStore): "
        f"{journaled:,.0f}"
    )
    print(f"plain loop calls/s (same function, no engine):                          {plain:,.0f}")
    print(
        f"ratio journaled : plain:                                                 "
        f"1 : {plain / journaled:,.0f}"
    )
    print(
        f"reconstruct_state events/s ({JOURNAL_EVENTS:,}-event journal):                 "
        f"{folded:,.0f}"
    )
    print(f"(median of {RUNS} runs of {STEPS} steps; median of 15 folds)")


if __name__ == "__main__":
    main()
