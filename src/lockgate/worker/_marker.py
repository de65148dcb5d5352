"""Whether the worker's store still holds its data: the marker it carries from its creation.

An empty store cannot tell a worker that it lost what it held: a Valkey restarted without
persistence answers every call, with nothing in it. So a store carries a marker
(:class:`~lockgate.stores.StoreMarker`) written only where a store is created on purpose: a
worker's start, ``lockgate store init``, ``lockgate store rebuild``. A worker reads it on its
heartbeat cadence, and at once when a call of an attempt finds its run missing. Found gone,
the worker says so in one error line (what happened, what to do), stops claiming, firing
timers and firing triggers, answers 503 on ``/readyz``, and ends the attempts whose runs went
with the data quietly. It reads the marker every second meanwhile, and goes on once the
marker is back (recording its workflows again, which went with the rest).

A marker that changed under the worker (another worker started on the emptied store before
this one looked) is the same loss, already acted on elsewhere: it is said once, and the worker
goes on.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from lockgate._clock import iso
from lockgate._errors import LockgateError, StoreUnavailable
from lockgate.stores._types import StoreMarker
from lockgate.streams._topics import kafka_journal
from lockgate.worker._status import describe_store, status_log

if TYPE_CHECKING:
    from lockgate.worker._runtime import Runtime

log = logging.getLogger("lockgate.worker")

#: Seconds between reads of the marker while it is gone: how soon the worker goes on once an
#: operator brought it back.
LOST_RECHECK_S = 1.0


class MarkerWatch:
    """What the worker last found of its store's marker."""

    def __init__(self, store: object) -> None:
        self._name = describe_store(store)
        self._journaled = kafka_journal(store) is not None
        #: The id of the marker the worker serves under; None before the first read.
        self.marker_id: str | None = None
        #: True while the marker is gone: the worker claims nothing.
        self.lost = False
        #: How many losses this worker has seen: an attempt begun before one was cut off by it.
        self.losses = 0

    @property
    def error(self) -> str:
        """Why the worker is not ready while the marker is gone."""
        return f"store {self._name} lost its data (its marker is gone)"

    def _advice(self) -> str:
        if self._journaled:
            return (
                "restore its runs from the Kafka journal with `lockgate store rebuild` (the "
                "same --store and --journal); this worker goes on once it has run"
            )
        return (
            "restore the store from a backup, or run `lockgate store init` to go on with it "
            "empty; this worker goes on once its marker is back"
        )

    def lost_at_start(self, records: int) -> None:
        """The store was found, at the worker's start, without its marker while its journal
        topic holds ``records`` records: a loss, said once; the worker claims nothing until a
        rebuild (or ``lockgate store init``) marks it."""
        self.lost = True
        self.losses += 1
        status_log.error(
            "%s, but its Kafka journal holds %d record(s): the runs they journal are not in "
            "the store, and this worker claims nothing; %s (or `lockgate store init` to go on "
            "without them)",
            self.error,
            records,
            self._advice(),
        )

    def seen(self, marker: StoreMarker | None) -> bool:
        """Take in a read of the marker; True when it came back (the worker goes on)."""
        if marker is None:
            if not self.lost and self.marker_id is not None:
                self.lost = True
                self.losses += 1
                status_log.error(
                    "%s: every run it held is gone with it, and this worker stops claiming; %s",
                    self.error,
                    self._advice(),
                )
            return False
        came_back = self.lost
        if came_back:
            status_log.info(
                "store %s carries its marker again (written %s); the worker goes on",
                self._name,
                iso(marker.created_at),
            )
        elif self.marker_id is not None and marker.marker_id != self.marker_id:
            self.losses += 1
            status_log.error(
                "store %s lost its data and was marked anew (%s) before this worker looked: "
                "the runs it held are gone unless a rebuild restored them",
                self._name,
                iso(marker.created_at),
            )
        self.lost = False
        self.marker_id = marker.marker_id
        return came_back


async def mark_store(rt: Runtime) -> None:
    """At the worker's start: write the marker unless the store carries one (a new store),
    and learn which marker the worker serves under. A store with a Kafka journal whose
    lifecycle holds no marker and no run while its journal topic holds records is not new: it
    lost its data, and is left unmarked (the worker waits as for any loss) for a rebuild to
    restore. (A new store a client submitted to before any worker started holds that run.)"""
    journal = kafka_journal(rt.store)
    if (
        journal is not None
        and await rt.io(rt.store.read_marker) is None
        and not await rt.io(runs_held, rt.store)
    ):
        records = (await rt.io(journal.info))["records"]
        if records:
            rt.marker.lost_at_start(records)
            return
    await rt.io(rt.store.ensure_marker)
    rt.marker.seen(await rt.io(rt.store.read_marker))


def runs_held(store: object) -> int:
    """How many runs the lifecycle tier of a composite ``store`` holds (live, or ended and not
    yet forgotten), as its ``info()`` counts them."""
    lifecycle = getattr(store, "lifecycle", store)
    workflows = lifecycle.info().get("workflows", {})  # type: ignore[attr-defined]
    return sum(int(counts.get("runs", 0)) for counts in workflows.values())


async def check_marker(rt: Runtime) -> bool:
    """Read the marker now; True when the store is found without its data. A store that does
    not answer tells nothing (its outage is told by the store state)."""
    try:
        marker = await rt.io(rt.store.read_marker)
    except StoreUnavailable as exc:
        log.debug("reading the store's marker failed: %s", exc)
        return rt.marker.lost
    if rt.marker.seen(marker):
        await _go_on(rt)
    return rt.marker.lost


async def _go_on(rt: Runtime) -> None:
    """The marker is back: record the workflows again (their versions and policies went with
    the data) and wake the claim loops."""
    from lockgate.worker._registration import register_workflows  # which the runtime imports

    try:
        await register_workflows(rt)
    except LockgateError as exc:
        # The next start records them; submits by name meanwhile need the workflow imported.
        log.warning("recording the workflows again failed: %s", exc)
    for name in rt.specs:
        rt.wakeup(f"claim:{name}").set()
    rt.wakeup("waits").set()
    rt.wakeup("triggers").set()


async def watch_marker(rt: Runtime) -> None:
    """Read the store's marker every heartbeat interval (every second while it is gone, or at
    once when nudged), until the worker stops."""
    nudge = rt.wakeup("marker")
    while not rt.stop.is_set:
        lost = await check_marker(rt)
        wait = min(LOST_RECHECK_S, rt.store.heartbeat_interval) if lost else None
        if await rt.rest(wait if wait is not None else rt.store.heartbeat_interval, nudge):
            return


async def lost_with_store(rt: Runtime, losses_before: int) -> bool:
    """Whether a run an attempt held went missing with the store's data: a loss seen since the
    attempt began (``losses_before``: :attr:`MarkerWatch.losses` then), or the marker found
    gone now."""
    if rt.marker.losses > losses_before:
        return True
    return await check_marker(rt) or rt.marker.losses > losses_before
