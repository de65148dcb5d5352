"""lockgate side by side with its peers: the same work, the same broker, one worker process a
system, each repeat on fresh topics, which system goes first turning round each repeat.

- bound: RECORDS keyed JSON records on a topic of 8 partitions, produced beforehand, each into
  one completed one-step durable run: lockgate (a workflow bound to the topic, ``lockgate
  worker``, Valkey + Kafka journal), Restate (a Kafka subscription to a handler whose body is
  one ``ctx.run``) and DBOS (a ``@DBOS.kafka_consumer`` workflow with one ``@DBOS.step``);
- collect: EVENTS events across KEYS keys, produced beforehand: lockgate (a
  ``Collect(max_events=50)`` trigger workflow whose fired runs its worker runs to
  completion) and Quix Streams (``tumbling_count_window(50)`` per key, exactly-once, each
  window to an output topic).

Every figure is timed as ``_timing.py`` says (from the first completion each system records to
the last, each system's own completion times; the rate the bench saw asking every 50 ms is
printed beside it), and after every run each record or event is checked to be in exactly one
completed output. Each peer is installed by
``_install.py`` into a directory of its own outside the project's venv, once.

Not a test (CI never runs it); record its output in docs/performance.md:

    LOCKGATE_TEST_KAFKA_BOOTSTRAP=127.0.0.1:9092 .venv/bin/python bench/peers/run.py
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent), str(HERE.parent.parent / "tests")]

import _dbos  # noqa: E402
import _lockgate  # noqa: E402
import _quix  # noqa: E402
import _restate  # noqa: E402
from _install import PeerUnavailable, root  # noqa: E402
from _postgres import postgres  # noqa: E402
from _work import Outcome, Scale, delete_made_topics  # noqa: E402

from _broker import kafka_bootstrap  # noqa: E402
from _servers import valkey_url  # noqa: E402

PARTS = {"bound": ["lockgate", "restate", "dbos"], "collect": ["lockgate", "quix"]}
UNITS = {"bound": "runs/s", "collect": "events/s"}
NAMES = {
    "lockgate": "lockgate (this checkout)",
    "restate": f"Restate {_restate.SERVER} (restate-sdk {_restate.SDK})",
    "dbos": f"DBOS {_dbos.VERSION} on PostgreSQL",
    "quix": f"Quix Streams {_quix.VERSION}",
}
DURABILITY = {
    "lockgate": _lockgate.DURABILITY,
    "restate": _restate.DURABILITY,
    "dbos": _dbos.DURABILITY,
    "quix": _quix.DURABILITY,
}

Run = Callable[[Scale], Outcome]

#: The peers that could not be installed or started, and why.
LEFT_OUT: dict[str, str] = {}


@dataclass
class Figures:
    rates: list[float | None] = field(default_factory=list)
    checks: list[str] = field(default_factory=list)
    exact: list[bool] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def restate_run(bootstrap: str) -> Run:
    restate = _restate.Restate()
    return lambda s: restate.bound(bootstrap, s)


def dbos_run(bootstrap: str, stack: ExitStack) -> Run:
    dbos = _dbos.Dbos(stack.enter_context(postgres()))
    return lambda s: dbos.bound(bootstrap, s)


def quix_run(bootstrap: str) -> Run:
    quix = _quix.Quix()
    return lambda s: quix.collect(bootstrap, s)


def prepare(systems: list[str], parts: list[str], stack: ExitStack) -> dict[str, dict[str, Run]]:
    """The runs of each part for each system that could be made ready (a peer that could not
    is named, with why, and left out)."""
    bootstrap = stack.enter_context(kafka_bootstrap())
    stack.callback(delete_made_topics, bootstrap)
    wanted = {s for p in parts for s in PARTS[p] if s in systems}
    runs: dict[str, dict[str, Run]] = {p: {} for p in parts}
    print(f"peers are installed under {root()} (LOCKGATE_BENCH_PEERS_DIR names another)")
    if "lockgate" in wanted:
        url = stack.enter_context(valkey_url())
        runs.get("bound", {})["lockgate"] = lambda s: _lockgate.bound(url, bootstrap, s)
        runs.get("collect", {})["lockgate"] = lambda s: _lockgate.collect(url, bootstrap, s)
    # Each peer: its name in messages, its part, and how to make its run ready (which may fail
    # with PeerUnavailable: then it is left out, with why).
    peers: dict[str, tuple[str, str, Callable[[], Run]]] = {
        "restate": ("Restate", "bound", lambda: restate_run(bootstrap)),
        "dbos": ("DBOS", "bound", lambda: dbos_run(bootstrap, stack)),
        "quix": ("Quix Streams", "collect", lambda: quix_run(bootstrap)),
    }
    for system, (label, part, ready) in peers.items():
        if system not in wanted:
            continue
        try:
            runs[part][system] = ready()
        except PeerUnavailable as error:
            LEFT_OUT[system] = str(error)
            print(f"{label} left out: {error}", flush=True)
    for part in parts:
        runs[part] = {s: runs[part][s] for s in PARTS[part] if s in runs[part]}
    return runs


def measure(part: str, runs: dict[str, Run], scale: Scale, repeats: int) -> dict[str, Figures]:
    figures = {system: Figures() for system in runs}
    order = list(runs)
    if not order:
        return figures
    for repeat in range(repeats):
        turn = order[repeat % len(order) :] + order[: repeat % len(order)]
        print(f"\n{part}, repeat {repeat + 1} of {repeats}: {', '.join(turn)}", flush=True)
        for system in turn:
            started = time.monotonic()
            try:
                outcome = runs[system](scale)
            except Exception as error:  # one system failing leaves the others measured
                print(f"  {system}: FAILED: {type(error).__name__}: {error}", flush=True)
                figures[system].rates.append(None)
                figures[system].checks.append(f"failed: {error}")
                figures[system].exact.append(False)
                continue
            took = time.monotonic() - started
            figures[system].rates.append(outcome.rate)
            figures[system].checks.append(outcome.check)
            figures[system].exact.append(outcome.exact)
            if outcome.note:
                figures[system].notes.append(outcome.note)
            mark = "" if outcome.exact else "  <-- NOT EXACTLY ONCE"
            if outcome.note:
                mark += f"\n    ({outcome.note})"
            print(
                f"  {system}: {outcome.rate:,.1f} {UNITS[part]} (asked every 50 ms: "
                f"{outcome.polled:,.1f}; {took:.0f} s in all); "
                f"{outcome.check}{mark}",
                flush=True,
            )
    return figures


def _rate(rate: float | None) -> str:
    return "failed" if rate is None else f"{rate:,.1f}"


def report(part: str, figures: dict[str, Figures], scale: Scale) -> None:
    work = (
        f"{scale.records:,} records -> one-step runs"
        if part == "bound"
        else f"{scale.events:,} events, {scale.keys:,} keys -> windows of 50"
    )
    print(f"\n## {part}: {work} ({UNITS[part]}, each repeat)")
    ours = figures.get("lockgate")
    for system in PARTS[part]:
        if system in LEFT_OUT:
            print(f"{NAMES[system]}: left out: {LEFT_OUT[system]}")
    for system, got in figures.items():
        rates = ", ".join(_rate(r) for r in got.rates)
        done = [r for r in got.rates if r is not None]
        median = f"median {statistics.median(done):,.1f}" if done else "no figure"
        line = f"{NAMES[system]}: {rates}; {median}"
        if ours is not None and system != "lockgate":
            ratios = [
                a / b for a, b in zip(ours.rates, got.rates, strict=True) if a is not None and b
            ]
            each = ", ".join(f"{r:.2f}" for r in ratios)
            line += (
                f"; lockgate:{system} {each}, median {statistics.median(ratios):.2f}"
                if ratios
                else f"; lockgate:{system} no ratio"
            )
        print(line)
        exact = sum(got.exact)
        print(f"  exactly once: {exact} of {len(got.exact)} repeats; last: {got.checks[-1]}")
        for note in got.notes:
            print(f"  {note}")
        print(f"  durability: {DURABILITY[system]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=sorted(PARTS), help="one part only")
    parser.add_argument(
        "--systems",
        default="lockgate,restate,dbos,quix",
        help="comma-separated, of lockgate, restate, dbos, quix (default: all)",
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--records", type=int, default=Scale.records, help="bound (3,000)")
    parser.add_argument("--events", type=int, default=Scale.events, help="collect (200,000)")
    parser.add_argument("--keys", type=int, default=Scale.keys, help="collect (1,000)")
    args = parser.parse_args()
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = sorted(set(systems) - set(NAMES))
    if unknown:
        parser.error(f"unknown systems {unknown}: choose from {sorted(NAMES)}")
    if args.events % args.keys or (args.events // args.keys) % 50:
        parser.error("--events must give each key a whole number of windows of 50")
    scale = Scale(args.records, args.events, args.keys)
    parts = [args.only] if args.only else list(PARTS)
    with ExitStack() as stack:
        runs = prepare(systems, parts, stack)
        results = {part: measure(part, runs[part], scale, args.repeats) for part in parts}
    for part in parts:
        report(part, results[part], scale)


if __name__ == "__main__":
    main()
