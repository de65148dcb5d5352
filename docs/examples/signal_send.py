"""Signalling another run from a body: a payment run tells the order run that waits for it
that the money arrived, once, however often the payment run is replayed. Run it:
``python docs/examples/signal_send.py``."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

from lockgate import SQLiteStore, WorkflowClient, WorkflowContext, workflow
from lockgate.worker import WorkerOptions, WorkflowWorker


@workflow(name="awaiting_payment")
async def awaiting_payment(ctx: WorkflowContext, order_id: str) -> Any:
    paid = await ctx.wait_for_signal("paid", timeout=3600)
    return {"order": order_id, "paid": paid["amount"]}


@workflow(name="payment")
async def payment(ctx: WorkflowContext, order_run: str, amount: int) -> str:
    # A durable call: journaled, and sent with a key made of this run and call position, so
    # a replay after a crash does not send it twice.
    return await ctx.signal(awaiting_payment, order_run, "paid", {"amount": amount})


async def main(folder: Path) -> tuple[str, Any]:
    store = SQLiteStore(folder / "payments.db")
    worker = WorkflowWorker(
        workflows=[awaiting_payment, payment],
        store=store,
        options=WorkerOptions(claim_poll_interval=0.01),
    )
    serving = asyncio.create_task(worker.run())
    client = WorkflowClient(store, poll_interval=0.05)
    order = await client.submit("awaiting_payment", {"order_id": "A1"})
    pay = await client.submit("payment", {"order_run": order.run_id, "amount": 1299})
    answer = await pay.result(timeout=30)  # "delivered" (or "buffered", if it came first)
    outcome = await order.result(timeout=30)
    worker.stop()
    await serving
    store.close()
    return answer, outcome


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        print(*asyncio.run(main(Path(tmp))), sep="\n")
