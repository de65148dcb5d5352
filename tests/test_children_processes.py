"""Child runs across real worker processes on one SQLite file: a parent fanning out 50
children survives the SIGKILL of a worker mid-way (every child runs once, the parent's result
is whole), and a signal sent from a body by a worker killed right after the send is kept once.

The helpers are ``tests/test_worker_processes.py``'s; tests wait for states, never for time.
"""

from __future__ import annotations

import collections
import signal
import uuid

from lockgate import EventKind, RunStatus
from test_worker_processes import DEADLINE, Cluster, cluster, requeues, wait_for

__all__ = ["cluster"]

CHILDREN = 50


def test_a_fan_out_survives_the_sigkill_of_a_worker_mid_way(cluster: Cluster) -> None:
    store = cluster.store()
    victim = cluster.start("--worker-id", "w0", "--workflows", "child_workflows")
    parent = store.submit_run(
        "proc_fan_parent",
        uuid.uuid4().hex,
        {"count": CHILDREN, "most": 10, "pause": 0.05},
        version="1",
        version_behavior="pinned",
    )
    wait_for(
        "10 children ran their step",
        lambda: len(cluster.executions()) >= 10,
        cluster,
        DEADLINE,
    )
    victim.send_signal(signal.SIGKILL)
    assert victim.wait(timeout=DEADLINE) == -signal.SIGKILL
    cluster.start("--worker-id", "w1", "--workflows", "child_workflows")

    def parent_ended() -> bool:
        info = store.get_run("proc_fan_parent", parent)
        return info is not None and info.status.is_terminal

    wait_for("the parent ends", parent_ended, cluster, DEADLINE)
    last = store.get_last_event("proc_fan_parent", parent)
    assert last is not None
    assert last.kind == EventKind.RUN_COMPLETE, last
    assert last.payload["result"] == [2 * n for n in range(CHILDREN)]
    children = [f"{parent}.fan0.{n}" for n in range(CHILDREN)]
    for child in children:
        events = store.load_run("proc_fan_child", child)
        assert [e.kind for e in events].count(EventKind.RUN_INIT) == 1
        ends = [e for e in events if e.is_terminal]
        assert [e.kind for e in ends] == [EventKind.RUN_COMPLETE], (child, ends)
    # A child's step ran again only in a child that lost its worker, never after its outcome
    # was journaled.
    executions = cluster.executions()
    assert not [e for e in executions if e.done_already]
    counts = collections.Counter(e.run_id for e in executions)
    assert set(counts) == set(children)
    for child, times in counts.items():
        if times > 1:
            assert "owner_gone" in requeues(store.load_run("proc_fan_child", child)), child
    # The parent's journal names each child started once.
    started = [
        member["run_id"]
        for event in store.load_run("proc_fan_parent", parent)
        if event.kind == EventKind.STEP_PENDING
        for member in event.payload.get("members", [])
    ]
    assert sorted(started) == sorted(children)


def test_a_signal_sent_from_a_body_is_kept_once_when_its_worker_dies_after_sending(
    cluster: Cluster,
) -> None:
    store = cluster.store()
    cluster.start("--worker-id", "w0", "--workflows", "child_workflows")
    receiver = store.submit_run(
        "proc_receiver", uuid.uuid4().hex, {}, version="1", version_behavior="pinned"
    )

    def waiting() -> bool:
        info = store.get_run("proc_receiver", receiver)
        return info is not None and info.status == RunStatus.SIGNAL_WAITING

    wait_for("the receiver waits", waiting, cluster, DEADLINE)
    # This worker dies after its first step effect: the sender's send, before its outcome
    # is journaled.
    dying = cluster.start(
        "--worker-id", "w1", "--workflows", "child_workflows", failpoint="after_step_effect:crash"
    )
    cluster.procs[0].send_signal(signal.SIGKILL)  # only the armed worker may take the sender
    cluster.procs[0].wait(timeout=DEADLINE)
    sender = store.submit_run(
        "proc_sender",
        uuid.uuid4().hex,
        {"target": receiver},
        version="1",
        version_behavior="pinned",
    )
    assert dying.wait(timeout=DEADLINE) == -signal.SIGKILL
    cluster.start("--worker-id", "w2", "--workflows", "child_workflows")

    def both_ended() -> bool:
        return all(
            (info := store.get_run(name, run_id)) is not None and info.status.is_terminal
            for name, run_id in (("proc_sender", sender), ("proc_receiver", receiver))
        )

    wait_for("sender and receiver end", both_ended, cluster, DEADLINE)
    sent = store.get_last_event("proc_sender", sender)
    assert sent is not None
    assert sent.payload.get("result") == "duplicate", sent
    got = store.get_last_event("proc_receiver", receiver)
    assert got is not None
    assert got.payload.get("result") == [{"from": sender}, None], got
