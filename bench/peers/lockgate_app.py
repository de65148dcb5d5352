"""The lockgate side of both works, served by ``lockgate worker lockgate_app:bound`` (a
one-step workflow bound to ``LOCKGATE_BENCH_TOPIC``, 128 runs in flight, as
``bench/kafka_bound.py`` serves it) or ``lockgate worker lockgate_app:collect`` (a
``Collect(max_events=50)`` trigger workflow whose fired runs the worker runs to completion)."""

from __future__ import annotations

import os
from typing import Any

from lockgate import Collect, KafkaTopic, WorkflowContext, step, workflow

TOPIC = os.environ.get("LOCKGATE_BENCH_TOPIC", "peers-bound")
IN_FLIGHT = 128


@step(name="peers_touch")
async def touch(n: int) -> int:
    return n + 1


@workflow(name="peers_bound", topic=KafkaTopic(TOPIC, max_concurrency=IN_FLIGHT))
async def peers_bound(ctx: WorkflowContext, value: dict[str, Any]) -> int:
    return await touch(int(value["n"]))


@workflow(name="peers_collect", trigger=Collect(key="k", max_events=50, window_seconds=3600))
async def peers_collect(ctx: WorkflowContext, key: str, events: list[Any], count: int) -> int:
    return count


bound = [peers_bound]
collect = [peers_collect]
