"""The attempts a worker is running: a bounded pool of tasks, one per claimed run."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from dataclasses import dataclass

from lockgate._errors import RunNotFoundError, StoreFileGone, StoreUnavailable
from lockgate.attempt import _blocked as blocked
from lockgate.attempt._attempt import Attempt
from lockgate.attempt._unwind import AttemptOutcome
from lockgate.metrics import _hooks as metrics
from lockgate.stores import _notices as notices
from lockgate.stores._types import ClaimedRun
from lockgate.worker._marker import lost_with_store
from lockgate.worker._runtime import Runtime, wait_all
from lockgate.worker._status import backoff
from lockgate.workflow._spec import WorkflowSpec

log = logging.getLogger("lockgate.worker")

#: The outcomes of an attempt after which its run is over.
RUN_ENDED = frozenset(
    {
        AttemptOutcome.COMPLETED,
        AttemptOutcome.FAILED,
        AttemptOutcome.CANCELLED,
        AttemptOutcome.ALREADY_ENDED,
    }
)

#: Seconds between tries to requeue a run while the store stays unreachable: doubling from
#: the first to the most (each try also waits out the store's own retries).
REQUEUE_RETRY_FIRST = 0.2
REQUEUE_RETRY_MOST = 5.0


@dataclass(frozen=True)
class Claim:
    """A run this worker holds, and the lease it holds it under."""

    name: str
    run_id: str
    lease: str
    #: The losses of the store's data the worker had seen when the run was claimed: one seen
    #: since took the run with it (``worker/_marker.py``).
    losses: int = 0


class AttemptPool:
    """Runs each claimed run's attempt as its own task, at most ``max_concurrent_runs`` at
    once across every workflow of the worker.

    A claim loop reserves a slot before it claims, so a worker never holds a run it has no
    room to start. The slot is freed when the attempt's task ends, however it ends.
    """

    def __init__(self, runtime: Runtime) -> None:
        self._rt = runtime
        self._slots = asyncio.Semaphore(runtime.options.max_concurrent_runs)
        self._running: dict[asyncio.Task[None], Claim] = {}
        #: How many of ``_running`` are of each workflow.
        self._running_of: collections.Counter[str] = collections.Counter()
        #: How many attempts ended each way, for logs and tests.
        self.outcomes: collections.Counter[str] = collections.Counter()
        self.started = 0

    @property
    def running(self) -> int:
        return len(self._running)

    def running_of(self, name: str) -> int:
        """How many attempts of the workflow ``name`` are running now."""
        return self._running_of[name]

    def held(self) -> list[Claim]:
        """The runs whose attempts are running now."""
        return list(self._running.values())

    async def reserve(self) -> bool:
        """Wait for a free slot and take it; False, holding none, when the worker stops first."""
        if await self.try_reserve():
            return True
        acquire = asyncio.ensure_future(self._slots.acquire())
        if await self._rt.stop.race(acquire):
            if acquire.done() and not acquire.cancelled():
                self._slots.release()
            acquire.cancel()
            return False
        return True

    async def try_reserve(self) -> bool:
        """Take a free slot if there is one, without waiting for one."""
        if self._rt.stop.is_set or self._slots.locked():
            return False
        return await self._slots.acquire()  # not locked: returns without suspending

    async def reserve_more(self, most: int) -> int:
        """Take up to ``most`` more slots that are free now, without waiting; how many."""
        taken = 0
        while taken < most and await self.try_reserve():
            taken += 1
        return taken

    def unreserve(self, count: int = 1) -> None:
        """Give back ``count`` slots taken by :meth:`reserve` that no attempt will use."""
        for _ in range(count):
            self._slots.release()

    def launch(
        self,
        spec: WorkflowSpec,
        run_id: str,
        lease: str,
        claimed: ClaimedRun | None = None,
        *,
        leased_at: float | None = None,
    ) -> None:
        """Start the attempt of a claimed run in the slot reserved for it; ``claimed`` is what
        the claim read with it (the journal and controls), if it did, and ``leased_at`` the
        time from which its lease runs."""
        claim = Claim(spec.name, run_id, lease, self._rt.marker.losses)
        task = asyncio.create_task(
            self._measured(spec, claim, claimed, leased_at),
            name=f"lockgate-attempt:{spec.name}:{run_id}",
        )
        self._running[task] = claim
        self._running_of[claim.name] += 1
        self.started += 1
        task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[None]) -> None:
        claim = self._running.pop(task, None)
        if claim is not None:
            self._running_of[claim.name] -= 1
        self._slots.release()
        if not task.cancelled() and task.exception() is not None:
            log.error("attempt task %s died", task.get_name(), exc_info=task.exception())

    async def wait_any(self, name: str | None = None) -> None:
        """Wait until at least one running attempt (of the workflow ``name``, if given) ends,
        or the worker stops (at once if none is running)."""
        running = {t for t, c in self._running.items() if name is None or c.name == name}
        if running:
            stopped = asyncio.ensure_future(self._rt.stop.wait())
            try:
                await asyncio.wait({*running, stopped}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                stopped.cancel()

    async def _measured(
        self,
        spec: WorkflowSpec,
        claim: Claim,
        claimed: ClaimedRun | None,
        leased_at: float | None,
    ) -> None:
        """:meth:`_attempt`, its duration and outcome told to the metrics."""
        started = self._rt.clock()
        metrics.attempt_started(spec.name)
        outcome: str | None = None
        try:
            outcome = await self._attempt(spec, claim, claimed, leased_at)
        finally:
            metrics.attempt_ended(spec.name, outcome, self._rt.clock() - started)
            if outcome == AttemptOutcome.HANDED_BACK:
                metrics.requeued(spec.name, "handed_back")

    async def _attempt(
        self,
        spec: WorkflowSpec,
        claim: Claim,
        claimed: ClaimedRun | None = None,
        leased_at: float | None = None,
    ) -> str | None:
        """Run the attempt; how it ended (an :class:`AttemptOutcome`, or what kept it from
        ending so: ``store_unavailable``, ``crashed``, ``store_file_gone``)."""
        rt = self._rt
        # When the claim was asked for: a store failure of this attempt is news of an outage
        # only if nothing got through since (a claim that waited out an outage through the
        # store's retries starts with its lease already short, and fails for that).
        asked_at = leased_at if leased_at is not None else rt.clock()
        try:
            events = (
                claimed.events
                if claimed is not None and claimed.events is not None
                else await rt.io(rt.store.load_run, spec.name, claim.run_id)
            )
        except StoreFileGone:
            return self._file_gone(claim)
        except Exception as exc:
            # An outage is told by the store state; any other failure here is news.
            log.log(
                logging.INFO if isinstance(exc, StoreUnavailable) else logging.WARNING,
                "run %s of %s: loading the journal failed: %s",
                claim.run_id,
                spec.name,
                exc,
            )
            await self._requeue_when_back(claim)
            return "store_unavailable"
        attempt = Attempt(
            store=rt.store,
            spec=spec,
            run_id=claim.run_id,
            lease=claim.lease,
            clock=rt.clock,
            events=events,
            event_buffer_size=rt.options.event_buffer_size,
            step_boundary_durability=rt.options.step_boundary_durability,
            should_stop=lambda: rt.stop.is_set,
            controls=claimed.controls if claimed is not None else None,
            leased_at=leased_at,
        )
        attempt.cancel_timeout = rt.options.cancel_timeout
        try:
            outcome = await attempt.execute()
        except StoreFileGone:
            return self._file_gone(claim)
        except StoreUnavailable as exc:
            # The attempt's own calls do not go through ``rt.io``: tell the store state here.
            rt.store_state.failed(exc, asked_at, rt.store_state.ATTEMPT)
            metrics.store_error("attempt")
            log.info("run %s of %s: %s", claim.run_id, spec.name, exc)
            self.outcomes["store_unavailable"] += 1
            if blocked.was_blocked(claim.lease):
                # The loop was blocked, not the store away: the orphan scan counts it.
                return "store_unavailable"
            if not attempt.put_back:
                # The store is still away: keep the run in its slot and try until it lands.
                await self._requeue_when_back(claim)
            return "store_unavailable"
        except Exception as exc:
            if isinstance(exc, RunNotFoundError) and await lost_with_store(rt, claim.losses):
                return self._lost_with_store(claim)
            # An engine fault, not the body's (the body's own errors end the run in error).
            # Requeue it as a lost attempt, so a run that keeps hitting it ends after
            # max_retries instead of looping.
            log.exception("run %s of %s: the attempt failed", claim.run_id, spec.name)
            self.outcomes["crashed"] += 1
            with contextlib.suppress(Exception):
                await rt.io(
                    rt.store.requeue_run, spec.name, claim.run_id, claim.lease, reason="owner_gone"
                )
                metrics.requeued(spec.name, "owner_gone")
            return "crashed"
        self.outcomes[outcome.value] += 1
        if outcome in RUN_ENDED:
            told = rt.run_ended.get(spec.name)
            if told is not None:
                told(claim.run_id)
        if outcome == AttemptOutcome.SUSPENDED:
            # It may have parked on a deadline sooner than the timer loops here sleep towards.
            notices.post(rt.store, notices.WAITS)
        if outcome == AttemptOutcome.ABANDONED:
            log.warning("run %s of %s: the attempt lost its lease", claim.run_id, spec.name)
        else:
            log.debug("run %s of %s: %s", claim.run_id, spec.name, outcome.value)
        return outcome.value

    def _file_gone(self, claim: Claim) -> str:
        """The attempt met a store whose file is gone: nothing of it can be written, and the
        worker's loops stop it (and say why, once); the run went with the file."""
        log.info(
            "run %s of %s: the store's file is gone; attempt dropped", claim.run_id, claim.name
        )
        self.outcomes["store_file_gone"] += 1
        return "store_file_gone"

    def _lost_with_store(self, claim: Claim) -> str:
        """The attempt's run went with the store's data: nothing of it can be written, and
        the worker has said so once (``worker/_marker.py``); a rebuild brings the run back."""
        log.debug(
            "run %s of %s: gone with the store's data; attempt dropped", claim.run_id, claim.name
        )
        self.outcomes["store_lost"] += 1
        return "store_lost"

    async def _requeue_when_back(self, claim: Claim) -> None:
        """Requeue a run whose attempt lost the store, as ``store_unavailable`` (counted
        against ``max_store_requeues``): now, and while the store stays unreachable, again
        with backoff, the run keeping its slot meanwhile. A lease that lapsed during the
        outage still lets its holder requeue the run, unless an orphan scan (which counts
        ``owner_gone``) or another claim got to it first; then this does nothing."""
        rt = self._rt
        for delay in backoff(REQUEUE_RETRY_FIRST, REQUEUE_RETRY_MOST):
            try:
                await rt.io(
                    rt.store.requeue_run,
                    claim.name,
                    claim.run_id,
                    claim.lease,
                    reason="store_unavailable",
                )
                log.info("run %s of %s: put back in the queue", claim.run_id, claim.name)
                metrics.requeued(claim.name, "store_unavailable")
                return
            except StoreFileGone:
                self._file_gone(claim)
                return
            except RunNotFoundError:
                if await lost_with_store(rt, claim.losses):
                    self._lost_with_store(claim)
                    return
                log.exception("run %s of %s: putting it back failed", claim.run_id, claim.name)
                return
            except StoreUnavailable as exc:
                log.debug(
                    "run %s of %s: cannot put it back yet (%s); trying again in %.1fs",
                    claim.run_id,
                    claim.name,
                    exc,
                    delay,
                )
            except Exception:
                log.exception("run %s of %s: putting it back failed", claim.run_id, claim.name)
                return
            await rt.clock.sleep(delay)

    async def drain(self, seconds: float) -> list[Claim]:
        """Give running attempts up to ``seconds`` to end (a stopping worker's attempts hand
        their run back at their next boundary), then cancel the rest and hand back each run
        they still hold. Returns the claims that had to be cancelled. A stop at once
        (``rt.hurry``) cuts the wait short."""
        rt = self._rt
        await wait_all(set(self._running), rt.clock, seconds, until=rt.hurry)
        left = dict(self._running)
        for task in left:
            task.cancel()
        if left:
            await asyncio.gather(*left, return_exceptions=True)
        # All at once: on a store that is away, each hand-back waits out the store's retries.
        await asyncio.gather(*(self._hand_back(claim) for claim in left.values()))
        return list(left.values())

    async def _hand_back(self, claim: Claim) -> None:
        log.info(
            "run %s of %s: still running at the end of the shutdown; handing it back",
            claim.run_id,
            claim.name,
        )
        try:
            await self._rt.give_back(claim.name, claim.run_id, claim.lease)
            metrics.requeued(claim.name, "handed_back")
        except StoreFileGone:
            # The worker stops for it, and has said so once: there is no store to hand back to.
            log.info("run %s: not handed back: the store's file is gone", claim.run_id)
        except Exception as exc:
            # Its lease lapses instead, and an orphan scan requeues it.
            log.warning("run %s: hand-back failed: %s", claim.run_id, exc)
