"""What gates cost at claim time, whether a Rate holds its rate, and how late triggers fire.

Prints, from one run: claims per second with no gates, with a Limit, with a Rate and with both,
on MemoryStore and SQLiteStore, and each gated figure's ratio to the ungated one (the gates
are set wide, so every claim passes them and the figure is their bookkeeping cost); then the
observed start rate of a ``Rate(per_second=50)`` key claimed as fast as possible for 10 s,
against 50; and the delay from a ``Collect`` window's end, or a ``Debounce`` quiet period's
end, to the submit of the run it fires, through a ``WorkflowWorker`` whose trigger loop polls
every 50 ms (median and max over 20 keys). Not a test; record the output in
docs/performance.md with the command:

    .venv/bin/python bench/flow_claims.py
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from lockgate import (
    Collect,
    Debounce,
    MemoryStore,
    SQLiteStore,
    Store,
    WorkerOptions,
    WorkflowContext,
    WorkflowWorker,
    workflow,
)

KEYS = 20
RATE_SECONDS = 10.0

GATES: dict[str, dict[str, Any]] = {
    "none": {},
    "Limit": {"concurrency_max": 1_000_000},
    "Rate": {"rate_per_second": 1e9, "rate_burst": 1_000_000},
    "Limit+Rate": {
        "concurrency_max": 1_000_000,
        "rate_per_second": 1e9,
        "rate_burst": 1_000_000,
    },
}


def stamp(config: dict[str, Any], key: str) -> dict[str, Any]:
    gates = dict(config)
    if "concurrency_max" in gates:
        gates["concurrency_key"] = key
    if "rate_per_second" in gates:
        gates["rate_key"] = key
    return gates


def claims_per_second(make: Callable[[], Store], runs: int, config: dict[str, Any]) -> float:
    store = make()
    for n in range(runs):
        store.submit_run("bench", f"r{n}", {}, **stamp(config, f"k{n % KEYS}"))
    started = time.perf_counter()
    for n in range(runs):
        assert store.claim_next_run("bench", f"lease-{n}") is not None
    elapsed = time.perf_counter() - started
    store.close()
    return runs / elapsed


def observed_rate() -> tuple[int, float]:
    store = MemoryStore()
    for n in range(2_000):
        store.submit_run("bench", f"r{n}", {}, rate_key="hot", rate_per_second=50.0, rate_burst=1)
    starts = 0
    started = time.monotonic()
    while (elapsed := time.monotonic() - started) < RATE_SECONDS:
        if store.claim_next_run("bench", f"lease-{starts}") is not None:
            starts += 1
        else:
            time.sleep(0.001)
    return starts, elapsed


WINDOW = 0.3
TRIGGER_KEYS = 20


@workflow(name="bench_collect", trigger=Collect(key="k", max_events=1000, window_seconds=WINDOW))
async def collected(ctx: WorkflowContext, key: str, events: list[Any], count: int) -> int:
    return count


@workflow(name="bench_debounce", trigger=Debounce(key="k", window_seconds=WINDOW))
async def debounced(ctx: WorkflowContext, key: str, events: list[Any], count: int) -> int:
    return count


async def fire_delays(
    make: Callable[[], Store], mode: Literal["collect", "debounce"]
) -> list[float]:
    """Seconds from each key's due time to the submit of the run that fired it."""
    store = make()
    name = f"bench_{mode}"
    body = collected if mode == "collect" else debounced
    options = WorkerOptions(timer_poll_interval_s=0.05, claim_poll_interval=0.05)
    worker = WorkflowWorker(workflows=[body], store=store, options=options)
    task = asyncio.create_task(worker.run())
    due: dict[str, float] = {}
    try:
        for n in range(TRIGGER_KEYS):
            for _ in range(1 if mode == "collect" else 3):
                await worker.client.trigger(name, {"k": f"key{n}"})
                sent = time.time()
                due.setdefault(f"key{n}", sent + WINDOW)
                if mode == "debounce":
                    due[f"key{n}"] = sent + WINDOW
                    await asyncio.sleep(0.01)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            runs, _ = store.list_runs(name, limit=1000)
            if len(runs) >= TRIGGER_KEYS:
                break
            await asyncio.sleep(0.02)
        runs, _ = store.list_runs(name, limit=1000)
        return [info.submitted_at - due[info.params["key"]] for info in runs]
    finally:
        worker.stop()
        await task
        store.close()


def main() -> None:
    with tempfile.TemporaryDirectory(dir=Path(__file__).resolve().parents[1]) as tmp:
        counter = iter(range(1_000_000))

        def sqlite() -> Store:
            return SQLiteStore(Path(tmp) / f"claims-{next(counter)}.db", synchronous="normal")

        backends: list[tuple[str, Callable[[], Store], int]] = [
            ("MemoryStore", MemoryStore, 2_000),
            ("SQLiteStore (synchronous=normal)", sqlite, 1_000),
        ]
        print(f"claims/s over {KEYS} keys, gates wide open (every claim passes them)")
        for label, make, runs in backends:
            base = claims_per_second(make, runs, GATES["none"])
            print(f"{label}, {runs} queued runs:")
            for gate, config in GATES.items():
                rate = base if gate == "none" else claims_per_second(make, runs, config)
                print(f"  {gate:<11}{rate:>10,.0f} claims/s   ratio to ungated {rate / base:.2f}")
    print(
        f"trigger fire delay (window end to submit), trigger loop every 50 ms, {TRIGGER_KEYS} keys:"
    )
    with tempfile.TemporaryDirectory(dir=Path(__file__).resolve().parents[1]) as tmp:
        counter2 = iter(range(1_000_000))

        def sqlite_store() -> Store:
            return SQLiteStore(Path(tmp) / f"t-{next(counter2)}.db", synchronous="normal")

        for label, make in (("MemoryStore", MemoryStore), ("SQLiteStore", sqlite_store)):
            for mode in ("collect", "debounce"):
                delays = asyncio.run(fire_delays(make, mode))  # type: ignore[arg-type]
                print(
                    f"  {label:<12}{mode:<9} median {statistics.median(delays) * 1000:6.0f} ms"
                    f"   max {max(delays) * 1000:6.0f} ms   ({len(delays)} runs)"
                )
    starts, elapsed = observed_rate()
    print(
        f"Rate(per_second=50, burst=1), claimed as fast as possible for {elapsed:.1f} s: "
        f"{starts} starts = {starts / elapsed:.1f}/s (limit 50/s; bound burst + 50 t = "
        f"{1 + 50 * elapsed:.0f})"
    )


if __name__ == "__main__":
    main()
