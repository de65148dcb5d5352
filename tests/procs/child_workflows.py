"""Workflows of the child-run process tests (``tests/test_children_processes.py``).

``proc_fan_parent`` fans out ``count`` runs of ``proc_fan_child``; each child's one step
records its execution as ``workflows.effect`` does (``<run_id> <call_index> <done_already>
<pid>``) and takes ``pause`` seconds, so a test can kill a worker in the middle of the fan-out.
``proc_sender`` signals a ``proc_receiver`` run from its body, then ends.
"""

from __future__ import annotations

from typing import Any

from workflows import effect

from lockgate import WorkflowContext, workflow


@workflow(name="proc_fan_child", version="1")
async def proc_fan_child(ctx: WorkflowContext, n: int, pause: float = 0.0) -> int:
    await effect(f"child-{n}", pause)
    return n * 2


@workflow(name="proc_fan_parent", version="1")
async def proc_fan_parent(
    ctx: WorkflowContext, count: int, most: int = 10, pause: float = 0.0
) -> list[int]:
    items = [{"n": n, "pause": pause} for n in range(count)]
    return await ctx.fan_out(proc_fan_child, items, max_in_flight=most)


@workflow(name="proc_receiver", version="1")
async def proc_receiver(ctx: WorkflowContext) -> list[Any]:
    first = await ctx.wait_for_signal("hello")
    try:
        second = await ctx.wait_for_signal("hello", timeout=3)
    except Exception:
        second = None
    return [first, second]


@workflow(name="proc_sender", version="1")
async def proc_sender(ctx: WorkflowContext, target: str) -> str:
    return await ctx.signal(proc_receiver, target, "hello", {"from": ctx.run_id})


WORKFLOWS = [proc_fan_child, proc_fan_parent, proc_receiver, proc_sender]
