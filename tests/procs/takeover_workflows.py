"""Workflows whose first attempt holds its step until told to go on, served by the
``lockgate worker takeover_workflows:NAME`` processes the takeover tests start and kill.

The step ``hold`` appends one line to ``LOCKGATE_TEST_RECORD`` as each attempt of it starts
and one as it returns, each with ``time.time()``::

    start <run_id> <pid> <epoch seconds>
    end <run_id> <pid> <epoch seconds>

The first attempt at a run's step (the one that creates ``<run_id>.held`` beside the record
file) waits until ``<run_id>.go`` exists there, unless the run was told not to hold; any
later attempt returns at once. The step returns the pid that ran it, so the journal says which
attempt's ``step:done`` was believed. The bound workflows read ``LOCKGATE_TEST_BOUND_TOPIC``;
a record ``{"n": N, "hold": false}`` does not hold. ``takeover_blocking``'s step blocks the
worker's event loop (it never awaits) for ``seconds`` on its first attempt, recorded the same
way.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

from lockgate import KafkaTopic, WorkflowContext, step, workflow

TOPIC = os.environ.get("LOCKGATE_TEST_BOUND_TOPIC") or "takeover-test"


def _record() -> Path:
    return Path(os.environ["LOCKGATE_TEST_RECORD"])


def note(what: str, run_id: str) -> None:
    """One line, with one write (whole, even across a kill)."""
    line = f"{what} {run_id} {os.getpid()} {time.time():.6f}\n".encode()
    fd = os.open(_record(), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def _first_attempt(run_id: str) -> bool:
    try:
        os.close(os.open(_record().parent / f"{run_id}.held", os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        return False
    return True


@step(name="hold")
async def hold(run_id: str, holds: bool) -> int:
    note("start", run_id)
    if _first_attempt(run_id) and holds:
        go = _record().parent / f"{run_id}.go"
        # Another process makes it: there is no event of ours to wait on.
        while not go.exists():  # noqa: ASYNC110
            await asyncio.sleep(0.05)
    note("end", run_id)
    return os.getpid()


@step(name="block")
async def block(run_id: str, seconds: float) -> int:
    note("start", run_id)
    if _first_attempt(run_id):
        end = time.monotonic() + seconds
        while time.monotonic() < end:  # never awaits: the worker's event loop is blocked
            pass
    note("end", run_id)
    return os.getpid()


@workflow(name="takeover_plain")
async def takeover_plain(ctx: WorkflowContext, hold_it: bool = True) -> int:
    return int(await hold(ctx.run_id, hold_it))


@workflow(name="takeover_bound", topic=KafkaTopic(TOPIC, max_concurrency=8))
async def takeover_bound(ctx: WorkflowContext, value: dict[str, Any]) -> int:
    return int(await hold(ctx.run_id, bool(value.get("hold", True))))


@workflow(name="takeover_ordered", topic=KafkaTopic(TOPIC, ordered=True, max_concurrency=8))
async def takeover_ordered(ctx: WorkflowContext, value: dict[str, Any]) -> int:
    return int(await hold(ctx.run_id, bool(value.get("hold", True))))


@workflow(name="takeover_blocking")
async def takeover_blocking(ctx: WorkflowContext, seconds: float) -> int:
    return int(await block(ctx.run_id, seconds))


plain = [takeover_plain]
blocking = [takeover_blocking]
bound = [takeover_bound]
ordered = [takeover_ordered]
