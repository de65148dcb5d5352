"""A hypothesis state machine drives a ``continue_as_new`` chain against a model.

The chain takes ``add`` signals, one hop at a time, until a ``stop`` signal ends it. The
machine sends signals (some repeated with the same id), runs attempts of the chain's live
run, crashes attempts after any number of their store calls (the call that dies landing or
not), lets crashed leases lapse and recovers them, and cancels. After every step: no signal
was applied twice, none that was not sent; every hop ended once, ``run:continued`` naming the
next. At the end the chain runs to rest: cancelled if a cancel was asked for, else complete
with every signal applied exactly once, its result read from the root id.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from lockgate import (
    DurableInvocationCancelled,
    EventKind,
    InlineWorkflowRunner,
    ManualClock,
    MemoryStore,
    RunFinishedError,
    RunStatus,
    WaitTimeout,
    WorkflowContext,
    workflow,
)
from lockgate.client import resolve_continuation

NAME = "machine_chain"
ROOT = "chain"
LOCK_TTL = 30.0


async def _drain(ctx: WorkflowContext, signal: str) -> list[Any]:
    taken = []
    while True:
        try:
            taken.append(await ctx.wait_for_signal(signal, timeout=0))
        except WaitTimeout:
            return taken


@workflow(name=NAME)
async def machine_chain(
    ctx: WorkflowContext, hop: int = 0, applied: list[str] | None = None
) -> Any:
    """Takes at most one ``add`` per hop, so a signal left buffered by a hop would be taken
    again by a later one if the hand-over moved it."""
    seen = list(applied or [])
    with contextlib.suppress(WaitTimeout):
        seen.append(str((await ctx.wait_for_signal("add", timeout=0))["id"]))
    if await _drain(ctx, "stop"):
        # Every add sent before the stop is buffered by now: take them all.
        seen += [str(got["id"]) for got in await _drain(ctx, "add")]
        return {"hop": hop, "applied": seen}
    await ctx.continue_as_new({"hop": hop + 1, "applied": seen})


class Death(BaseException):
    """The process dying in the middle of an attempt."""


#: The store calls an attempt makes that a crash may cut.
CUT = frozenset(
    {
        "append_events",
        "append_and_poll",
        "finish_if_quiet",
        "park_run",
        "continue_run",
        "pop_signal_match",
        "peek_signal",
        "time_out_wait",
        "wake_run",
        "poll_run",
        "advance_chain_tail",
        "close_chain",
        "load_run",
    }
)


class DyingStore(MemoryStore):
    """A MemoryStore whose attempt dies at its ``die_at``-th cut call, before or after it."""

    die_at: int | None = None
    die_after: bool = False
    calls = 0

    def __getattribute__(self, name: str) -> Any:
        value = super().__getattribute__(name)
        if name not in CUT or super().__getattribute__("die_at") is None:
            return value
        store = self

        def cut(*args: Any, **kwargs: Any) -> Any:
            store.calls += 1
            if store.calls == store.die_at and not store.die_after:
                raise Death()
            result = value(*args, **kwargs)
            if store.calls == store.die_at:
                raise Death()
            return result

        return cut


class ChainMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.clock = ManualClock(1_000_000.0)
        self.store = DyingStore(clock=self.clock, lock_ttl=LOCK_TTL, max_retries=10_000)
        self.runner = InlineWorkflowRunner(store=self.store, clock=self.clock)
        self.client = self.runner.client
        self.store.submit_run(NAME, ROOT, {}, version="", version_behavior="auto_upgrade")
        self.sent: set[str] = set()
        self.cancelled = False
        self.stopped = False
        self.next_id = 0

    def run(self, coro: Any) -> Any:
        return asyncio.run(coro)

    def tail(self) -> str:
        return resolve_continuation(self.store, NAME, ROOT)[1]

    def ended(self) -> bool:
        info = self.store.get_run(NAME, self.tail())
        return info is not None and info.status.is_terminal

    def send(self, signal: str, signal_id: str) -> None:
        try:
            self.run(self.client.signal(NAME, ROOT, signal, {"id": signal_id}, signal_id=signal_id))
        except RunFinishedError:
            assert self.cancelled or self.ended(), "a live chain refused a signal"
            return
        if signal == "add":
            self.sent.add(signal_id)

    @rule()
    @precondition(lambda self: not self.stopped)
    def send_new(self) -> None:
        self.next_id += 1
        self.send("add", f"s{self.next_id}")

    @rule()
    @precondition(lambda self: self.next_id > 0 and not self.stopped)
    def send_again(self) -> None:
        self.send("add", f"s{self.next_id}")

    @rule()
    def attempt(self) -> None:
        tail = self.tail()
        info = self.store.get_run(NAME, tail)
        if info is not None and info.status == RunStatus.PENDING:
            self.run(self.runner.run(NAME, tail))

    @rule(at=st.integers(min_value=1, max_value=12), after=st.booleans())
    def crash(self, at: int, after: bool) -> None:
        tail = self.tail()
        info = self.store.get_run(NAME, tail)
        if info is None or info.status != RunStatus.PENDING:
            return
        self.store.die_at, self.store.die_after, self.store.calls = at, after, 0
        try:
            self.run(self.runner.run(NAME, tail))
        except Death:
            pass
        finally:
            self.store.die_at = None

    @rule()
    def lapse_and_recover(self) -> None:
        self.clock.advance(LOCK_TTL + 1)
        self.store.recover_pending_runs(NAME)

    @rule()
    @precondition(lambda self: not self.cancelled)
    def cancel(self) -> None:
        if not self.ended():
            self.run(self.client.cancel(NAME, ROOT))
            self.cancelled = True

    @invariant()
    def nothing_applied_twice_or_unsent(self) -> None:
        tail = self.tail()
        journal = self.store.load_run(NAME, tail)
        params = journal[0].payload["params"] if journal else {}
        applied = Counter(params.get("applied") or [])
        assert not [k for k, n in applied.items() if n > 1], f"applied twice: {applied}"
        assert set(applied) <= self.sent, f"applied but never sent: {set(applied) - self.sent}"

    @invariant()
    def each_hop_ended_once_naming_the_next(self) -> None:
        run_id = ROOT
        for _ in range(10_000):
            events = self.store.load_run(NAME, run_id)
            ends = [e for e in events if e.is_terminal]
            assert len(ends) <= 1
            if not ends:
                return
            assert events[-1] is ends[-1]
            if ends[0].kind != EventKind.RUN_CONTINUED:
                return
            run_id = ends[0].payload["run_id"]

    def teardown(self) -> None:
        if not self.cancelled and not self.ended():
            self.stopped = True
            self.send("stop", "stop")
        for _ in range(10_000):
            if self.ended():
                break
            self.lapse_and_recover()
            self.attempt()
        final = self.store.get_run(NAME, self.tail())
        assert final is not None
        if self.cancelled and final.status != RunStatus.COMPLETE:
            assert final.status == RunStatus.CANCELLED
            try:
                self.run(self.client.result(NAME, ROOT))
            except DurableInvocationCancelled:
                return
            raise AssertionError("a cancelled chain returned a result")
        assert final.status == RunStatus.COMPLETE
        result = self.run(self.client.result(NAME, ROOT))
        assert Counter(result["applied"]) == Counter(self.sent), "a signal was lost or doubled"


ChainMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
test_a_chain_keeps_every_signal_once_whatever_the_order = ChainMachine.TestCase
