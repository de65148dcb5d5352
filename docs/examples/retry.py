"""Retrying a failed run from where it failed: the finished step is served from the failed
run's journal, the failed one runs again. Run it: ``python docs/examples/retry.py``."""

from __future__ import annotations

import asyncio
import tempfile
from collections import Counter
from pathlib import Path

from lockgate import (
    DurableInvocationError,
    RetryPolicy,
    SQLiteStore,
    WorkflowClient,
    WorkflowContext,
    step,
    workflow,
)
from lockgate.worker import WorkerOptions, WorkflowWorker

CALLS: Counter[str] = Counter()
CARRIER_UP = False


@step(name="reserve_stock")
async def reserve_stock(order_id: str) -> str:
    CALLS["reserve_stock"] += 1
    return f"reservation-{order_id}"


@step(name="book_carrier", retry=RetryPolicy(max_attempts=2, initial_backoff=0.01))
async def book_carrier(order_id: str) -> str:
    CALLS["book_carrier"] += 1
    if not CARRIER_UP:
        raise ConnectionError("the carrier's API is down")
    return f"parcel-{order_id}"


@workflow(name="fulfil")
async def fulfil(ctx: WorkflowContext, order_id: str) -> str:
    reservation = await reserve_stock(order_id)
    parcel = await book_carrier(order_id)
    return f"{reservation}, {parcel}"


async def main(folder: Path) -> list[str]:
    global CARRIER_UP
    store = SQLiteStore(folder / "orders.db")
    worker = WorkflowWorker(
        workflows=[fulfil], store=store, options=WorkerOptions(claim_poll_interval=0.01)
    )
    serving = asyncio.create_task(worker.run())
    client = WorkflowClient(store, poll_interval=0.05)
    lines = []
    failed = await client.submit("fulfil", {"order_id": "A1"})
    try:
        await failed.result(timeout=30)
    except DurableInvocationError as exc:
        lines.append(f"first run: {(await failed.status()).value} ({exc.detail})")
    plan = await client.plan_retry("fulfil", failed.run_id)
    lines.append(f"plan: {plan.seeded_events} events carried over, in doubt: {list(plan.in_doubt)}")
    CARRIER_UP = True  # the outage is over (or the bug is fixed and deployed)
    retried = await failed.retry()
    lines.append(
        f"retry {retried.run_id.removeprefix(failed.run_id)}: {await retried.result(timeout=30)}"
    )
    lines.append(f"calls: {dict(CALLS)}")
    worker.stop()
    await serving
    store.close()
    return lines


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        print(*asyncio.run(main(Path(tmp))), sep="\n")
