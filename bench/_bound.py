"""The workflows ``kafka_bound.py`` measures, served by ``lockgate worker _bound:bound`` (a
one-step workflow bound to ``LOCKGATE_BENCH_TOPIC``, ``LOCKGATE_BENCH_CONCURRENCY`` runs in
flight) or ``lockgate worker _bound:submitted`` (the same body, its runs submitted with
``client.submit``)."""

from __future__ import annotations

import os
from typing import Any

from lockgate import KafkaTopic, WorkflowContext, step, workflow

TOPIC = os.environ.get("LOCKGATE_BENCH_TOPIC", "bench-bound")
IN_FLIGHT = int(os.environ.get("LOCKGATE_BENCH_CONCURRENCY", "128"))


@step(name="bench_touch")
async def touch(n: int) -> int:
    return n + 1


@workflow(name="bench_bound", topic=KafkaTopic(TOPIC, max_concurrency=IN_FLIGHT))
async def bench_bound(ctx: WorkflowContext, value: dict[str, Any]) -> int:
    return await touch(int(value["n"]))


@workflow(name="bench_submitted")
async def bench_submitted(ctx: WorkflowContext, n: int) -> int:
    return await touch(n)


bound = [bench_bound]
submitted = [bench_submitted]
