"""``continue_as_new`` chains across real worker processes killed with SIGKILL.

A chain hops 1,000 times on one SQLite file while the test sends it signals by its root id and
kills a worker at random points, restarting it: at the end every signal was applied exactly
once (the chain's params carry the ids applied), and the result is read from the root id.
"""

from __future__ import annotations

import asyncio
import random
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

from lockgate import EventKind, RunStatus, WorkflowClient, resolve_continuation
from lockgate.stores import SQLiteStore
from test_worker_processes import DEADLINE, Cluster, wait_for

NAME = "proc_chain_tally"
HOPS = 1_000
SIGNALS = 300


def hop_of(cluster: Cluster, root: str) -> int:
    """The hop the chain's tail record names (0 before the first hop moved it)."""
    tail = cluster.store().get_chain_tail(NAME, root)
    return tail.hop if tail is not None else 0


def holder_of_the_tail(store: SQLiteStore, root: str, ids: list[str]) -> int:
    """The index of the worker running the chain's live run now (the chain is busy nearly
    all the time: a hop is claimed as soon as the one before continues), so a kill lands
    inside an attempt at whatever point it has reached."""
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        _, tail, _ = resolve_continuation(store, NAME, root)
        holder = store.lock_holder(NAME, tail) or ""
        for index, worker_id in enumerate(ids):
            if holder.startswith(f"{worker_id}/"):
                return index
        time.sleep(0.001)
    raise AssertionError("no worker held the chain's live run")


def test_a_chain_of_1000_hops_applies_every_signal_once_across_sigkills(
    tmp_path: Path,
) -> None:
    cluster = Cluster(tmp_path)
    try:
        rng = random.Random(14)
        ids = ["w0", "w1"]
        workers = [cluster.start("--workflows", "chain_workflows", "--worker-id", i) for i in ids]
        store = cluster.store()
        client = WorkflowClient(store)
        root = "tally"
        store.submit_run(
            NAME,
            root,
            {"hops": HOPS, "expect": SIGNALS},
            version="",
            version_behavior="auto_upgrade",
        )
        kills = 0

        async def send_all() -> None:
            nonlocal kills
            for n in range(SIGNALS):
                # Each send repeated once: the second is recognised on whichever hop holds it.
                for _ in range(2):
                    await client.signal(NAME, root, "add", {"id": f"s{n}"}, signal_id=f"s{n}")
                if n % 50 == 25:
                    victim = holder_of_the_tail(store, root, ids)
                    workers[victim].send_signal(signal.SIGKILL)
                    workers[victim].wait(timeout=DEADLINE)
                    kills += 1
                    ids[victim] = f"w{victim}-{kills}"
                    workers[victim] = cluster.start(
                        "--workflows", "chain_workflows", "--worker-id", ids[victim]
                    )
                    # The hop the kill cut is recovered and moves on before the next kill:
                    # a hop killed again and again is quarantined, as poison_max_retries says.
                    killed_at = hop_of(cluster, root)
                    wait_for(
                        "the chain moves past the hop a kill cut",
                        lambda at=killed_at: hop_of(cluster, root) > at,
                        cluster,
                        DEADLINE,
                    )
                await asyncio.sleep(rng.uniform(0.0, 0.01))

        asyncio.run(send_all())
        assert kills >= 5

        def ended() -> bool:
            info = asyncio.run(client.status(NAME, root))
            return info.is_terminal

        wait_for("the chain ends", ended, cluster, DEADLINE * 2)
        assert asyncio.run(client.status(NAME, root)) == RunStatus.COMPLETE
        result: dict[str, Any] = asyncio.run(client.result(NAME, root))
        counts = Counter(result["applied"])
        assert set(counts) == {f"s{n}" for n in range(SIGNALS)}, "a signal was lost"
        assert max(counts.values()) == 1, (
            f"applied twice: {[k for k, v in counts.items() if v > 1]}"
        )
        assert result["hop"] >= HOPS
        assert hop_of(cluster, root) == result["hop"]
        # Each hop ended run:continued exactly once and named the next.
        for hop in range(result["hop"]):
            run_id = root if hop == 0 else f"{root}.c{hop}"
            events = store.load_run(NAME, run_id)
            ends = [e for e in events if e.is_terminal]
            assert [e.kind for e in ends] == [EventKind.RUN_CONTINUED], run_id
            assert ends[0].payload["run_id"] == f"{root}.c{hop + 1}"
        assert any(
            e.kind == EventKind.RUN_REQUEUED
            for hop in range(result["hop"] + 1)
            for e in store.load_run(NAME, root if hop == 0 else f"{root}.c{hop}")
        ), "no hop lost its worker: the kills hit nothing"
    finally:
        cluster.close()
