"""The Restate side of the bound work, run by hypercorn in Restate's own venv: a service whose
one handler does one durable step (``ctx.run``) per Kafka record."""

from __future__ import annotations

from typing import Any

import restate

bench = restate.Service("BenchBound")


def touch(n: int) -> int:
    return n + 1


@bench.handler()
async def run(ctx: restate.Context, value: dict[str, Any]) -> int:
    return await ctx.run_typed("touch", touch, n=int(value["n"]))


app = restate.app(services=[bench])
