"""The loops a worker runs beside its attempts: one claim loop per workflow, and periodic
duties (timers, orphan scans, takeover of lapsed workers' runs, store maintenance).

Each loop returns when the worker stops. A store that is unavailable is tried again later (the
worker's store state tells the outage once, not each call it fails); any other exception ends
the loop and, through the worker, stops it.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Awaitable, Callable
from typing import NamedTuple

from lockgate._clock import PRECISE_TAIL, iso
from lockgate._errors import StoreUnavailable
from lockgate.metrics import _hooks as metrics
from lockgate.runs._family import after_store_ended
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
    # The exponent is capped: an idle worker's misses grow without end, and 2.0 ** 1024
    # overflows.
    factor = min(2.0 ** min(max(0, misses - 1), 64), MAX_BACKOFF_FACTOR)
    return poll_interval * factor * random.uniform(0.8, 1.2)


class Claimed(NamedTuple):
    """What one claim of a claim loop took: ``runs`` runs, and when it came short because a
    Rate refused a bucket, ``token_at``: the earliest the first token can come, on the
    worker's clock (the moment the claim was sent, plus the store's wait)."""

    runs: int
    token_at: float | None = None


async def claim_some(rt: Runtime, pool: AttemptPool, spec: WorkflowSpec, count: int) -> bool:
    """Claim up to ``count`` queued runs of ``spec`` into slots already reserved (one store
    call), and start their attempts. False when nothing was claimable. Slots no run came for
    are given back."""
    return (await claim_batch(rt, pool, spec, count)).runs > 0


async def claim_batch(
    rt: Runtime, pool: AttemptPool, spec: WorkflowSpec, count: int, *, at: float | None = None
) -> Claimed:
    """:func:`claim_some`, saying what the claim took and when its next token comes. With
    ``at`` (a token's time, a few milliseconds off) the claim is made right at it."""
    if rt.marker.lost:
        # The store lost its data: nothing is claimed until its marker is back (which nudges).
        pool.unreserve(count)
        return Claimed(0)
    leases = [rt.new_lease() for _ in range(count)]
    asked_at = rt.clock()  # the leases run from no later than this
    try:
        claimed, sent = await rt.io_at(
            at,
            rt.store.claim_next_runs_loaded,
            spec.name,
            leases,
            spec.version,
            prefer=rt.prefer(spec.name),
        )
    except BaseException:
        pool.unreserve(count)
        raise
    pool.unreserve(count - len(claimed))
    metrics.claimed(spec.name, len(claimed), rt.clock() - sent)
    # A store may answer a plain list: it cannot tell when a token comes. It measured its
    # wait from when it took the claim, just after ``sent``.
    token_in = getattr(claimed, "next_token_in", None)
    answer = Claimed(len(claimed), sent + token_in if token_in is not None else None)
    if rt.stop.is_set:
        # The stop came while the claim was in flight: return the runs before they start.
        pool.unreserve(len(claimed))
        for run, lease in zip(claimed, leases, strict=False):
            await rt.give_back(spec.name, run.run_id, lease)
        metrics.requeued(spec.name, "handed_back", len(claimed))
        return answer
    for run, lease in zip(claimed, leases, strict=False):
        pool.launch(spec, run.run_id, lease, run, leased_at=asked_at)
    return answer


async def claim_loop(rt: Runtime, pool: AttemptPool, spec: WorkflowSpec) -> None:
    """Claim runs of ``spec`` while the worker runs, into its free slots: as many as are free,
    up to ``claim_batch_size``, in one claim.

    Claims go back to back while they find work. A claim that comes short because a Rate
    refused a bucket waits until that bucket's next token, to the tenth of a millisecond, and
    claims again: for a ``Rate`` with a burst of 1 every millisecond late is a token lost.
    Other empty claims back off (``claim_backoff``) until one succeeds again; a token wait is
    never longer than that backoff, so runs queued meanwhile by others are seen as soon as
    before. A nudge (a run of ``spec`` queued by this worker's timer or trigger loop) cuts a
    wait short. The loop is never cancelled in the middle of a claim: it checks the stop
    between claims, so a run is never claimed and then forgotten."""
    misses = 0
    poll = rt.options.claim_poll_interval
    nudge = rt.wakeup(f"claim:{spec.name}")
    at: float | None = None  # when the next claim is to be made: a token's time
    while await pool.reserve():
        most = rt.options.claim_batch_size
        if spec.worker_cap is not None:
            most = min(most, spec.worker_cap - pool.running_of(spec.name))
            if most < 1:
                # At the workflow's own cap: claim again once one of its runs ends.
                pool.unreserve(1)
                await pool.wait_any(spec.name)
                continue
        count = 1 + await pool.reserve_more(most - 1)
        try:
            answer = await claim_batch(rt, pool, spec, count, at=at)
        except StoreUnavailable as exc:
            log.debug("claiming %s failed: %s", spec.name, exc)
            answer = Claimed(0)
        at = None
        if answer.runs == count or (answer.runs and answer.token_at is None):
            misses = 0
            continue
        misses = 0 if answer.runs else misses + 1
        wait = claim_backoff(poll, misses)
        if answer.token_at is not None and answer.token_at - rt.clock() <= wait:
            # Rest until just before the token; the claim then waits out the rest itself.
            at = answer.token_at
            wait = max(0.0, at - rt.clock() - PRECISE_TAIL)
        if await rt.rest(wait, nudge):
            return
        if at is not None and at - rt.clock() > 2 * PRECISE_TAIL:
            at = None  # nudged well before the token: claim what was queued now


async def fire_due_timers(rt: Runtime) -> bool:
    """End up to ``timer_max_batch`` waits due now (sleeps wake, signal waits time out) and
    queue their runs. True when the batch was full and ended some: more may be due now.

    Every due wait in the store is ended, not only those of this worker's workflows: ending
    one only queues its run, and a worker of that workflow will claim it (this worker's own
    claim loop at once)."""
    return await end_due_waits(rt, rt.clock())


async def end_due_waits(rt: Runtime, now: float) -> bool:
    """:func:`fire_due_timers` for the waits due by ``now``; none while the store is without
    its data (see ``worker/_marker.py``)."""
    if rt.marker.lost:
        return False
    batch = rt.options.timer_max_batch
    due = await rt.io(rt.store.get_sleeping_runs, now, batch)
    ended = 0
    for name, run_id in due:
        outcome = await rt.io(rt.store.wake_due, name, run_id, due_by=now)
        if outcome == WaitOutcome.RESOLVED:
            ended += 1
            if name in rt.specs:
                rt.wakeup(f"claim:{name}").set()
    return len(due) >= batch and ended > 0


async def fire_due_triggers(rt: Runtime) -> bool:
    """Fire the Collect windows and Debounce quiet periods of this worker's triggered
    workflows that are due now. True when a batch was full: more may be due now. Workers
    racing on one buffer fire it once (the store takes the batch and submits its run in one
    step)."""
    return await fire_triggers_due(rt, rt.clock())


async def fire_triggers_due(rt: Runtime, now: float) -> bool:
    """:func:`fire_due_triggers` for the buffers due by ``now``; none while the store is
    without its data."""
    if rt.marker.lost:
        return False
    batch = rt.options.timer_max_batch
    full = False
    for name, spec in rt.specs.items():
        if spec.trigger is None:
            continue
        due = await rt.io(rt.store.due_triggers, name, now, batch)
        # When the most overdue buffer fell due, for its fire delay (the store does not say
        # each buffer's due time, only the soonest).
        earliest = await _earliest_due(rt, name) if due else None
        for key in due:
            fired = await rt.io(
                rt.store.fire_trigger, name, key, policy=trigger_policy(spec, key), due_by=now
            )
            if fired is not None:
                if earliest is not None:
                    metrics.fired_late(name, rt.clock() - earliest)
                    earliest = None
                rt.wakeup(f"claim:{name}").set()
        full = full or len(due) >= batch
    return full


#: Earlier than any due time a store holds: asking for the next one after it gives the first.
_BEFORE_ALL = -1e18


async def _earliest_due(rt: Runtime, name: str) -> float | None:
    """The due time of the soonest buffer of ``name``, when metrics are kept and the store
    can tell it; else None."""
    if not metrics.enabled() or "trigger_due" not in rt.store.capabilities():
        return None
    due: float | None = await rt.io(rt.store.next_trigger_due, name, _BEFORE_ALL)
    return due


async def recover_orphans(rt: Runtime) -> bool:
    """Requeue the runs of this worker's workflows whose holder's lease lapsed (a worker that
    died or froze). The store counts each as ``owner_gone`` against the run's retries, and as
    a crash against this worker's poison policy (quarantining a run past it)."""
    for name in rt.specs:
        recovered = await rt.io(
            rt.store.recover_pending_runs, name, poison=rt.options.poison_policy
        )
        if recovered:
            log.info("requeued %d run(s) of %s whose lease lapsed", len(recovered), name)
            metrics.requeued(name, "owner_gone", len(recovered))
        for run_id in recovered:
            # One the store ended instead (quarantined, out of retries) tells its parent and
            # closes its children here: its own attempt never reached its end to do it.
            await after_store_ended(rt.io, rt.store, iso(rt.clock()), name, run_id)
    return False


def takes_over(rt: Runtime) -> bool:
    """Whether the worker's store can take over the runs of a worker whose presence lapsed
    (and keeps presence records at all)."""
    return {"takeover", "workers"} <= rt.store.capabilities()


async def take_over_lapsed(rt: Runtime) -> bool:
    """Requeue the runs of this worker's workflows held by a worker whose presence record
    lapsed (one killed or frozen whole), without waiting for their leases to lapse; this
    worker is never taken as lapsed. Each counts as ``owner_gone`` and as a crash, as an
    orphan scan's would (see :func:`recover_orphans`)."""
    for name in rt.specs:
        taken = await rt.io(
            rt.store.recover_lapsed_holders,
            name,
            keep=(rt.worker_id,),
            poison=rt.options.poison_policy,
        )
        if not taken:
            continue
        log.info(
            "requeued %d run(s) of %s whose worker's presence lapsed (taken over)", len(taken), name
        )
        metrics.requeued(name, "owner_gone", len(taken))
        for run_id in taken:
            await after_store_ended(rt.io, rt.store, iso(rt.clock()), name, run_id)
        rt.wakeup(f"claim:{name}").set()
    return False


async def take_over_when_present(rt: Runtime) -> bool:
    """:func:`take_over_lapsed`, once this worker's own presence has been written without a
    break for a whole ``presence_ttl``: after an outage of the store (or a freeze of this
    process) the other live workers' records may have lapsed too, and each gets a
    ``presence_ttl`` to write its record again before its runs count as a dead worker's."""
    since = rt.presence_steady_since
    if since is None or rt.clock() - since < rt.options.presence_ttl:
        return False
    return await take_over_lapsed(rt)


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
