"""The worker's presence: a record of itself (``WorkerInfo``) published to the store every
``presence_interval`` seconds, living ``presence_ttl`` seconds, so the store's
:meth:`live_workers` shows the workers alive now, and so that any live worker can take over
the runs of one whose record lapsed (:func:`take_over_lapsed` in ``_loops``) within seconds
of its death instead of a lease and an orphan scan. One that stops cleanly drops its record at
once (:func:`drop_presence`). Stores without the ``workers`` group are left alone.

The record is written from a thread of its own, not from the event loop: presence says the
*process* lives. A worker whose loop is blocked by a body that never awaits keeps its presence
and so its runs until their leases lapse, as before (the loop watchdog notes those lapses,
``_watchdog.py``); a process that is killed or frozen whole (SIGKILL, SIGSTOP, a machine that
died) stops writing, and its runs move once its record is ``presence_ttl`` old. The loop only
refreshes what the record says (slots in use, shards and partitions owned).

A worker takes nothing over until its own record has been written without a break for a whole
``presence_ttl`` (``Runtime.presence_steady_since``): after an outage of the store, or a freeze
of this process, every live worker's record may have lapsed at once, and each must have had a
``presence_ttl`` to write it again before anyone counts it gone.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import socket
import threading

from lockgate._errors import StoreUnavailable
from lockgate.stores._insight import WorkerInfo
from lockgate.worker._attempts import AttemptPool
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


class PresenceBeacon:
    """Writes ``info`` (stamped with the time of each write) every ``interval`` seconds for
    ``ttl`` seconds, from a daemon thread, until :meth:`stop`. A write the store refuses is
    tried again at the next tick; the first failure of a run of them is logged once, unless it
    is an outage (:class:`StoreUnavailable`), which the worker's store state tells. Sets
    ``rt.presence_steady_since`` to the time the present unbroken run of writes began (None
    while they fail): a write more than ``ttl`` after the one before starts a new run."""

    def __init__(self, rt: Runtime, info: WorkerInfo, *, interval: float, ttl: float) -> None:
        self._rt = rt
        self.info = info
        self._interval = interval
        self._ttl = ttl
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._beat, name=f"lockgate-presence:{rt.worker_id}", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def join(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for a write in flight to end."""
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _beat(self) -> None:
        warned = False
        written_at: float | None = None
        while not self._stop.is_set():
            try:
                now = self._rt.clock()
                info = dataclasses.replace(self.info, heartbeat_at=now)
                self._rt.store.record_worker(info, self._ttl)
            except StoreUnavailable as exc:
                # An outage: the worker's store state tells it, once, from its own calls.
                self._rt.presence_steady_since = None
                written_at = None
                log.debug("worker %s: presence not written: %s", self._rt.worker_id, exc)
            except Exception as exc:  # a thread's death would pass unseen: tell it, go on
                self._rt.presence_steady_since = None
                written_at = None
                if not warned:
                    log.warning(
                        "worker %s: publishing its presence failed: %s", self._rt.worker_id, exc
                    )
                warned = True
            else:
                if written_at is None or now - written_at > self._ttl:
                    self._rt.presence_steady_since = now
                written_at = now
                if warned:
                    log.info("worker %s: publishing its presence again", self._rt.worker_id)
                warned = False
            if self._stop.wait(self._interval):
                return


async def presence_loop(rt: Runtime, pool: AttemptPool, started_at: float) -> None:
    """Publish the worker's presence (see the module docstring) until cancelled."""
    interval = rt.options.presence_interval
    beacon = PresenceBeacon(
        rt, worker_info(rt, pool, started_at), interval=interval, ttl=rt.options.presence_ttl
    )
    beacon.start()
    try:
        while True:
            await asyncio.sleep(interval)
            beacon.info = worker_info(rt, pool, started_at)
    finally:
        beacon.stop()
        rt.presence_steady_since = None
        # A write in flight must land before the record is dropped, not after it.
        await asyncio.shield(asyncio.to_thread(beacon.join, rt.options.presence_ttl))


async def drop_presence(rt: Runtime) -> None:
    """Drop the worker's record on a clean stop; a store that is down lets it lapse."""
    if not publishes_presence(rt):
        return
    try:
        await rt.io(rt.store.drop_worker, rt.worker_id)
    except StoreUnavailable as exc:
        log.warning("worker %s: dropping its presence failed: %s", rt.worker_id, exc)
