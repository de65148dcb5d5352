"""The worker's part in poison and stuck runs: the loop watchdog's task (see ``_watchdog``) and
the stranded scan (``WorkerOptions.stranded_policy``).

A run is *stranded* for a worker when it is queued, ``pinned`` to a version other than the one
this worker serves of its workflow, and was submitted more than ``stranded_timeout`` seconds
ago: a worker of its version, were one alive, would have claimed it by then. A worker cannot
see the versions other live workers serve, so during a rolling deploy ``stranded_timeout``
must be longer than a worker of the old version takes to reach such a run. Under
``StrandedPolicy.FAIL`` the scan claims each stranded run (its gates permitting) and ends it
with ``run:error`` code ``stranded``, fenced by that claim, so a run that another worker
claimed meanwhile is never ended under it. ``WAIT`` scans nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from lockgate._clock import iso
from lockgate._errors import ErrorCode, LockgateError
from lockgate.journal._events import EventKind, RunEvent, RunStatus
from lockgate.runs._family import after_store_ended
from lockgate.worker._attempts import AttemptPool
from lockgate.worker._options import StrandedPolicy
from lockgate.worker._runtime import Runtime
from lockgate.worker._watchdog import LoopWatchdog, blocked_threshold

log = logging.getLogger("lockgate.worker")

#: Runs of a workflow the stranded scan looks at, newest first, per scan.
STRANDED_SCAN_RUNS = 1000


async def watch_loop(rt: Runtime, pool: AttemptPool) -> None:
    """Run the loop watchdog until cancelled."""
    store = rt.store
    watchdog = LoopWatchdog(
        store,
        lambda: [(c.name, c.run_id, c.lease) for c in pool.held()],
        threshold=blocked_threshold(store.lock_ttl, store.heartbeat_interval),
    )
    watchdog.start()
    try:
        await asyncio.Event().wait()
    finally:
        watchdog.stop()


def stranded_payload(version: str, waited: float, served: str) -> dict[str, object]:
    message = (
        f"stranded: pinned to version {version!r}, which no live worker served for "
        f"{waited:.1f}s (this worker serves {served!r})"
    )
    code = ErrorCode.STRANDED.value
    return {
        "code": code,
        "message": message,
        "error": {"type": "lockgate:stranded", "message": message, "code": code},
        "detail": {"version": version, "waited_s": waited, "worker_version": served},
    }


async def fail_stranded(rt: Runtime) -> bool:
    """End the runs stranded for this worker (see the module docstring), under ``FAIL``."""
    options = rt.options
    if options.stranded_policy != StrandedPolicy.FAIL:
        return False
    now = rt.clock()
    for name, spec in rt.specs.items():
        runs, _ = await rt.io(rt.store.list_runs, name, limit=STRANDED_SCAN_RUNS)
        for info in runs:
            waited = now - info.submitted_at
            if (
                info.status != RunStatus.PENDING
                or info.version_behavior != "pinned"
                or not info.version
                or info.version == spec.version
                or waited < options.stranded_timeout
            ):
                continue
            await _fail_one(rt, name, info.run_id, info.version, waited, spec.version)
    return False


async def _fail_one(
    rt: Runtime, name: str, run_id: str, version: str, waited: float, served: str
) -> None:
    lease = rt.new_lease()
    try:
        await rt.io(rt.store.claim_run, name, run_id, lease)
    except LockgateError as exc:  # gated, claimed or ended meanwhile: not ours to end
        log.debug("run %s of %s: not failed as stranded: %s", run_id, name, exc)
        return
    terminal = RunEvent(EventKind.RUN_ERROR, stranded_payload(version, waited, served), run_id)
    try:
        await rt.io(rt.store.append_events, name, run_id, [terminal], fence=lease)
    except LockgateError as exc:
        log.warning("run %s of %s: failing it as stranded failed: %s", run_id, name, exc)
        with contextlib.suppress(LockgateError):
            await rt.io(rt.store.release_run, name, run_id, lease)
        return
    log.warning("run %s of %s: failed as stranded (pinned to %r)", run_id, name, version)
    try:
        await after_store_ended(rt.io, rt.store, iso(rt.clock()), name, run_id)
    except LockgateError as exc:  # its parent's backstop and children's own ends cover it
        log.info("run %s of %s: telling its family it ended failed: %s", run_id, name, exc)
