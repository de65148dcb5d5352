"""The run controls beyond cancel a store may provide (the ``pause``, ``terminate``,
``hand_back``, ``hand_on`` and ``continue`` groups of ``CAPABILITY_GROUPS``): pausing and
resuming, terminating, handing a claim back unrun, and handing a run on to a successor."""

from __future__ import annotations

from typing import Any

from lockgate._errors import CapabilityMissing
from lockgate.stores._gates import Gates
from lockgate.stores._records import (
    Continuation,
    SuccessorPlan,
    continued_successor,
    gated_successor,
)
from lockgate.stores._types import TerminateOutcome, WaitOutcome


class ControlStore:
    """Pause, terminate and hand-back: run controls beyond cancel."""

    def request_pause(self, name: str, run_id: str) -> str:
        """Latch a pause; the run parks at its next boundary. Returns the latch's ISO time."""
        raise CapabilityMissing.of(self, "pause")

    def resume_paused_run(
        self,
        name: str,
        run_id: str,
        *,
        wait_id: str | None = None,
    ) -> WaitOutcome:
        """Lift a pause (``wait_id``, or whichever is open) and queue the run."""
        raise CapabilityMissing.of(self, "pause")

    def terminate_run(
        self,
        name: str,
        run_id: str,
        *,
        reason: str | None = None,
        requested_by: str | None = None,
        cause: dict[str, Any] | None = None,
    ) -> TerminateOutcome:
        """End the run now, without its worker, in one atomic step: journal ``run:error`` with
        code ``terminated``, latch the cancel, delete the lock (so a holder still running has
        every fenced write refused) and take the run off the queue and its waits."""
        raise CapabilityMissing.of(self, "terminate")

    def hand_back_run(self, name: str, run_id: str, worker_id: str | None = None) -> None:
        """Give a claim back unrun: drop the lock and queue the run, with no event and no
        retry counted."""
        raise CapabilityMissing.of(self, "hand_back")

    def hand_on_run(
        self,
        name: str,
        run_id: str,
        lease: str,
        successor_id: str,
        *,
        version: str,
        version_behavior: str,
        gates: Gates,
    ) -> str:
        """Hand a claimed run whose body has not started on to a successor stamped with
        ``gates`` and ``version``, in one step: create ``successor_id`` with the run's params,
        metadata and owner (``provenance.source.gated_from`` naming the run), move to it what
        the run holds undelivered (buffered signals and their send keys, pending updates, a
        latched cancel or pause), and end the run with ``run:continued`` naming the successor,
        fenced by ``lease``. Returns ``successor_id``; a repeat after the run was handed on to
        it returns it again. Raises :class:`LockLost` when ``lease`` no longer holds the run,
        :class:`EventAfterTerminal` when it ended another way and
        :class:`DuplicateRunError` when ``successor_id`` is another run's; nothing is written
        then."""
        plan = gated_successor(
            name,
            run_id,
            successor_id,
            version=version,
            version_behavior=version_behavior,
            gates=gates,
        )
        return self.hand_on(name, run_id, lease, successor_id, plan)

    def continue_run(
        self, name: str, run_id: str, lease: str, successor_id: str, continuation: Continuation
    ) -> str:
        """End a claimed run ``run:continued`` and start its successor, in one step, as
        :meth:`hand_on_run` does (the successor takes over what the run holds undelivered),
        but with the successor's own params, stamp and provenance from ``continuation``
        (``ctx.continue_as_new``). Returns ``successor_id``, also on a repeat; raises as
        :meth:`hand_on_run` does, writing nothing."""
        if type(self).hand_on is ControlStore.hand_on:
            raise CapabilityMissing.of(self, "continue")
        plan = continued_successor(name, continuation)
        return self.hand_on(name, run_id, lease, successor_id, plan)

    def hand_on(
        self, name: str, run_id: str, lease: str, successor_id: str, plan: SuccessorPlan
    ) -> str:
        """The one step of both :meth:`hand_on_run` and :meth:`continue_run`, which a backend
        provides (and with it both groups): as those say, with the successor's submit and the
        ``run:continued`` payload built by ``plan`` (``stores/_records.py``) from the run's
        params, metadata, owner and ``run:init`` payload."""
        raise CapabilityMissing.of(self, "hand_on")
