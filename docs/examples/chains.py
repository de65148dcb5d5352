"""A meter that would run for ever, as a chain of short runs: each run takes a few readings,
then hands its total on with ``ctx.continue_as_new``. The caller only ever knows the first id.
Run it: ``python docs/examples/chains.py``."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from lockgate import SQLiteStore, WorkflowClient, WorkflowContext, resolve_continuation, workflow
from lockgate.worker import WorkerOptions, WorkflowWorker

#: Readings one run takes before it hands on (a real meter would take thousands).
PER_RUN = 3


@workflow(name="meter")
async def meter(ctx: WorkflowContext, account: str, total: int = 0) -> int:
    for _ in range(PER_RUN):
        reading = await ctx.wait_for_signal("reading")
        if reading.get("close"):
            return total
        total += int(reading["units"])
    # The journal of this run ends here; the next run starts with the total, and takes over
    # every reading already sent to this one and not yet taken.
    await ctx.continue_as_new({"account": account, "total": total})


async def main(folder: Path) -> tuple[int, str, str]:
    store = SQLiteStore(folder / "meters.db")
    worker = WorkflowWorker(
        workflows=[meter], store=store, options=WorkerOptions(claim_poll_interval=0.01)
    )
    serving = asyncio.create_task(worker.run())
    client = WorkflowClient(store, poll_interval=0.05)
    handle = await client.submit("meter", {"account": "acme"}, idempotency_key="meter-acme")
    for units in range(1, 8):
        # Sent to the first run's id, whichever run of the chain is live now.
        await handle.signal("reading", {"units": units}, signal_id=f"reading-{units}")
    await handle.signal("reading", {"close": True}, signal_id="close")
    total = await handle.result(timeout=30)  # the last run's result, read by the first id
    _, tail, _ = resolve_continuation(store, "meter", handle.run_id)
    worker.stop()
    await serving
    store.close()
    return total, handle.run_id, tail


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        total, root, tail = asyncio.run(main(Path(tmp)))
        print(f"total {total}")
        print(f"{root} resolves to {tail}")
