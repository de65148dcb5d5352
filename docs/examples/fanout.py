"""Fan-out: resize 20 images as 20 child runs, at most 5 at a time, and gather the results in
order; then checksum them with a step per item. Run it: ``python docs/examples/fanout.py``."""

from __future__ import annotations

import asyncio
import hashlib
import tempfile
from pathlib import Path

from lockgate import SQLiteStore, WorkflowClient, WorkflowContext, step, workflow
from lockgate.worker import WorkerOptions, WorkflowWorker


@workflow(name="resize")
async def resize(ctx: WorkflowContext, image: str, width: int) -> str:
    return f"{image.removesuffix('.png')}-{width}w.png"


@step
def checksum(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()[:8]


@workflow(name="album")
async def album(ctx: WorkflowContext, images: list[str]) -> dict[str, str]:
    # One child run per image: its params are the item. At most 5 run at once.
    resized = await ctx.fan_out(
        resize, [{"image": image, "width": 640} for image in images], max_in_flight=5
    )
    # One step per item, in this run: the item is the step's argument.
    sums = await ctx.fan_out(checksum, resized, max_in_flight=10)
    return dict(zip(resized, sums, strict=True))


async def main(folder: Path) -> dict[str, str]:
    store = SQLiteStore(folder / "album.db")
    worker = WorkflowWorker(
        workflows=[album, resize], store=store, options=WorkerOptions(claim_poll_interval=0.01)
    )
    serving = asyncio.create_task(worker.run())
    client = WorkflowClient(store, poll_interval=0.05)
    handle = await client.submit("album", {"images": [f"img{n:02}.png" for n in range(20)]})
    result: dict[str, str] = await handle.result(timeout=60)
    worker.stop()
    await serving
    store.close()
    return result


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        for name, digest in asyncio.run(main(Path(tmp))).items():
            print(name, digest)
