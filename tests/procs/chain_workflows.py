"""Chains that worker processes serve in ``tests/test_chain_processes.py``.

``proc_chain_tally`` continues as new once per hop, taking on each hop every ``add`` signal
buffered for it. Its params carry the ids of the signals applied so far, so the chain's final
result says exactly which were applied and how often.
"""

from __future__ import annotations

from typing import Any

from lockgate import WaitTimeout, WorkflowContext, workflow


@workflow(name="proc_chain_tally")
async def proc_chain_tally(
    ctx: WorkflowContext, hops: int, expect: int, hop: int = 0, applied: list[str] | None = None
) -> dict[str, Any]:
    seen = list(applied or [])
    while True:
        try:
            got = await ctx.wait_for_signal("add", timeout=0)
        except WaitTimeout:
            break
        seen.append(str(got["id"]))
    if hop >= hops and len(seen) >= expect:
        return {"hop": hop, "applied": seen}
    await ctx.continue_as_new({"hops": hops, "expect": expect, "hop": hop + 1, "applied": seen})


WORKFLOWS = [proc_chain_tally]
