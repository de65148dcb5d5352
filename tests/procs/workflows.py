"""Workflows that worker processes started by tests serve.

Every execution of a step's effect appends one line to the file ``LOCKGATE_TEST_RECORD`` names::

    <run_id> <call_index> <done_already> <pid>

``done_already`` is 1 when the run's journal, read at that moment through a store of its own
(a separate connection to the file ``LOCKGATE_TEST_STORE`` names), already held ``step:done``
for that call: a line with 1 is a step that ran again after its outcome was journaled, which
must never happen. Lines are written with ``O_APPEND`` so processes never interleave them.

``proc_limited`` (``Limit(key="tenant_id", max=2)``) records instead, to the file its
``record`` param names, one line as its step's body starts and one as it ends::

    start <monotonic_ns> <pid> <run_id> <tenant_id>
    end <monotonic_ns> <pid> <run_id> <tenant_id>

The start is written after the run's claim took its slot and the end before the run can give
it back, so each start..end interval lies inside the time the run held its slot.
"""

from __future__ import annotations

import asyncio
import functools
import os
import time

from lockgate import Limit, StepContext, WorkflowContext, step, workflow
from lockgate.stores import Store

RECORD_ENV = "LOCKGATE_TEST_RECORD"
STORE_ENV = "LOCKGATE_TEST_STORE"


@functools.cache
def observer() -> Store:
    """This process's second view of the store, apart from the worker's own."""
    from worker_main import open_test_store

    return open_test_store(os.environ[STORE_ENV])


def done_already(ctx: StepContext) -> bool:
    journal = observer().load_run(ctx.run_name, ctx.run_id)
    return any(
        event.kind == "step:done" and event.payload.get("call_index") == ctx.call_index
        for event in journal
    )


def record(ctx: StepContext) -> None:
    line = f"{ctx.run_id} {ctx.call_index} {int(done_already(ctx))} {os.getpid()}\n"
    fd = os.open(os.environ[RECORD_ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


@step
def effect(label: str, pause: float, ctx: StepContext) -> str:
    """The step every test workflow makes: record the execution, then take ``pause`` seconds
    (on a worker thread), so a test can catch a worker in the middle of it."""
    record(ctx)
    time.sleep(pause)
    return label


@workflow(name="proc_steps", version="1")
async def proc_steps(ctx: WorkflowContext, n: int, steps: int = 2, pause: float = 0.0) -> int:
    labels = [await effect(f"step-{i}", pause) for i in range(steps)]
    assert labels == [f"step-{i}" for i in range(steps)]
    return n * 2


def append_line(path: str, line: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


@step
def hold_slot(tenant_id: str, record: str, pause: float, ctx: StepContext) -> None:
    """Record the body's start, take ``pause`` seconds, record its end."""
    tail = f"{os.getpid()} {ctx.run_id} {tenant_id}\n"
    append_line(record, f"start {time.monotonic_ns()} {tail}")
    time.sleep(pause)
    append_line(record, f"end {time.monotonic_ns()} {tail}")


@workflow(name="proc_limited", version="1", concurrency=Limit(key="tenant_id", max=2))
async def proc_limited(
    ctx: WorkflowContext, tenant_id: str, n: int, record: str, pause: float = 0.05
) -> int:
    await hold_slot(tenant_id, record, pause)
    return n


@step
async def hold_slot_async(tenant_id: str, record: str, pause: float, ctx: StepContext) -> None:
    """``hold_slot`` on the event loop, so a worker's thread pool does not bound how many
    bodies run at once."""
    tail = f"{os.getpid()} {ctx.run_id} {tenant_id}\n"
    append_line(record, f"start {time.monotonic_ns()} {tail}")
    await asyncio.sleep(pause)
    append_line(record, f"end {time.monotonic_ns()} {tail}")


@workflow(name="proc_limited3", version="1", concurrency=Limit(key="tenant_id", max=3))
async def proc_limited3(
    ctx: WorkflowContext, tenant_id: str, n: int, record: str, pause: float = 0.01
) -> int:
    await hold_slot_async(tenant_id, record, pause)
    return n


WORKFLOWS = [proc_steps, proc_limited, proc_limited3]
