"""Workers on a ValkeyStore with shards: each leases its share and claims from it first, a
claim still reaches every shard, and a stopping worker gives its shards back."""

from __future__ import annotations

import asyncio
import uuid

from lockgate import Limit, ValkeyStore, WorkflowClient, WorkflowContext, workflow
from lockgate.worker import WorkerOptions, WorkflowWorker
from valkey_server import shared_url

OPTIONS = WorkerOptions(
    claim_poll_interval=0.01, shard_lease_interval=0.05, timer_poll_interval_s=0.05
)


@workflow(name="sharded_echo", concurrency=Limit(key="tenant", max=2))
async def sharded_echo(ctx: WorkflowContext, tenant: str, n: int) -> int:
    return n


async def wait_until(check: object, timeout: float = 60.0) -> None:
    assert callable(check)
    for _ in range(int(timeout / 0.02)):
        if check():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("timed out")


async def test_two_workers_split_the_shards_and_a_stopping_one_gives_its_back() -> None:
    namespace = f"w{uuid.uuid4().hex[:10]}"
    stores = [ValkeyStore(shared_url(), namespace=namespace, shard_count=4) for _ in range(3)]
    first, second = (
        WorkflowWorker(workflows=[sharded_echo], store=store, options=OPTIONS)
        for store in stores[:2]
    )
    tasks = [asyncio.create_task(first.run()), asyncio.create_task(second.run())]
    try:
        await wait_until(lambda: len(first._rt.shards) == 2 and len(second._rt.shards) == 2)
        assert sorted(first._rt.shards + second._rt.shards) == [0, 1, 2, 3]
        client = WorkflowClient(stores[2], poll_interval=0.02)
        handles = [
            await client.submit("sharded_echo", {"tenant": f"t{n % 7}", "n": n}) for n in range(40)
        ]
        shards = {stores[2].shard_of("sharded_echo", handle.run_id) for handle in handles}
        assert shards == {0, 1, 2, 3}  # the runs are spread over every shard
        assert [await handle.result(timeout=20) for handle in handles] == list(range(40))
        first.stop()
        await tasks[0]
        # Given back at its stop, not after a lease TTL: the other worker takes all four.
        await wait_until(lambda: second._rt.shards == [0, 1, 2, 3], timeout=5)
    finally:
        for worker in (first, second):
            worker.stop()
        await asyncio.gather(*tasks, return_exceptions=True)
        for store in stores:
            store.close()
