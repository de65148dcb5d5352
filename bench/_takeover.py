"""The workflows ``takeover.py`` kills workers under, served by ``lockgate worker
_takeover:plain`` (runs submitted with ``client.submit``) or ``lockgate worker _takeover:bound``
(one run per record of ``LOCKGATE_BENCH_TOPIC``).

Each attempt at the step ``bench_hold`` appends ``start <run_id> <pid> <time.time()>`` to
``LOCKGATE_BENCH_RECORD`` as it starts. A run's first attempt (the one that creates
``<run_id>.held`` beside that file) then waits until the benchmark kills its worker; a later
attempt returns at once.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

from lockgate import KafkaTopic, WorkflowContext, step, workflow

TOPIC = os.environ.get("LOCKGATE_BENCH_TOPIC") or "bench-takeover"


def _record() -> Path:
    return Path(os.environ["LOCKGATE_BENCH_RECORD"])


@step(name="bench_hold")
async def hold(run_id: str) -> int:
    line = f"start {run_id} {os.getpid()} {time.time():.6f}\n".encode()
    fd = os.open(_record(), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)
    try:
        os.close(os.open(_record().parent / f"{run_id}.held", os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        return os.getpid()  # a later attempt: the one the benchmark times
    await asyncio.sleep(3600)  # until the kill
    return os.getpid()


@workflow(name="bench_takeover")
async def bench_takeover(ctx: WorkflowContext) -> int:
    return int(await hold(ctx.run_id))


@workflow(name="bench_takeover_bound", topic=KafkaTopic(TOPIC, max_concurrency=8))
async def bench_takeover_bound(ctx: WorkflowContext, value: dict[str, Any]) -> int:
    return int(await hold(ctx.run_id))


plain = [bench_takeover]
bound = [bench_takeover_bound]
