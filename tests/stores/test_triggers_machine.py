"""Trigger buffers under random load, on every backend: events across keys, clock moves, and
firers that race (each due key fired twice in a row). Every event ends up in exactly one fired
run, in the order it was buffered, and none is lost once everything due has fired."""

from __future__ import annotations

import itertools
import tempfile
from pathlib import Path
from typing import ClassVar

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from lockgate import ManualClock
from lockgate.stores import TriggerPolicy

from .conftest import StoreFactory

NAME = "triggered"
POLICIES = {
    "collect": TriggerPolicy("collect", window_seconds=5, max_events=3),
    "debounce": TriggerPolicy("debounce", window_seconds=2),
    "capped": TriggerPolicy("debounce", window_seconds=2, max_wait_seconds=6),
}


class TriggersMachine(RuleBasedStateMachine):
    factory: ClassVar[StoreFactory]

    def __init__(self) -> None:
        super().__init__()
        self.tmp = tempfile.TemporaryDirectory()
        self.clock = ManualClock()
        self.store = self.factory.make(self.clock, Path(self.tmp.name))
        self.ids = itertools.count()
        self.sent: dict[str, list[int]] = {}
        self.fired: list[str] = []

    def teardown(self) -> None:
        try:
            self.clock.advance(100)
            self.fire_due()
            self.every_event_is_in_one_run(final=True)
        finally:
            self.store.close()
            self.tmp.cleanup()

    def policy(self, key: str) -> TriggerPolicy:
        return POLICIES[key.split("-")[0]]

    @rule(kind=st.sampled_from(sorted(POLICIES)), n=st.integers(0, 1))
    def trigger(self, kind: str, n: int) -> None:
        key = f"{kind}-{n}"
        event = next(self.ids)
        self.sent.setdefault(key, []).append(event)
        run_id = self.store.trigger_event(NAME, key, {"id": event}, policy=self.policy(key))
        if run_id is not None:
            self.fired.append(run_id)

    @rule(seconds=st.sampled_from([0.5, 1.0, 2.0, 5.0]))
    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)

    @rule()
    def fire_due(self) -> None:
        for key in self.store.due_triggers(NAME, self.clock()):
            for _ in range(2):  # a second firer racing the first finds nothing to fire
                run_id = self.store.fire_trigger(
                    NAME, key, policy=self.policy(key), due_by=self.clock()
                )
                if run_id is not None:
                    self.fired.append(run_id)

    @invariant()
    def every_event_is_in_one_run(self, final: bool = False) -> None:
        batched: dict[str, list[int]] = {}
        assert len(self.fired) == len(set(self.fired)), "a run id was fired twice"
        for run_id in self.fired:
            info = self.store.get_run(NAME, run_id)
            assert info is not None
            params = info.params
            ids = [e["id"] for e in params["events"]]
            assert params["count"] == len(ids) > 0
            batched.setdefault(params["key"], []).extend(ids)
        for key, sent in self.sent.items():
            got = batched.get(key, [])
            assert got == sent[: len(got)], f"{key}: events out of order or duplicated"
            if final:
                assert got == sent, f"{key}: {len(sent) - len(got)} events never fired"


def test_every_trigger_event_lands_in_exactly_one_run(store_factory: StoreFactory) -> None:
    machine = type(
        f"TriggersMachine_{store_factory.id}", (TriggersMachine,), {"factory": store_factory}
    )
    run_state_machine_as_test(
        machine, settings=settings(max_examples=40, stateful_step_count=40, deadline=None)
    )
