"""A short tour: submit an order workflow, lose its attempt mid-run, resume it from the
journal, answer its signal, and print what happened at each step."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from lockgate import (
    InlineWorkflowRunner,
    MemoryStore,
    RunEvent,
    StepContext,
    WorkflowContext,
    step,
    workflow,
)

EXECUTIONS: dict[str, int] = {}
CRASH_AFTER_RESERVE = {"armed": True}


def _say(text: str) -> None:
    print(text, flush=True)


@step
async def reserve_stock(order_id: str, items: int) -> dict[str, Any]:
    EXECUTIONS["reserve_stock"] = EXECUTIONS.get("reserve_stock", 0) + 1
    await asyncio.sleep(0.05)
    return {"order_id": order_id, "reserved": items}


@step
async def charge_card(order_id: str, amount: int, ctx: StepContext) -> str:
    EXECUTIONS["charge_card"] = EXECUTIONS.get("charge_card", 0) + 1
    if CRASH_AFTER_RESERVE["armed"]:
        CRASH_AFTER_RESERVE["armed"] = False
        raise KeyboardInterrupt("the worker process died")
    return f"ch_{ctx.run_id[:8]}_{ctx.call_index}_try{ctx.attempt}"


@step(effect="write")
async def ship(order_id: str, approved_by: str) -> str:
    EXECUTIONS["ship"] = EXECUTIONS.get("ship", 0) + 1
    return f"shipment for {order_id}, approved by {approved_by}"


@workflow(name="demo_order")
async def demo_order(
    ctx: WorkflowContext, order_id: str, items: int, amount: int
) -> dict[str, Any]:
    reservation = await reserve_stock(order_id, items)
    charge_id = await charge_card(order_id, amount)
    await ctx.sleep(0.5)
    approval = await ctx.wait_for_signal("approve", timeout=60)
    shipment = await ship(order_id, approval["by"])
    return {"reservation": reservation, "charge": charge_id, "shipment": shipment}


def _show(events: list[RunEvent], start: int) -> int:
    for event in events[start:]:
        detail = event.payload.get("step_id") or event.payload.get("signal") or ""
        _say(f"      #{event.run_seq:<2} {event.kind:<22} {detail}")
    return len(events)


async def _tour() -> int:
    store = MemoryStore(lock_ttl=0.3, heartbeat_interval=0.1)
    runner = InlineWorkflowRunner(store=store, workflows=[demo_order])
    client = runner.client
    _say("lockgate demo: a durable order workflow on the in-process MemoryStore\n")
    handle = await client.submit("demo_order", {"order_id": "A-100", "items": 3, "amount": 4200})
    _say(f"1. submitted run {handle.run_id[:12]}... status={(await handle.status()).value}")
    shown = 0
    _say("2. first attempt: reserve_stock runs, then the process dies inside charge_card")
    try:
        await runner.run("demo_order", handle.run_id)
    except KeyboardInterrupt as crash:
        _say(f"   !! {crash}; its lease is left to expire")
    shown = _show(await handle.events(), shown)
    await asyncio.sleep(store.lock_ttl + 0.05)
    recovered = store.recover_pending_runs("demo_order")
    _say(f"3. lease expired; recovered {len(recovered)} run and requeued it")
    _say("4. second attempt replays the journal: reserve_stock is NOT run again")
    await runner.run("demo_order", handle.run_id)
    shown = _show(await handle.events(), shown)
    _say(f"   status={(await handle.status()).value}: parked, holding no worker")
    await asyncio.sleep(0.55)
    woken = await runner.fire_due_timers()
    _say(f"5. timer fired ({woken} woken); the run now waits for the 'approve' signal")
    await runner.run("demo_order", handle.run_id)
    shown = _show(await handle.events(), shown)
    _say(f"   status={(await handle.status()).value}")
    _say("6. a manager approves (sent twice with one signal_id: applied once)")
    for _ in range(2):
        await handle.signal("approve", {"by": "dana"}, signal_id="approval-A-100")
    result = await handle.result(timeout=10)
    _show(await handle.events(), shown)
    _say(f"\nresult: {result}")
    _say(f"executions per step: {EXECUTIONS}")
    ok = EXECUTIONS.get("reserve_stock") == 1 and EXECUTIONS.get("ship") == 1
    _say(
        "reserve_stock and ship ran once; charge_card ran twice because the crash came\n"
        "before its outcome was journaled (pass ctx.idempotency_key to your payment API)"
        if ok
        else "UNEXPECTED: a journaled step ran again"
    )
    return 0 if ok else 1


def main() -> int:
    try:
        return asyncio.run(_tour())
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
