"""The loop watchdog: tells a worker's blocked event loop apart from a dead worker.

A body that never awaits (a CPU loop, a blocking call on the loop) stops everything on the
worker's event loop, heartbeats included, so the leases of the runs it holds lapse as if the
process had died. A thread of the worker's own watches the loop: the loop stamps a time every
``TICK`` seconds, and once no stamp came for ``threshold`` seconds (well before a lease can
lapse) the thread notes, on each run the worker holds, that its lease's loop was blocked
(``Store.note_loop_blocked``). The store then knows such a lapse as loop-blocked, and
``WorkerOptions.poison_counts_loop_blocked`` decides whether it counts as a crash. The note
holds only until the lease is renewed: a loop that comes back in time leaves no trace.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Sequence

from lockgate.attempt import _blocked as blocked
from lockgate.stores._base import Store

log = logging.getLogger("lockgate.worker")

#: Seconds between the loop's stamps.
TICK = 0.05


def blocked_threshold(lock_ttl: float, heartbeat_interval: float) -> float:
    """Seconds of silence after which the loop counts as blocked: half of the shortest time in
    which a lease renewed just before the block can lapse, so the note lands first."""
    return max(TICK * 4, (lock_ttl - heartbeat_interval) / 2)


class LoopWatchdog:
    """Watch the running loop from a daemon thread; see the module docstring. ``held`` lists
    ``(name, run_id, lease)`` of the runs held now; it is read from the thread while the loop
    is blocked (when nothing changes it)."""

    def __init__(
        self,
        store: Store,
        held: Callable[[], Sequence[tuple[str, str, str]]],
        *,
        threshold: float,
    ) -> None:
        self._store = store
        self._held = held
        self.threshold = threshold
        self._stamp = time.monotonic()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._handle: asyncio.TimerHandle | None = None
        #: Blocked episodes seen, for logs and tests.
        self.episodes = 0

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._stamp = time.monotonic()
        self._tick(loop)
        self._thread = threading.Thread(target=self._watch, name="lockgate-watchdog", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._handle is not None:
            self._handle.cancel()

    def _tick(self, loop: asyncio.AbstractEventLoop) -> None:
        self._stamp = time.monotonic()
        if not self._stop.is_set():
            self._handle = loop.call_later(TICK, self._tick, loop)

    def _watch(self) -> None:
        noted: set[str] = set()
        while not self._stop.wait(TICK):
            silent = time.monotonic() - self._stamp
            if silent < self.threshold:
                noted.clear()
                continue
            try:
                held = list(self._held())
            except RuntimeError:  # changed under us: the loop is not blocked after all
                continue
            for name, run_id, lease in held:
                if lease in noted:
                    continue
                noted.add(lease)
                if len(noted) == 1:
                    self.episodes += 1
                    log.warning(
                        "the worker's event loop has been blocked for %.1fs (a body that does "
                        "not await?); noting it on the runs it holds",
                        silent,
                    )
                blocked.note(lease)
                try:
                    self._store.note_loop_blocked(name, run_id, lease)
                except Exception as exc:
                    log.debug("noting run %s as loop-blocked failed: %s", run_id, exc)
