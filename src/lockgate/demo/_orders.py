"""The demo's workflow, served by ``lockgate worker lockgate.demo._orders``.

Every step appends a line to ``effects.log`` in ``$LOCKGATE_DEMO_DIR`` as its side effect, so
the demo can count, across worker processes, how often each step really ran. An order submitted
with ``crash=True`` kills its worker process inside ``charge_card`` the first time it gets there.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from lockgate import StepContext, WorkflowContext, step, workflow

DEMO_DIR_ENV = "LOCKGATE_DEMO_DIR"
APPROVAL_OVER = 5_000
CRASH_EXIT = 70


def _effect(step_name: str, order_id: str, key: str = "-") -> None:
    folder = os.environ.get(DEMO_DIR_ENV)
    if folder:
        with open(Path(folder) / "effects.log", "a", encoding="utf-8") as log:
            log.write(f"{order_id} {step_name} {os.getpid()} {key}\n")


def _crash_once(order_id: str) -> None:
    folder = os.environ.get(DEMO_DIR_ENV)
    if not folder:
        return
    marker = Path(folder) / f"crashed-{order_id}"
    if not marker.exists():
        marker.touch()
        os._exit(CRASH_EXIT)  # the process dies here, as if the machine lost power


@step
async def reserve_stock(order_id: str, items: int) -> dict[str, Any]:
    _effect("reserve_stock", order_id)
    await asyncio.sleep(0.3)
    return {"order_id": order_id, "reserved": items}


@step
async def charge_card(order_id: str, amount: int, crash: bool, ctx: StepContext) -> str:
    # ctx.idempotency_key is the same on every attempt: a payment API given it charges once.
    _effect("charge_card", order_id, ctx.idempotency_key)
    await asyncio.sleep(0.3)
    if crash:
        _crash_once(order_id)
    return f"ch_{order_id}_{amount}"


@step
async def ship(order_id: str, approved_by: str) -> str:
    _effect("ship", order_id)
    await asyncio.sleep(0.2)
    return f"shipped {order_id} ({approved_by})"


@workflow(name="demo_order")
async def demo_order(
    ctx: WorkflowContext, order_id: str, items: int, amount: int, crash: bool = False
) -> dict[str, Any]:
    reservation = await reserve_stock(order_id, items)
    charge = await charge_card(order_id, amount, crash)
    await ctx.sleep(1.0)  # a cooling-off period: the run parks and holds no worker
    approved_by = "auto"
    if amount > APPROVAL_OVER:
        approval = await ctx.wait_for_signal("approve", timeout=120)
        approved_by = str(approval.get("by", "?"))
    shipment = await ship(order_id, approved_by)
    return {"reserved": reservation["reserved"], "charge": charge, "shipment": shipment}
