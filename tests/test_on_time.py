"""A worker keeps time with default options: a claim a Rate refused waits for exactly the next
token, and the timer and trigger loops sleep until the store's next deadline, woken early by a
deadline this process sets.

Time is a ManualClock played forward one wake-up at a time (each step moves it to the soonest
deadline a sleeper waits for), so a loop that wakes late, or polls, shows as a missed
deadline; nothing here depends on the machine's speed.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import sqlite3
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from lockgate import (
    Debounce,
    ManualClock,
    MemoryStore,
    Rate,
    RunStatus,
    SQLiteStore,
    SystemClock,
    WorkflowContext,
    workflow,
)
from lockgate.stores import TriggerPolicy
from lockgate.stores._calls import call_store_at
from lockgate.worker import WorkerOptions, WorkflowWorker
from lockgate.worker._loops import MAX_BACKOFF_FACTOR, claim_backoff

PER_SECOND = 50.0


@workflow(name="ot_rated", rate_limit=Rate(key="tenant", per_second=PER_SECOND, burst=1))
async def ot_rated(ctx: WorkflowContext, tenant: str) -> None:
    return None


@workflow(name="ot_sleeper")
async def ot_sleeper(ctx: WorkflowContext, seconds: float) -> str:
    await ctx.sleep(seconds)
    return "woke"


@workflow(name="ot_debounced", trigger=Debounce(key="k", window_seconds=1.0))
async def ot_debounced(ctx: WorkflowContext, key: str, events: list[Any], count: int) -> int:
    return count


async def settle() -> None:
    """Let every task run until each waits on the clock (the stores here do no I/O)."""
    for _ in range(100):
        await asyncio.sleep(0)


async def play(clock: ManualClock, until: float) -> None:
    """Move time to ``until`` one wake-up at a time, letting the worker act at each."""
    await settle()
    while (wake := clock.next_wake) is not None and wake <= until:
        clock.advance(max(0.0, wake - clock()))
        await settle()
    clock.advance(max(0.0, until - clock()))
    await settle()


@contextlib.asynccontextmanager
async def serving(*workers: WorkflowWorker) -> AsyncIterator[None]:
    tasks = [asyncio.create_task(worker.run()) for worker in workers]
    await settle()
    try:
        yield
    finally:
        for worker in workers:
            worker.stop()
        clock = workers[0].clock
        assert isinstance(clock, ManualClock)
        while not all(task.done() for task in tasks):
            clock.advance(1.0)
            await settle()
        for task in tasks:
            task.result()


def on(store: MemoryStore, clock: ManualClock, *workflows: Any, **options: Any) -> WorkflowWorker:
    return WorkflowWorker(
        workflows=list(workflows), store=store, clock=clock, options=WorkerOptions(**options)
    )


async def starts_over(
    store: MemoryStore, clock: ManualClock, seconds: float, queued: int
) -> list[float]:
    """Play ``seconds`` forward, noting the time each of the ``queued`` runs of ``ot_rated``
    left the queue (runs are claimed only at wake-ups, so the time is exact; those claimed
    already count as now)."""
    pending = store.get_pending_count("ot_rated")
    starts = [clock()] * (queued - pending)
    end = clock() + seconds
    while clock() < end:
        wake = clock.next_wake
        clock.advance(max(0.0, min(wake if wake is not None else end, end) - clock()))
        await settle()
        now_pending = store.get_pending_count("ot_rated")
        starts.extend([clock()] * (pending - now_pending))
        pending = now_pending
    return starts


def over_the_bound(starts: list[float], burst: int, per_second: float) -> float:
    """The most starts in any window ``t`` beyond ``burst + per_second * t``."""
    return max(
        (j - i + 1) - (burst + per_second * (starts[j] - starts[i]))
        for i in range(len(starts))
        for j in range(i, len(starts))
    )


async def test_a_rate_of_50_with_a_burst_of_1_gets_50_starts_a_second() -> None:
    clock = ManualClock()
    store = MemoryStore(clock=clock)
    worker = on(store, clock, ot_rated)
    for _ in range(200):
        await worker.client.submit("ot_rated", {"tenant": "acme"})
    async with serving(worker):
        opened = clock()
        starts = await starts_over(store, clock, 2.0, 200)
    # One start at once (the burst), then one per token: 1 + 50 t, less a microsecond a
    # token for the slack the store adds to each wait.
    assert len(starts) == 100
    assert starts[0] == opened
    assert over_the_bound(starts, 1, PER_SECOND) <= 1e-9
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert max(gaps) < 1 / PER_SECOND + 1e-5, max(gaps)


class CountingClaims(MemoryStore):
    """Counts the batch claims each worker makes (by the worker id its leases start with)."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock=clock)
        self.claims: collections.Counter[str] = collections.Counter()

    def claim_next_runs_loaded(self, name: str, leases: Any, *args: Any, **kwargs: Any) -> Any:
        self.claims[leases[0].split("/")[0]] += 1
        return super().claim_next_runs_loaded(name, leases, *args, **kwargs)


async def test_three_workers_racing_for_each_token_still_get_the_whole_rate() -> None:
    clock = ManualClock()
    store = CountingClaims(clock)
    workers = [
        WorkflowWorker(workflows=[ot_rated], store=store, clock=clock, worker_id=f"w{n}")
        for n in range(3)
    ]
    for _ in range(200):
        await workers[0].client.submit("ot_rated", {"tenant": "acme"})
    async with serving(*workers):
        starts = await starts_over(store, clock, 2.0, 200)
    assert len(starts) == 100
    assert over_the_bound(starts, 1, PER_SECOND) <= 1e-9
    # Every worker asked at (about) every token: a loser waits for the next one, where a
    # backoff would have had it ask a few times in the two seconds.
    assert all(store.claims[f"w{n}"] >= 100 for n in range(3)), store.claims


async def test_a_sleep_wakes_at_its_deadline_not_at_a_poll() -> None:
    clock = ManualClock()
    store = MemoryStore(clock=clock)
    # A poll that would never come in this test: only the deadline can wake the run.
    worker = on(store, clock, ot_sleeper, timer_poll_interval_s=3600.0)
    async with serving(worker):
        far = await worker.client.submit("ot_sleeper", {"seconds": 100.0})
        await play(clock, clock() + 2.0)
        assert (await far.status()) == RunStatus.SLEEPING
        # Parked while the timer loop sleeps towards +100 s: the park's notice wakes it.
        near = await worker.client.submit("ot_sleeper", {"seconds": 7.0})
        await play(clock, clock() + 2.0)
        assert (await near.status()) == RunStatus.SLEEPING
        (sleeping,) = [
            e for e in store.load_run("ot_sleeper", near.run_id) if e.kind == "run:sleeping"
        ]
        due = sleeping.payload["wake_at"]
        await play(clock, due - 0.001)
        assert (await near.status()) == RunStatus.SLEEPING
        await play(clock, due)  # the very wake-up of its deadline
        assert (await near.status()) == RunStatus.COMPLETE
        assert (await far.status()) == RunStatus.SLEEPING


async def test_a_debounce_fires_at_the_end_of_its_quiet_period() -> None:
    clock = ManualClock()
    store = MemoryStore(clock=clock)
    worker = on(store, clock, ot_debounced)  # default options
    policy = TriggerPolicy("debounce", window_seconds=1.0)
    async with serving(worker):
        # Sent as another process would: straight to the store, with no notice to this one.
        store.trigger_event("ot_debounced", "k1", {"n": 1}, policy=policy)
        sent = clock()
        await play(clock, sent + 1.0 - 0.001)
        assert store.list_runs("ot_debounced")[0] == []
        await play(clock, sent + 1.0)
        (fired,), _ = store.list_runs("ot_debounced")
        assert fired.submitted_at == sent + 1.0
        # Sent here, by a client of this process, with the loop asleep towards a far poll.


async def test_a_trigger_sent_in_this_process_wakes_a_loop_that_would_not_poll_in_time() -> None:
    clock = ManualClock()
    store = MemoryStore(clock=clock)
    worker = on(store, clock, ot_debounced, timer_poll_interval_s=3600.0)
    async with serving(worker):
        await play(clock, clock() + 0.5)  # the trigger loop now sleeps towards +3600 s
        await worker.client.trigger("ot_debounced", {"k": "k2"})
        sent = clock()
        await play(clock, sent + 1.0)
        (fired,), _ = store.list_runs("ot_debounced")
        assert fired.submitted_at == sent + 1.0


async def test_a_call_made_at_a_moment_is_made_no_sooner_on_the_stores_thread(
    tmp_path: Path,
) -> None:
    store = SQLiteStore(tmp_path / "at.db")
    calls: list[tuple[float, str]] = []

    def note(name: str) -> str:
        calls.append((time.time(), threading.current_thread().name))
        return name

    clock = SystemClock()
    for ahead in (None, 0.0, 0.003, 0.02):
        at = clock() + ahead if ahead is not None else None
        before = clock()
        answer, started = await call_store_at(store, clock, at, note, "x")
        assert answer == "x"
        called, thread = calls[-1]
        assert before <= started <= called
        assert called >= (at or before)
        assert thread.startswith("lockgate-store")
    store.close()


def test_the_claim_backoff_stays_bounded_however_long_the_queue_stays_empty() -> None:
    """An idle worker makes about one empty claim a second: after 1,025 of them (17 minutes)
    the doubling overflowed a float, and the claim loop, then the worker, died."""
    poll = 0.1
    for misses in (0, 1, 4, 10, 1_025, 10**6):
        assert 0.0 < claim_backoff(poll, misses) <= poll * MAX_BACKOFF_FACTOR * 1.2


def test_a_claim_a_rate_refuses_commits_nothing_to_an_sqlite_file(tmp_path: Path) -> None:
    """Workers racing for a token make a refused claim each per token: with nothing to commit,
    none of them waits on a sync to disk, nor holds up the next winner behind one."""
    path = tmp_path / "refused.db"
    store = SQLiteStore(path)
    for n in range(3):
        store.submit_run("ot_rated", f"r{n}", {}, rate_key="k", rate_per_second=1.0, rate_burst=1)
    assert store.claim_next_run("ot_rated", "lease-0") == "r0"
    observer = sqlite3.connect(path)
    version = observer.execute("PRAGMA data_version").fetchone()[0]
    refused = store.claim_next_runs_loaded("ot_rated", ["lease-1", "lease-2"])
    assert list(refused) == []
    assert refused.next_token_in is not None
    assert observer.execute("PRAGMA data_version").fetchone()[0] == version
    observer.close()
    store.close()
