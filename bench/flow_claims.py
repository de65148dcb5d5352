"""What gates cost at claim time, and whether a Rate holds its rate.

Prints, from one run: claims per second with no gates, with a Limit, with a Rate and with both,
on MemoryStore and SQLiteStore, and each gated figure's ratio to the ungated one (the gates
are set wide, so every claim passes them and the figure is their bookkeeping cost); then the
observed start rate of a ``Rate(per_second=50)`` key claimed as fast as possible for 10 s,
against 50. Not a test; record the output in docs/performance.md with the command:

    .venv/bin/python bench/flow_claims.py
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lockgate import MemoryStore, SQLiteStore, Store

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
    starts, elapsed = observed_rate()
    print(
        f"Rate(per_second=50, burst=1), claimed as fast as possible for {elapsed:.1f} s: "
        f"{starts} starts = {starts / elapsed:.1f}/s (limit 50/s; bound burst + 50 t = "
        f"{1 + 50 * elapsed:.0f})"
    )


if __name__ == "__main__":
    main()
