"""Durability, the hard way: random workflows interrupted at random points must end exactly as
an uninterrupted run does, and no step whose outcome was journaled ever runs again.

A run is "interrupted" by raising, at a chosen store write or step effect, either a
``BaseException`` that nothing in the engine catches (the process dying) or
``asyncio.CancelledError`` (its task cancelled). Either way nothing more is written; the test
lets the lease expire on a manual clock, recovers the run and drives it on.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lockgate import (
    EventKind,
    InlineWorkflowRunner,
    ManualClock,
    MemoryStore,
    RunStatus,
    WaitTimeout,
    WorkflowContext,
    step,
    workflow,
)


class SimulatedCrash(BaseException):
    """The process died here."""


@dataclass
class Harness:
    """What the steps of the current example report to: execution counts and violations."""

    store: MemoryStore | None = None
    run_id: str = ""
    executions: dict[int, int] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)


HARNESS = Harness()
NAME = "durability_random_ops"


class CrashingStore(MemoryStore):
    """A MemoryStore that dies at chosen boundaries: before or after each write an attempt
    makes, and after each step effect. Boundary n is the n-th such point of the whole test."""

    def __init__(self, plan: frozenset[int], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.plan = plan
        self.boundary = 0
        self.crashes = 0

    def tick(self) -> None:
        self.boundary += 1
        if self.boundary in self.plan:
            self.crashes += 1
            if self.boundary % 2:
                raise SimulatedCrash(f"crash at boundary {self.boundary}")
            raise asyncio.CancelledError(f"task cancelled at boundary {self.boundary}")

    def _around(self, method: Any, *args: Any, **kwargs: Any) -> Any:
        self.tick()
        result = method(*args, **kwargs)
        self.tick()
        return result

    def append_events(self, *args: Any, **kwargs: Any) -> None:
        self._around(super().append_events, *args, **kwargs)

    def park_run(self, *args: Any, **kwargs: Any) -> Any:
        return self._around(super().park_run, *args, **kwargs)

    def wake_run(self, *args: Any, **kwargs: Any) -> Any:
        return self._around(super().wake_run, *args, **kwargs)

    def time_out_wait(self, *args: Any, **kwargs: Any) -> Any:
        return self._around(super().time_out_wait, *args, **kwargs)

    def pop_signal_match(self, *args: Any, **kwargs: Any) -> Any:
        return self._around(super().pop_signal_match, *args, **kwargs)


def _effect(index: int, previous: str) -> str:
    store = HARNESS.store
    assert store is not None
    journal = store.load_run(NAME, HARNESS.run_id)
    if any(e.kind == EventKind.STEP_DONE and e.payload.get("call_index") == index for e in journal):
        HARNESS.violations.append(f"call {index} ran again after its step:done was journaled")
    HARNESS.executions[index] = HARNESS.executions.get(index, 0) + 1
    if isinstance(store, CrashingStore):
        store.tick()
    return f"{index}<{len(previous)}>"


@step(name="durability_write")
async def write_step(index: int, previous: str) -> str:
    return _effect(index, previous)


@step(name="durability_read", effect="read")
def read_step(index: int, previous: str) -> str:
    return _effect(index, previous)


@workflow(name=NAME, timeout=30)
async def random_ops(ctx: WorkflowContext, ops: list[list[Any]]) -> list[Any]:
    outputs: list[Any] = []
    previous = ""
    for op in ops:
        kind = op[0]
        if kind in ("write", "read"):
            fn = write_step if kind == "write" else read_step
            previous = await fn(ctx._attempt.call_index, previous)
            outputs.append(previous)
        elif kind == "sleep":
            await ctx.sleep(op[1])
            outputs.append("slept")
        elif kind == "signal":
            try:
                payload = await ctx.wait_for_signal(op[1], timeout=op[3])
                outputs.append(payload)
            except WaitTimeout:
                outputs.append("timed out")
        elif kind == "now":
            outputs.append(["now", ctx.now().isoformat()])
        else:
            outputs.append(["uuid", ctx.uuid4().hex])
    return outputs


def _op(draw_kind: str, k: int, data: Any) -> list[Any]:
    if draw_kind == "sleep":
        return ["sleep", data]
    if draw_kind == "signal":
        mode = data
        return ["signal", f"sig{k}", mode, 50.0 if mode == "timeout" else None]
    return [draw_kind]


op_strategy = st.one_of(
    st.tuples(st.sampled_from(["write", "read", "now", "uuid"]), st.none()),
    st.tuples(st.just("sleep"), st.floats(min_value=1, max_value=100)),
    st.tuples(st.just("signal"), st.sampled_from(["early", "on_wait", "timeout"])),
)


async def _execute(ops: list[list[Any]], plan: frozenset[int]) -> tuple[Any, Harness, int]:
    clock = ManualClock()
    store = CrashingStore(plan, clock=clock, lock_ttl=30.0, max_retries=10_000)
    harness = Harness(store=store)
    HARNESS.__dict__.update(harness.__dict__)
    runner = InlineWorkflowRunner(store=store, clock=clock)
    handle = await runner.client.submit(NAME, {"ops": ops})
    HARNESS.run_id = handle.run_id
    for op in ops:
        if op[0] == "signal" and op[2] == "early":
            await handle.signal(op[1], {"signal": op[1]}, signal_id=f"id-{op[1]}")
    for _ in range(500):
        info = store.get_run(NAME, handle.run_id)
        assert info is not None
        if info.status.is_terminal:
            break
        try:
            if info.status == RunStatus.PENDING:
                await runner.run(NAME, handle.run_id)
            elif info.status == RunStatus.SIGNAL_WAITING and info.wait is not None:
                op = next(o for o in ops if o[0] == "signal" and o[1] == info.wait.signal)
                if op[2] == "timeout":
                    assert info.wait.due_at is not None
                    clock.advance(max(0.0, info.wait.due_at - clock()))
                    await runner.fire_due_timers()
                else:
                    await handle.signal(op[1], {"signal": op[1]}, signal_id=f"id-{op[1]}")
            elif info.status == RunStatus.SLEEPING and info.wait is not None:
                assert info.wait.due_at is not None
                clock.advance(max(0.0, info.wait.due_at - clock()))
                await runner.fire_due_timers()
            elif info.status == RunStatus.IN_PROGRESS:
                clock.advance(store.lock_ttl + 1)
                store.recover_pending_runs(NAME)
            else:
                raise AssertionError(f"unexpected status {info.status}")
        except (SimulatedCrash, asyncio.CancelledError):
            clock.advance(store.lock_ttl + 1)
            store.recover_pending_runs(NAME)
    else:
        raise AssertionError("the run never ended")
    result = await handle.result()
    journal = store.load_run(NAME, handle.run_id)
    return (
        result,
        Harness(store, handle.run_id, dict(HARNESS.executions), list(HARNESS.violations)),
        store.crashes if journal else 0,
    )


def _masked(result: list[Any]) -> list[Any]:
    return [o[0] if isinstance(o, list) else o for o in result]


@settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    raw_ops=st.lists(op_strategy, min_size=1, max_size=8),
    plan=st.frozensets(st.integers(min_value=1, max_value=40), max_size=8),
)
def test_interrupted_runs_end_as_uninterrupted_ones(
    raw_ops: list[tuple[str, Any]], plan: frozenset[int]
) -> None:
    ops = [_op(kind, k, data) for k, (kind, data) in enumerate(raw_ops)]
    expected, reference, _ = asyncio.run(_execute(ops, frozenset()))
    result, harness, crashes = asyncio.run(_execute(ops, plan))

    assert _masked(result) == _masked(expected)
    assert harness.violations == []
    assert all(count == 1 for count in reference.executions.values())
    assert set(harness.executions) == set(reference.executions)
    extra = sum(count - 1 for count in harness.executions.values())
    assert extra <= crashes
    journal = harness.store.load_run(NAME, harness.run_id) if harness.store else []
    deterministic = [
        e.payload["result"]
        for e in journal
        if e.kind == EventKind.STEP_DONE and e.payload.get("kind") == "deterministic"
    ]
    seen = [o[1] for o in result if isinstance(o, list)]
    assert seen == deterministic
    assert journal[-1].kind == EventKind.RUN_COMPLETE
    assert sum(e.is_terminal for e in journal) == 1
