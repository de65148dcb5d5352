"""A hypothesis state machine over child cascades, against a small model.

Each family is a top run with one child (``cancel`` or ``abandon`` to its parent) that is
either a leaf, waiting for a signal, or a middle run with a leaf of its own (a grandchild).
The machine starts families, lets leaves end (their parents then complete), terminates tops
(through the client, so the cascade runs; or through the store alone, a client that died
before its cascade, which a later ``terminate`` finishes), and moves the clock past the
backstop timers so every parked parent replays and parks again. The model says after each
step what every run's status is, and what each ``terminate`` closed: every child of a
terminated parent with the ``cancel`` policy ends, ``abandon`` children run on, and the counts
and the ended runs match ``TerminateResult``.
"""

from __future__ import annotations

import asyncio
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    invariant,
    rule,
    run_state_machine_as_test,
)

from lockgate import (
    CloseResult,
    InlineWorkflowRunner,
    ManualClock,
    MemoryStore,
    RunStatus,
    SQLiteStore,
    Store,
    TerminateOutcome,
    WorkflowContext,
    workflow,
)
from lockgate.attempt._children import BACKSTOP_MOST

NAMES = ("cm_top", "cm_mid", "cm_leaf")


@workflow(name="cm_leaf")
async def leaf(ctx: WorkflowContext) -> Any:
    return await ctx.wait_for_signal("go")


@workflow(name="cm_mid")
async def mid(ctx: WorkflowContext, policy: str) -> Any:
    return await ctx.run_child(leaf, parent_close=policy)


@workflow(name="cm_top")
async def top(ctx: WorkflowContext, shape: str, policy: str, inner: str) -> Any:
    if shape == "leaf":
        return await ctx.run_child(leaf, parent_close=policy)
    return await ctx.run_child(mid, {"policy": inner}, parent_close=policy)


@dataclass
class Node:
    name: str
    run_id: str
    policy: str  # towards its parent
    status: RunStatus = RunStatus.SIGNAL_WAITING
    parent: Node | None = None
    children: list[Node] = field(default_factory=list)


class CascadeMachine(RuleBasedStateMachine):
    families = Bundle("families")

    def __init__(self, backend: str) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.clock = ManualClock()
        self.tmp = tempfile.TemporaryDirectory()
        self.store: Store = (
            MemoryStore(clock=self.clock, lock_ttl=30.0, heartbeat_interval=10.0)
            if backend == "memory"
            else SQLiteStore(
                Path(self.tmp.name) / "m.db",
                clock=self.clock,
                lock_ttl=30.0,
                heartbeat_interval=10.0,
                synchronous="normal",
            )
        )
        self.runner = InlineWorkflowRunner(store=self.store, clock=self.clock)
        self.nodes: list[Node] = []

    def teardown(self) -> None:
        self.store.close()
        self.loop.close()
        self.tmp.cleanup()

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    async def settle(self) -> None:
        for _ in range(200):
            moved = False
            for name in NAMES:
                if await self.runner.run_next(name) is not None:
                    moved = True
            if not moved:
                return
        raise AssertionError("runs kept coming")

    # -- rules ---------------------------------------------------------------------------------

    @rule(
        target=families,
        shape=st.sampled_from(["leaf", "mid"]),
        policy=st.sampled_from(["cancel", "abandon"]),
        inner=st.sampled_from(["cancel", "abandon"]),
    )
    def start(self, shape: str, policy: str, inner: str) -> Node:
        params = {"shape": shape, "policy": policy, "inner": inner}
        handle = self.run(self.runner.client.submit("cm_top", params))
        self.run(self.settle())
        root = Node("cm_top", handle.run_id, "")
        child = Node(f"cm_{shape}", f"{handle.run_id}.child0", policy, parent=root)
        root.children.append(child)
        self.nodes += [root, child]
        if shape == "mid":
            grandchild = Node("cm_leaf", f"{child.run_id}.child0", inner, parent=child)
            child.children.append(grandchild)
            self.nodes.append(grandchild)
        return root

    @rule(family=families, data=st.data())
    def leaf_ends(self, family: Node, data: st.DataObject) -> None:
        leaves = [n for n in self._tree(family) if n.name == "cm_leaf"]
        node = data.draw(st.sampled_from(leaves))
        if node.status != RunStatus.SIGNAL_WAITING:
            return
        self.run(self.runner.client.signal("cm_leaf", node.run_id, "go", {"v": 1}))
        self.run(self.settle())
        node.status = RunStatus.COMPLETE
        parent = node.parent
        while parent is not None and parent.status == RunStatus.SIGNAL_WAITING:
            parent.status = RunStatus.COMPLETE
            parent = parent.parent

    @rule(family=families)
    def terminate(self, family: Node) -> None:
        result = self.run(self.runner.client.terminate("cm_top", family.run_id))
        was = family.status
        if was == RunStatus.SIGNAL_WAITING:
            family.status = RunStatus.TERMINATED
        if family.status != RunStatus.TERMINATED:
            assert result.outcome == TerminateOutcome.ALREADY_ENDED
            assert (result.children, result.ended) == (CloseResult(), ())
            return
        expected_outcome = (
            TerminateOutcome.TERMINATED
            if was == RunStatus.SIGNAL_WAITING
            else TerminateOutcome.ALREADY_ENDED
        )
        assert result.outcome == expected_outcome
        closed, ended = self._close(family)
        assert result.children == closed
        assert result.ended == ended

    @rule(family=families)
    def store_terminates_alone(self, family: Node) -> None:
        """A client that terminated the run and died before its cascade."""
        self.store.terminate_run("cm_top", family.run_id)
        if family.status == RunStatus.SIGNAL_WAITING:
            family.status = RunStatus.TERMINATED

    @rule()
    def backstops_fire(self) -> None:
        self.clock.advance(BACKSTOP_MOST + 1)
        self.run(self.runner.fire_due_timers())
        self.run(self.settle())

    # -- the model -----------------------------------------------------------------------------

    def _tree(self, node: Node) -> list[Node]:
        return [node, *(n for c in node.children for n in self._tree(c))]

    def _close(self, node: Node) -> tuple[CloseResult, tuple[tuple[str, str], ...]]:
        closed, ended = CloseResult(), list[tuple[str, str]]()
        for child in node.children:
            if child.status != RunStatus.SIGNAL_WAITING:
                if child.status == RunStatus.TERMINATED:
                    more, more_ended = self._close(child)
                    closed, ended = closed + more, [*ended, *more_ended]
                continue
            if child.policy == "abandon":
                closed += CloseResult(abandoned=1)
                continue
            child.status = RunStatus.TERMINATED
            closed += CloseResult(terminated=1)
            ended.append((child.name, child.run_id))
            more, more_ended = self._close(child)
            closed, ended = closed + more, [*ended, *more_ended]
        return closed, tuple(ended)

    @invariant()
    def every_run_is_where_the_model_says(self) -> None:
        for node in self.nodes:
            info = self.store.get_run(node.name, node.run_id)
            assert info is not None, node.run_id
            assert info.status == node.status, (node.run_id, info.status, node.status)


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_child_cascades_match_the_model(backend: str) -> None:
    run_state_machine_as_test(
        lambda: CascadeMachine(backend),
        settings=settings(
            max_examples=40,
            stateful_step_count=12,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
