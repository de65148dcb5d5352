"""CPU time per run of each thread of the ``lockgate worker`` process that ``kafka_bound.py``
measures, for its three kinds of run: through a binding (``bound``), submitted with
``client.submit`` while the worker runs (``submitted``), and queued before it starts
(``queued``).

A py-spy ``--gil`` profile counts the wall time a thread holds the interpreter, which on a
loaded machine includes the time it holds it without a core; this reads each thread's user and
system time from ``/proc/PID/task/*/stat`` (Linux only) at the first run's end and at the
RUNS-th, as ``kafka_bound.py`` times its runs, and prints them per run, the main thread (the
claims and the attempts) first.

Not a test; record the output in docs/performance.md with the command:

    .venv/bin/python bench/kafka_bound_threads.py [bound,submitted,queued]
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import kafka_bound
from _servers import ended_runs
from lockgate import ValkeyStore

TICKS = os.sysconf("SC_CLK_TCK")


def thread_seconds(pid: int) -> dict[tuple[int, str], float]:
    """Each thread of ``pid``, by thread id and name: its user and system seconds so far."""
    seconds = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as stat:
                text = stat.read()
        except FileNotFoundError:
            continue  # the thread ended meanwhile
        name = text[text.index("(") + 1 : text.rindex(")")]
        fields = text[text.rindex(")") + 2 :].split()
        seconds[(int(tid), name)] = (int(fields[11]) + int(fields[12])) / TICKS
    return seconds


def measured(kind: str) -> Callable[..., float]:
    """``completion_rate`` as ``kafka_bound.py`` has it, printing each thread's CPU per run."""

    def rate(
        store: ValkeyStore,
        runs: int,
        workers: Sequence[subprocess.Popen[bytes]],
        timeout: float = 300.0,
    ) -> float:
        pid, deadline = workers[0].pid, time.perf_counter() + timeout
        while ended_runs(store) == 0:
            if time.perf_counter() > deadline or workers[0].poll() is not None:
                raise RuntimeError("no run ended")
            time.sleep(0.001)
        before, started, first = thread_seconds(pid), time.perf_counter(), ended_runs(store)
        while ended_runs(store) < runs:
            if time.perf_counter() > deadline:
                raise RuntimeError("the runs did not end in time")
            time.sleep(0.01)
        took, after = time.perf_counter() - started, thread_seconds(pid)
        count = runs - first
        spent = {key: after[key] - before.get(key, 0.0) for key in after}
        main = next(key for key in spent if key[0] == pid)
        rest = sorted((key for key in spent if key != main), key=lambda k: -spent[k])
        threads = ", ".join(f"{n}#{t} {spent[(t, n)] / count * 1e6:.0f}" for t, n in rest[:5])
        print(
            f"{kind}: {count / took:,.1f} runs/s; CPU per run, µs: main thread "
            f"{spent[main] / count * 1e6:.0f}, whole process "
            f"{sum(spent.values()) / count * 1e6:.0f}; busiest others: {threads}",
            flush=True,
        )
        return count / took

    return rate


def main() -> None:
    kinds = sys.argv[1].split(",") if len(sys.argv) > 1 else ["bound", "submitted", "queued"]
    with kafka_bound.valkey_url() as url, kafka_bound.kafka_bootstrap() as bootstrap:
        for kind in kinds:
            kafka_bound.completion_rate = measured(kind)
            topic = kafka_bound.make_topic(bootstrap) if kind == "bound" else "unused"
            kafka_bound.runs_per_second(url, bootstrap, kind, topic)


if __name__ == "__main__":
    main()
