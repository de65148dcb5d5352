"""Child runs: an order starts a shipment as a child run and waits for it, holding no worker
slot while it does. Run it: ``python docs/examples/children.py``."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from lockgate import ChildWorkflowError, SQLiteStore, WorkflowClient, WorkflowContext, workflow
from lockgate.worker import WorkerOptions, WorkflowWorker


@workflow(name="ship")
async def ship(ctx: WorkflowContext, order_id: str, weight_kg: float) -> str:
    if weight_kg > 30:
        raise ValueError(f"{weight_kg} kg is over the carrier's limit")
    return f"parcel-{order_id}"


@workflow(name="order")
async def order(ctx: WorkflowContext, order_id: str, weight_kg: float) -> dict[str, str]:
    try:
        parcel = await ctx.run_child(
            ship, {"order_id": order_id, "weight_kg": weight_kg}, timeout=3600
        )
    except ChildWorkflowError as exc:
        # The child failed (or was cancelled, terminated, or ran past the timeout).
        return {"order": order_id, "shipping": exc.status, "child": exc.run_id}
    return {"order": order_id, "shipping": "booked", "parcel": parcel}


async def main(folder: Path) -> list[dict[str, str]]:
    store = SQLiteStore(folder / "orders.db")
    worker = WorkflowWorker(
        workflows=[order, ship], store=store, options=WorkerOptions(claim_poll_interval=0.01)
    )
    serving = asyncio.create_task(worker.run())
    client = WorkflowClient(store, poll_interval=0.05)
    light = await client.submit("order", {"order_id": "A1", "weight_kg": 2.5})
    heavy = await client.submit("order", {"order_id": "B2", "weight_kg": 45})
    results = [await light.result(timeout=30), await heavy.result(timeout=30)]
    worker.stop()
    await serving
    store.close()
    return results


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        for result in asyncio.run(main(Path(tmp))):
            print(result)
