"""A hypothesis state machine drives each backend against a small reference model.

The machine submits, claims, appends (fenced by current and stale leases, and unfenced),
heartbeats, moves the clock, releases, requeues, recovers and terminates. Each claim journals a
fenced marker, as an attempt does first, so every claim shows its epoch. The model checks each
step's answer, and after every step the invariants: nothing follows a terminal event, a stale
lease's append raises LockLost and changes nothing, run_seq is gapless, one claim stamps one
epoch and a new claim a higher one, and every submitted run is findable and exactly one of
queued, held or ended (never dropped).
"""

from __future__ import annotations

import itertools
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Literal

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from lockgate import (
    EventAfterTerminal,
    EventKind,
    LockLost,
    ManualClock,
    RunEvent,
    RunFinishedError,
    RunOwnedError,
    RunStatus,
    TerminateOutcome,
)
from lockgate.journal._events import EPOCH_HEADER, TERMINAL_KINDS

from .conftest import HEARTBEAT_INTERVAL, LOCK_TTL, MAX_RETRIES, MAX_STORE_REQUEUES, StoreFactory

NAME = "machine"
NEVER_ISSUED = "lease-never-issued"

State = Literal["queued", "held", "ended"]


@dataclass
class ModelRun:
    """What the store must say about one run."""

    state: State = "queued"
    #: The lease recorded as holding the run (live or expired), None once dropped.
    holder: str | None = None
    expires_at: float = 0.0
    kinds: list[str] = field(default_factory=lambda: [EventKind.RUN_INIT])
    #: Every lease ever issued for this run, stale ones included.
    leases: list[str] = field(default_factory=list)
    #: The epoch the current claim stamps, once one of its fenced appends showed it.
    claim_epoch: int | None = None
    #: The highest epoch any fenced append of this run showed.
    last_epoch: int | None = None
    requeues: dict[str, int] = field(
        default_factory=lambda: {"owner_gone": 0, "store_unavailable": 0}
    )


#: Runs not yet ended at once; a new one is submitted only below this, so that the steps of one
#: example pile up on a few runs (several claims, epochs and requeues each).
MAX_ACTIVE_RUNS = 2
BUDGETS = {"owner_gone": MAX_RETRIES, "store_unavailable": MAX_STORE_REQUEUES}
#: Mostly none: a run that ends early leaves the rest of an example little to do.
ENDINGS = [None, None, None, EventKind.RUN_COMPLETE, EventKind.RUN_ERROR]


class StoreMachine(RuleBasedStateMachine):
    factory: ClassVar[StoreFactory]

    def __init__(self) -> None:
        super().__init__()
        self.tmp = tempfile.TemporaryDirectory()
        self.clock = ManualClock()
        self.store = self.factory.make(self.clock, Path(self.tmp.name))
        self.runs: dict[str, ModelRun] = {}
        self.lease_ids = itertools.count()

    def teardown(self) -> None:
        self.store.close()
        self.tmp.cleanup()

    # -- model helpers -------------------------------------------------------------------------

    def new_lease(self) -> str:
        return f"lease-{next(self.lease_ids)}"

    def live(self, run: ModelRun) -> bool:
        return run.holder is not None and run.expires_at > self.clock()

    def stale_leases(self, run: ModelRun) -> list[str]:
        """Leases that do not hold the run's live lock: earlier claims', an expired holder's,
        and one never issued."""
        live_holder = run.holder if self.live(run) else None
        return [lease for lease in [*run.leases, NEVER_ISSUED] if lease != live_holder]

    def strangers(self, run: ModelRun) -> list[str]:
        """Leases that are not the one recorded as holding the run, live or not."""
        return [lease for lease in [*run.leases, NEVER_ISSUED] if lease != run.holder]

    def active(self) -> list[str]:
        return sorted(rid for rid, run in self.runs.items() if run.state != "ended")

    def held_live(self) -> list[str]:
        """Runs whose holder's lease is live (including ended runs still holding it)."""
        return sorted(rid for rid, run in self.runs.items() if self.live(run))

    def running(self) -> list[str]:
        """Runs held by a live lease and not ended: where a holder's append must commit."""
        return [rid for rid in self.held_live() if self.runs[rid].state == "held"]

    def pick(self, data: st.DataObject, run_ids: list[str]) -> tuple[str, ModelRun]:
        run_id = data.draw(st.sampled_from(run_ids), label="run")
        return run_id, self.runs[run_id]

    def take(self, run_id: str, lease: str, *, same_claim: bool) -> None:
        """Model a claim, then journal a claim marker fenced by it (as an attempt does first),
        which shows the claim's epoch."""
        run = self.runs[run_id]
        run.state, run.holder = "held", lease
        run.expires_at = self.clock() + LOCK_TTL
        if lease not in run.leases:
            run.leases.append(lease)
        if not same_claim:
            run.claim_epoch = None
        self.append_fenced(run_id, ["test:claimed"])

    def append_fenced(self, run_id: str, batch_kinds: list[str]) -> None:
        """Append ``batch_kinds`` fenced by the live holder, and check the epoch they carry."""
        run = self.runs[run_id]
        batch = [
            RunEvent(kind=k, payload={"i": i}, run_id=run_id) for i, k in enumerate(batch_kinds)
        ]
        before = len(self.store.load_run(NAME, run_id))
        self.store.append_events(NAME, run_id, batch, fence=run.holder)
        appended = self.store.load_run(NAME, run_id)[before:]
        assert [e.kind for e in appended] == batch_kinds
        epochs = {int(e.headers[EPOCH_HEADER]) for e in appended}
        assert len(epochs) == 1, "one batch, one claim, one epoch"
        (epoch,) = epochs
        if run.claim_epoch is None:
            assert run.last_epoch is None or epoch > run.last_epoch, "a new claim raises it"
            run.claim_epoch = epoch
        assert epoch == run.claim_epoch, "one claim stamps one epoch"
        run.last_epoch = epoch
        run.kinds.extend(batch_kinds)
        if EventKind.STEP_DONE in batch_kinds:
            run.requeues = {reason: 0 for reason in run.requeues}
        if batch_kinds[-1] in TERMINAL_KINDS:
            run.state = "ended"

    def requeued(self, run: ModelRun, reason: str) -> None:
        """The model of a requeue of a run that has not ended."""
        run.holder = None
        run.requeues[reason] += 1
        if run.requeues[reason] > BUDGETS[reason]:
            run.state = "ended"
            run.kinds.append(EventKind.RUN_ERROR)
        else:
            run.state = "queued"
            run.kinds.append(EventKind.RUN_REQUEUED)

    def refused(self, error: type[Exception], run_id: str, call: Callable[[], object]) -> None:
        """``call`` raises ``error`` and leaves the run's journal as it was."""
        before = self.store.load_run(NAME, run_id)
        with pytest.raises(error):
            call()
        assert self.store.load_run(NAME, run_id) == before

    # -- submitting and claiming ---------------------------------------------------------------

    @initialize()
    def first_submit(self) -> None:
        self.submit()

    @precondition(lambda self: len(self.active()) < MAX_ACTIVE_RUNS)
    @rule()
    def submit(self) -> None:
        run_id = f"r{len(self.runs)}"
        assert self.store.submit_run(NAME, run_id, {"n": len(self.runs)}) == run_id
        self.runs[run_id] = ModelRun()

    @rule()
    def claim_next(self) -> None:
        lease = self.new_lease()
        queued = {rid for rid, run in self.runs.items() if run.state == "queued"}
        run_id = self.store.claim_next_run(NAME, lease)
        if not queued:
            assert run_id is None
            return
        assert run_id in queued
        self.take(run_id, lease, same_claim=False)

    def claim(self, run_id: str, lease: str) -> None:
        """``claim_run`` of a run no live lease holds, which must succeed (unless counting a
        lapsed attempt ends the run)."""
        run = self.runs[run_id]
        lapsed = run.state == "held"
        before = len(self.store.load_run(NAME, run_id))
        try:
            self.store.claim_run(NAME, run_id, lease)
        except RunFinishedError:
            # A store may count the lapsed attempt as owner_gone; past the budget, the run ends.
            assert lapsed, "only a lapsed attempt may end the run on a claim"
            assert run.requeues["owner_gone"] == BUDGETS["owner_gone"]
            self.requeued(run, "owner_gone")
            return
        added = [e.kind for e in self.store.load_run(NAME, run_id)[before:]]
        if lapsed and added == [EventKind.RUN_REQUEUED]:
            self.requeued(run, "owner_gone")
        else:
            assert added == [], "a claim journals nothing but a lapsed attempt's requeue"
        self.take(run_id, lease, same_claim=False)

    @rule(data=st.data())
    def claim_by_name(self, data: st.DataObject) -> None:
        run_id, run = self.pick(data, sorted(self.runs))
        lease = self.new_lease()
        if run.state == "ended":
            with pytest.raises(RunFinishedError):
                self.store.claim_run(NAME, run_id, lease)
        elif self.live(run):
            with pytest.raises(RunOwnedError):
                self.store.claim_run(NAME, run_id, lease)
        else:
            self.claim(run_id, lease)

    @precondition(lambda self: any(r.state == "held" for r in self.runs.values()))
    @rule(data=st.data())
    def reclaim_by_holder(self, data: st.DataObject) -> None:
        """The holder claims again: the same claim while its lease lives, a new one after."""
        run_id, run = self.pick(data, sorted(r for r, m in self.runs.items() if m.state == "held"))
        assert run.holder is not None
        if self.live(run):
            self.store.claim_run(NAME, run_id, run.holder)
            self.take(run_id, run.holder, same_claim=True)
        else:
            self.claim(run_id, run.holder)

    # -- appends -------------------------------------------------------------------------------

    @precondition(lambda self: self.running())
    @rule(
        data=st.data(),
        body=st.lists(st.sampled_from([EventKind.STEP_DONE, "test:note"]), max_size=3),
        ending=st.sampled_from(ENDINGS),
        misplaced_terminal=st.booleans(),
    )
    def append_by_holder(
        self,
        data: st.DataObject,
        body: list[str],
        ending: str | None,
        misplaced_terminal: bool,
    ) -> None:
        run_id, run = self.pick(data, self.running())
        batch_kinds = [*body, ending] if ending else list(body)
        if not misplaced_terminal:
            self.append_fenced(run_id, batch_kinds or ["test:note"])
            return
        batch_kinds = [EventKind.RUN_COMPLETE, "test:note", *batch_kinds]
        batch = [RunEvent(kind=k, payload={}, run_id=run_id) for k in batch_kinds]
        self.refused(
            EventAfterTerminal,
            run_id,
            lambda: self.store.append_events(NAME, run_id, batch, fence=run.holder),
        )

    @precondition(lambda self: self.active())
    @rule(data=st.data())
    def append_by_stale_lease(self, data: st.DataObject) -> None:
        run_id, run = self.pick(data, self.active())
        lease = data.draw(st.sampled_from(self.stale_leases(run)), label="lease")
        note = RunEvent(kind=EventKind.STEP_DONE, payload={}, run_id=run_id)
        self.refused(
            LockLost, run_id, lambda: self.store.append_events(NAME, run_id, [note], fence=lease)
        )

    @precondition(lambda self: len(self.active()) < len(self.runs))
    @rule(data=st.data(), fenced=st.booleans())
    def append_after_terminal(self, data: st.DataObject, fenced: bool) -> None:
        ended = sorted(rid for rid, run in self.runs.items() if run.state == "ended")
        run_id, run = self.pick(data, ended)
        note = RunEvent(kind="test:note", payload={}, run_id=run_id)
        if not fenced:
            self.refused(
                EventAfterTerminal, run_id, lambda: self.store.append_event(NAME, run_id, note)
            )
            return
        lease = data.draw(st.sampled_from([*run.leases, NEVER_ISSUED]), label="lease")
        # The live holder is told why; any other lease may be refused for either reason.
        error = EventAfterTerminal if lease == run.holder and self.live(run) else LockLost
        self.refused(
            error, run_id, lambda: self.store.append_event(NAME, run_id, note, fence=lease)
        )

    @precondition(lambda self: self.active())
    @rule(data=st.data())
    def append_unfenced(self, data: st.DataObject) -> None:
        run_id, run = self.pick(data, self.active())
        self.store.append_event(NAME, run_id, RunEvent(kind="test:note", payload={}, run_id=run_id))
        last = self.store.get_last_event(NAME, run_id)
        assert last is not None
        assert EPOCH_HEADER not in last.headers
        run.kinds.append("test:note")

    # -- leases --------------------------------------------------------------------------------

    @precondition(lambda self: self.held_live())
    @rule(data=st.data())
    def heartbeat_by_holder(self, data: st.DataObject) -> None:
        run_id, run = self.pick(data, self.held_live())
        assert run.holder is not None
        if run.state == "ended":
            # Whether an ended run's holder still has a lock to extend is the backend's choice.
            try:
                self.store.heartbeat(NAME, run_id, run.holder)
            except LockLost:
                run.holder = None
            return
        assert self.store.heartbeat(NAME, run_id, run.holder) == (None, None)
        run.expires_at = self.clock() + LOCK_TTL

    @rule(data=st.data())
    def heartbeat_by_stale_lease(self, data: st.DataObject) -> None:
        run_id, run = self.pick(data, sorted(self.runs))
        lease = data.draw(st.sampled_from(self.stale_leases(run)), label="lease")
        with pytest.raises(LockLost):
            self.store.heartbeat(NAME, run_id, lease)

    @rule(seconds=st.sampled_from([HEARTBEAT_INTERVAL, 1.0, LOCK_TTL - 1]))
    def advance_clock(self, seconds: float) -> None:
        self.clock.advance(seconds)

    @rule()
    def let_leases_expire(self) -> None:
        self.clock.advance(LOCK_TTL + 1)

    # An expired holder's release or requeue is left to the backend (its lock may be gone):
    # the rules below use the live holder's lease or one that never held the lock.

    @precondition(lambda self: self.held_live())
    @rule(data=st.data())
    def release_by_holder(self, data: st.DataObject) -> None:
        run_id, run = self.pick(data, self.held_live())
        before = self.store.load_run(NAME, run_id)
        self.store.release_run(NAME, run_id, run.holder)
        assert self.store.load_run(NAME, run_id) == before
        run.holder = None
        if run.state == "held":
            run.state = "queued"

    @precondition(lambda self: self.held_live())
    @rule(data=st.data(), reason=st.sampled_from(sorted(BUDGETS)))
    def requeue_by_holder(self, data: st.DataObject, reason: str) -> None:
        run_id, run = self.pick(data, self.held_live())
        self.store.requeue_run(NAME, run_id, run.holder, reason=reason)
        if run.state == "ended":
            run.holder = None
            return
        self.requeued(run, reason)
        last = self.store.get_last_event(NAME, run_id)
        assert last is not None
        if last.kind == EventKind.RUN_REQUEUED:
            assert last.payload["reason"] == reason

    @rule(data=st.data(), reason=st.sampled_from(sorted(BUDGETS)), release=st.booleans())
    def release_or_requeue_by_stranger(
        self, data: st.DataObject, reason: str, release: bool
    ) -> None:
        """A lease that is not the run's holder changes nothing."""
        run_id, run = self.pick(data, sorted(self.runs))
        lease = data.draw(st.sampled_from(self.strangers(run)), label="lease")
        before = self.store.load_run(NAME, run_id)
        if release:
            self.store.release_run(NAME, run_id, lease)
        else:
            self.store.requeue_run(NAME, run_id, lease, reason=reason)
        assert self.store.load_run(NAME, run_id) == before

    @rule()
    def recover(self) -> None:
        now = self.clock()
        expired = {
            rid
            for rid, run in self.runs.items()
            if run.state == "held" and run.holder is not None and run.expires_at <= now
        }
        returned = self.store.recover_pending_runs(NAME)
        for rid in expired:
            self.requeued(self.runs[rid], "owner_gone")
        for run in self.runs.values():
            if run.state == "ended" and run.holder is not None and run.expires_at <= now:
                run.holder = None
        requeued = {rid for rid in expired if self.runs[rid].state == "queued"}
        assert requeued <= set(returned) <= expired
        assert len(returned) == len(set(returned))

    @rule(data=st.data())
    def terminate(self, data: st.DataObject) -> None:
        run_id, run = self.pick(data, sorted(self.runs))
        outcome = self.store.terminate_run(NAME, run_id, reason="machine")
        if run.state == "ended":
            assert outcome == TerminateOutcome.ALREADY_ENDED
            return
        assert outcome == TerminateOutcome.TERMINATED
        run.state, run.holder = "ended", None
        run.kinds.append(EventKind.RUN_ERROR)

    # -- invariants ----------------------------------------------------------------------------

    @invariant()
    def queue_holds_exactly_the_queued_runs(self) -> None:
        queued = sum(1 for run in self.runs.values() if run.state == "queued")
        assert self.store.get_pending_count(NAME) == queued

    @invariant()
    def every_run_is_findable_and_where_the_model_says(self) -> None:
        listed, _ = self.store.list_runs(NAME, limit=len(self.runs) + 10)
        assert {info.run_id for info in listed} == set(self.runs)
        for run_id, run in self.runs.items():
            info = self.store.get_run(NAME, run_id)
            assert info is not None, f"{run_id} was dropped"
            assert info.status.is_terminal == (run.state == "ended")
            if run.state == "queued":
                assert info.status == RunStatus.PENDING
                assert self.store.lock_holder(NAME, run_id) is None
            elif run.state == "held" and self.live(run):
                assert info.status == RunStatus.IN_PROGRESS
                assert self.store.lock_holder(NAME, run_id) == run.holder
            elif run.state == "held":
                # A lapsed lease: no holder, and not yet requeued (status is the backend's).
                assert self.store.lock_holder(NAME, run_id) is None

    @invariant()
    def journals_are_gapless_and_end_at_their_terminal(self) -> None:
        for run_id, run in self.runs.items():
            journal = self.store.load_run(NAME, run_id)
            assert [e.kind for e in journal] == run.kinds
            assert [e.run_seq for e in journal] == list(range(1, len(journal) + 1))
            assert not any(e.is_terminal for e in journal[:-1]), "an event after a terminal"
            assert journal[-1].is_terminal == (run.state == "ended")


def test_store_matches_the_reference_model(store_factory: StoreFactory) -> None:
    machine = type(f"StoreMachine_{store_factory.id}", (StoreMachine,), {"factory": store_factory})
    run_state_machine_as_test(
        machine,
        settings=settings(max_examples=75, stateful_step_count=40, deadline=None),
    )
