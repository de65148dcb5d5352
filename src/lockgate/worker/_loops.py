"""The loops a worker runs beside its attempts: one claim loop per workflow, and periodic
duties (timers, orphan scans, store maintenance).

Each loop returns when the worker stops. A store that is unavailable is tried again later (the
worker's store state tells the outage once, not each call it fails); any other exception ends
the loop and, through the worker, stops it.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Awaitable, Callable

from lockgate._errors import StoreUnavailable
from lockgate.stores._types import WaitOutcome
from lockgate.worker._attempts import AttemptPool
from lockgate.worker._runtime import Runtime
from lockgate.workflow._spec import WorkflowSpec, trigger_policy

log = logging.getLogger("lockgate.worker")

#: An idle claim loop backs off to at most this many poll intervals between claims.
MAX_BACKOFF_FACTOR = 10


def claim_backoff(poll_interval: float, misses: int) -> float:
    """Seconds to wait after ``misses`` empty claims in a row: doubling from the poll interval
    up to ``MAX_BACKOFF_FACTOR`` times it, jittered by +-20% so workers that start together
    do not poll the store in lockstep."""
    factor = min(2.0 ** max(0, misses - 1), MAX_BACKOFF_FACTOR)
    return poll_interval * factor * random.uniform(0.8, 1.2)


async def claim_some(rt: Runtime, pool: AttemptPool, spec: WorkflowSpec, count: int) -> bool:
    """Claim up to ``count`` queued runs of ``spec`` into slots already reserved (one store
    call), and start their attempts. False when nothing was claimable. Slots no run came for
    are given back."""
    leases = [rt.new_lease() for _ in range(count)]
    asked_at = rt.clock()  # the leases run from no later than this
    try:
        claimed = await rt.io(
            rt.store.claim_next_runs_loaded, spec.name, leases, spec.version, prefer=rt.prefer()
        )
    except BaseException:
        pool.unreserve(count)
        raise
    pool.unreserve(count - len(claimed))
    if rt.stop.is_set:
        # The stop came while the claim was in flight: return the runs before they start.
        pool.unreserve(len(claimed))
        for run, lease in zip(claimed, leases, strict=False):
            await rt.give_back(spec.name, run.run_id, lease)
        return bool(claimed)
    for run, lease in zip(claimed, leases, strict=False):
        pool.launch(spec, run.run_id, lease, run, leased_at=asked_at)
    return bool(claimed)


async def claim_loop(rt: Runtime, pool: AttemptPool, spec: WorkflowSpec) -> None:
    """Claim runs of ``spec`` while the worker runs, into its free slots: as many as are free,
    up to ``claim_batch_size``, in one claim.

    Claims go back to back while they find work; empty ones back off (``claim_backoff``)
    until one succeeds again. The loop is never cancelled in the middle of a claim: it
    checks the stop between claims, so a run is never claimed and then forgotten."""
    misses = 0
    poll = rt.options.claim_poll_interval
    while await pool.reserve():
        count = 1 + await pool.reserve_more(rt.options.claim_batch_size - 1)
        try:
            found = await claim_some(rt, pool, spec, count)
        except StoreUnavailable as exc:
            log.debug("claiming %s failed: %s", spec.name, exc)
            found = False
        if found:
            misses = 0
            continue
        misses += 1
        if await rt.stop.sleep(rt.clock, claim_backoff(poll, misses)):
            return


async def fire_due_timers(rt: Runtime) -> bool:
    """End up to ``timer_max_batch`` waits due now (sleeps wake, signal waits time out) and
    queue their runs. True when the batch was full and ended some: more may be due now.

    Every due wait in the store is ended, not only those of this worker's workflows: ending
    one only queues its run, and a worker of that workflow will claim it."""
    now = rt.clock()
    batch = rt.options.timer_max_batch
    due = await rt.io(rt.store.get_sleeping_runs, now, batch)
    ended = 0
    for name, run_id in due:
        outcome = await rt.io(rt.store.wake_due, name, run_id, due_by=now)
        ended += outcome == WaitOutcome.RESOLVED
    return len(due) >= batch and ended > 0


async def fire_due_triggers(rt: Runtime) -> bool:
    """Fire the Collect windows and Debounce quiet periods of this worker's triggered
    workflows that are due now. True when a batch was full: more may be due now. Workers
    racing on one buffer fire it once (the store takes the batch and submits its run in one
    step)."""
    now = rt.clock()
    batch = rt.options.timer_max_batch
    full = False
    for name, spec in rt.specs.items():
        if spec.trigger is None:
            continue
        due = await rt.io(rt.store.due_triggers, name, now, batch)
        for key in due:
            await rt.io(
                rt.store.fire_trigger, name, key, policy=trigger_policy(spec, key), due_by=now
            )
        full = full or len(due) >= batch
    return full


async def recover_orphans(rt: Runtime) -> bool:
    """Requeue the runs of this worker's workflows whose holder's lease lapsed (a worker that
    died or froze). The store counts each as ``owner_gone`` against the run's retries."""
    for name in rt.specs:
        recovered = await rt.io(rt.store.recover_pending_runs, name)
        if recovered:
            log.info("requeued %d run(s) of %s whose lease lapsed", len(recovered), name)
    return False


async def maintain(rt: Runtime) -> bool:
    """Let the store clean up (finished-run retention, expired idempotency records)."""
    removed = await rt.io(rt.store.run_maintenance)
    if removed:
        log.info("store maintenance removed %d record(s)", removed)
    return False


async def lease_shards(rt: Runtime) -> bool:
    """Renew this worker's lease on its fair share of the store's shards (taking free or
    lapsed ones, giving back any over its share), for its claims to try first."""
    leased = await rt.io(rt.store.rebalance_shards, rt.worker_id)  # type: ignore[attr-defined]
    if leased != rt.shards:
        log.info("worker %s now leases shards %s", rt.worker_id, leased)
    rt.shards = list(leased)
    return False


def sharded(store: object) -> bool:
    """Whether ``store`` spreads runs over shards a worker can lease."""
    count = getattr(store, "shard_count", 1)
    return hasattr(store, "rebalance_shards") and isinstance(count, int) and count > 1


Duty = Callable[[Runtime], Awaitable[bool]]


async def every(rt: Runtime, duty: Duty, interval: float, *, at_start: bool = True) -> None:
    """Run ``duty`` every ``interval`` seconds until the worker stops (first at once when
    ``at_start``). A duty that returns True has more to do and runs again without waiting."""
    if not at_start and await rt.stop.sleep(rt.clock, interval):
        return
    while not rt.stop.is_set:
        try:
            again = await duty(rt)
        except StoreUnavailable as exc:
            log.debug("%s failed: %s", duty.__name__, exc)
            again = False
        if again:
            continue
        if await rt.stop.sleep(rt.clock, interval):
            return
