"""Gates under random load: a hypothesis state machine submits runs across keys, claims,
completes, parks and wakes them and moves a manual clock, on every backend.

Invariants, checked after every step: at most ``max`` runs of a Limit key hold the lock at
once (the store's own view, through ``lock_holder``); the starts of a Rate key in any window
of length t never exceed ``burst + per_second * t``; every run is findable and in exactly one
state. At the end the machine drains: with time moving, every run is claimed once its gates
allow and completes exactly once, none lost or duplicated.
"""

from __future__ import annotations

import itertools
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Literal

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from lockgate import EventKind, ManualClock, RunEvent, RunStatus
from lockgate.stores import WaitOutcome, WaitSpec

from .conftest import StoreFactory

NAME = "gated"


@dataclass(frozen=True)
class KeyPolicy:
    limit: int | None
    per_second: float | None
    burst: int | None


KEYS = {
    "limit1": KeyPolicy(1, None, None),
    "limit3": KeyPolicy(3, None, None),
    "rate": KeyPolicy(None, 2.0, 2),
    "both": KeyPolicy(2, 0.5, 3),
    "free": KeyPolicy(None, None, None),
}


@dataclass
class Run:
    key: str
    state: Literal["queued", "running", "parked", "done"] = "queued"
    lease: str | None = None
    completions: int = 0
    starts: list[float] = field(default_factory=list)


class GatesMachine(RuleBasedStateMachine):
    factory: ClassVar[StoreFactory]

    def __init__(self) -> None:
        super().__init__()
        self.tmp = tempfile.TemporaryDirectory()
        self.clock = ManualClock()
        self.store = self.factory.make(self.clock, Path(self.tmp.name))
        self.runs: dict[str, Run] = {}
        self.ids = itertools.count()

    def teardown(self) -> None:
        try:
            self.drain()
        finally:
            self.store.close()
            self.tmp.cleanup()

    # -- actions -------------------------------------------------------------------------------

    @rule(key=st.sampled_from(sorted(KEYS)), owner=st.sampled_from([None, "a", "b"]))
    def submit(self, key: str, owner: str | None) -> None:
        policy = KEYS[key]
        run_id = f"r{next(self.ids)}"
        gates: dict[str, object] = {}
        if policy.limit is not None:
            gates.update(concurrency_key=key, concurrency_max=policy.limit)
        if policy.per_second is not None:
            gates.update(rate_key=key, rate_per_second=policy.per_second, rate_burst=policy.burst)
        self.store.submit_run(NAME, run_id, {}, owner=owner, **gates)  # type: ignore[arg-type]
        self.runs[run_id] = Run(key)

    @rule()
    def claim(self) -> None:
        lease = f"lease-{next(self.ids)}"
        run_id = self.store.claim_next_run(NAME, lease)
        if run_id is None:
            return
        run = self.runs[run_id]
        assert run.state == "queued", f"{run_id} claimed while {run.state}"
        run.state, run.lease = "running", lease
        run.starts.append(self.clock())

    def running(self) -> list[str]:
        return [r for r, run in self.runs.items() if run.state == "running"]

    @precondition(lambda self: self.running())
    @rule(data=st.data())
    def complete(self, data: st.DataObject) -> None:
        run_id = data.draw(st.sampled_from(sorted(self.running())))
        run = self.runs[run_id]
        done = RunEvent(EventKind.RUN_COMPLETE, {"result": None}, run_id)
        self.store.append_events(NAME, run_id, [done], fence=run.lease)
        run.state, run.completions = "done", run.completions + 1

    @precondition(lambda self: self.running())
    @rule(data=st.data(), seconds=st.sampled_from([0.5, 2.0, 10.0]))
    def park(self, data: st.DataObject, seconds: float) -> None:
        run_id = data.draw(st.sampled_from(sorted(self.running())))
        run = self.runs[run_id]
        wait = WaitSpec(
            "sleep", f"sleep:{len(run.starts)}", len(run.starts), due_at=self.clock() + seconds
        )
        outcome = self.store.park_run(NAME, run_id, lease=run.lease or "", events=[], wait=wait)
        assert outcome == WaitOutcome.PARKED
        run.state, run.lease = "parked", None

    @rule(seconds=st.sampled_from([0.1, 0.5, 1.0, 3.0]))
    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)
        for name, run_id in self.store.get_sleeping_runs(self.clock()):
            if self.store.wake_due(name, run_id, due_by=self.clock()) == WaitOutcome.RESOLVED:
                self.runs[run_id].state = "queued"

    # -- invariants ----------------------------------------------------------------------------

    @invariant()
    def limits_hold(self) -> None:
        for key, policy in KEYS.items():
            if policy.limit is None:
                continue
            holding = [
                r
                for r, run in self.runs.items()
                if run.key == key and self.store.lock_holder(NAME, r) is not None
            ]
            assert len(holding) <= policy.limit, f"{key}: {len(holding)} > {policy.limit}"

    @invariant()
    def rates_hold(self) -> None:
        for key, policy in KEYS.items():
            if policy.per_second is None or policy.burst is None:
                continue
            starts = sorted(t for run in self.runs.values() if run.key == key for t in run.starts)
            for i, first in enumerate(starts):
                for j in range(i, len(starts)):
                    window = starts[j] - first
                    allowed = policy.burst + policy.per_second * window + 1e-9
                    assert j - i + 1 <= allowed, f"{key}: {j - i + 1} starts in {window}s"

    @invariant()
    def every_run_is_accounted_for(self) -> None:
        for run_id, run in self.runs.items():
            info = self.store.get_run(NAME, run_id)
            assert info is not None, f"{run_id} was lost"
            expected = {
                "queued": {RunStatus.PENDING},
                "running": {RunStatus.IN_PROGRESS},
                "parked": {RunStatus.SLEEPING},
                "done": {RunStatus.COMPLETE},
            }[run.state]
            assert info.status in expected, f"{run_id}: {info.status} but model {run.state}"

    # -- the end -------------------------------------------------------------------------------

    def drain(self) -> None:
        """Move time and work until every run completed: nothing is stranded behind a gate."""
        for _ in range(2000):
            if all(run.state == "done" for run in self.runs.values()):
                break
            for run_id in self.running():
                done = RunEvent(EventKind.RUN_COMPLETE, {"result": None}, run_id)
                self.store.append_events(NAME, run_id, [done], fence=self.runs[run_id].lease)
                self.runs[run_id].state = "done"
                self.runs[run_id].completions += 1
            self.claim()
            self.advance(1.0)
        assert all(run.state == "done" for run in self.runs.values()), "a run was stranded"
        assert all(run.completions == 1 for run in self.runs.values())
        self.rates_hold()


def test_gates_hold_under_random_load(store_factory: StoreFactory) -> None:
    machine = type(f"GatesMachine_{store_factory.id}", (GatesMachine,), {"factory": store_factory})
    run_state_machine_as_test(
        machine, settings=settings(max_examples=40, stateful_step_count=40, deadline=None)
    )
