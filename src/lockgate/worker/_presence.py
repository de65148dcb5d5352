"""The worker's presence: a record of itself (``WorkerInfo``) published to the store on the
heartbeat cadence, living ``lock_ttl`` seconds, so the store's :meth:`live_workers` shows the
workers alive now. One that dies lapses within a lock TTL; one that stops cleanly drops its
record at once (:func:`drop_presence`). Stores without the ``workers`` group are left alone.
"""

from __future__ import annotations

import logging
import os
import socket

from lockgate._errors import StoreUnavailable
from lockgate.stores._insight import WorkerInfo
from lockgate.worker._attempts import AttemptPool
from lockgate.worker._loops import Duty
from lockgate.worker._runtime import Runtime

log = logging.getLogger("lockgate.worker")


def publishes_presence(rt: Runtime) -> bool:
    return "workers" in rt.store.capabilities()


def worker_info(rt: Runtime, pool: AttemptPool, started_at: float) -> WorkerInfo:
    """What the worker is doing now, as its record says it."""
    from lockgate import __version__  # the package imports the worker: not at module load

    owned = [f"shard:{shard}" for shard in rt.shards]
    owned += [
        f"{name}:partition:{partition}"
        for name, partitions in sorted(rt.owned.items())
        for partition in partitions
    ]
    return WorkerInfo(
        worker_id=rt.worker_id,
        host=socket.gethostname(),
        pid=os.getpid(),
        version=__version__,
        workflows=tuple(rt.specs),
        slots_in_use=pool.running,
        slots=rt.options.max_concurrent_runs,
        owned=tuple(owned),
        started_at=started_at,
        heartbeat_at=rt.clock(),
    )


def presence(pool: AttemptPool, started_at: float) -> Duty:
    """The duty a worker runs ``every`` heartbeat interval: publish its record."""

    async def publish_presence(rt: Runtime) -> bool:
        info = worker_info(rt, pool, started_at)
        await rt.io(rt.store.record_worker, info, rt.store.lock_ttl)
        return False

    return publish_presence


async def drop_presence(rt: Runtime) -> None:
    """Drop the worker's record on a clean stop; a store that is down lets it lapse."""
    if not publishes_presence(rt):
        return
    try:
        await rt.io(rt.store.drop_worker, rt.worker_id)
    except StoreUnavailable as exc:
        log.warning("worker %s: dropping its presence failed: %s", rt.worker_id, exc)
