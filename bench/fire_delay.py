"""How late, with default options, a Debounce fires and a sleep ends; and what an idle worker
costs its store.

Prints, from one run, on SQLiteStore (default options) and on ValkeyStore:

- the fire delay of a ``Debounce(window_seconds=1)``: KEYS keys, each sent three events 0.1 s
  apart by this process (a client; the worker is another process, a real ``lockgate worker``
  on default options), the keys staggered STAGGER apart; the delay is from the end of each
  key's quiet window (its last event's send, plus the window) to the submit of the run it
  fired, as the store recorded it. Median, p99 and max. The raw figure beside it is the
  store's own fire of a due key (``due_triggers`` and ``fire_trigger``, timed in this
  process): the least a delay can be;
- how late a sleep ends: SLEEPS runs of a workflow that sleeps 1 s (submitted STAGGER apart
  from this process), from each sleep's due time (its ``run:sleeping`` event's ``wake_at``)
  to the moment its body carried on after it (the body returns ``time.time()``). Median, p99
  and max;
- an idle worker's load on its store: Valkey commands a second (``INFO commandstats`` over
  IDLE seconds, less the bench's own), and SQLite statements a second (an in-process worker
  whose connection counts what it runs), with one triggered workflow served.

Not a test; record the output in docs/performance.md with the command:

    .venv/bin/python bench/fire_delay.py

``LOCKGATE_BENCH_VALKEY_URL`` points the Valkey figures at an existing server; otherwise one is
started on loopback.
"""

from __future__ import annotations

import asyncio
import math
import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from lockgate import SQLiteStore, Store, WorkflowClient, open_store
from lockgate.stores import TriggerPolicy
from lockgate.worker import WorkflowWorker

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE))

from _rated import debounced, sleeper  # noqa: E402
from valkey_server import ValkeyServer  # noqa: E402

WINDOW = 1.0
KEYS = 100
SLEEPS = 100
STAGGER = 0.05
IDLE = 10.0


@contextmanager
def worker(url: str, spec: str) -> Iterator[None]:
    """One ``lockgate worker`` process on default options serving ``spec`` (see _rated)."""
    env = {**os.environ, "BENCH_WORKFLOW": spec}
    command = [sys.executable, "-m", "lockgate", "worker", "_rated", "--store", url]
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(command, cwd=HERE, env=env, stdout=log, stderr=log)
        try:
            time.sleep(2.0)  # started and serving
            yield
        finally:
            proc.send_signal(signal.SIGTERM)
            if proc.wait(timeout=60) != 0:
                log.seek(0)
                sys.stderr.write(log.read().decode(errors="replace"))
                raise RuntimeError(f"the worker exited with {proc.returncode}")


def spread(values: list[float]) -> str:
    ordered = sorted(values)
    p99 = ordered[max(0, math.ceil(len(ordered) * 0.99) - 1)]
    return (
        f"median {statistics.median(ordered) * 1e3:6.1f} ms   p99 {p99 * 1e3:6.1f} ms   "
        f"max {ordered[-1] * 1e3:6.1f} ms   ({len(ordered)} runs)"
    )


async def debounce_delays(store: Store, name: str) -> list[float]:
    client = WorkflowClient(store)
    plan = sorted((n * STAGGER + m * 0.1, f"key{n}") for n in range(KEYS) for m in range(3))
    started = time.time()
    quiet_from: dict[str, float] = {}
    for offset, key in plan:
        await asyncio.sleep(max(0.0, started + offset - time.time()))
        quiet_from[key] = time.time()  # the store's time for it is no sooner
        await client.trigger(name, {"k": key})
    deadline = time.time() + 30
    while len(store.list_runs(name, limit=1000)[0]) < KEYS and time.time() < deadline:  # noqa: ASYNC110 - another process fires them
        await asyncio.sleep(0.05)
    runs, _ = store.list_runs(name, limit=1000)
    return [info.submitted_at - (quiet_from[info.params["key"]] + WINDOW) for info in runs]


async def sleep_delays(store: Store, name: str) -> list[float]:
    client = WorkflowClient(store)
    handles = []
    for _ in range(SLEEPS):
        handles.append(await client.submit(name, {"seconds": 1.0}))
        await asyncio.sleep(STAGGER)
    late = []
    for handle in handles:
        woke = await handle.result(timeout=30)
        (opened,) = [e for e in store.load_run(name, handle.run_id) if e.kind == "run:sleeping"]
        late.append(float(woke) - float(opened.payload["wake_at"]))
    return late


def raw_fire(store: Store) -> float:
    """Median seconds of the store's own fire of one due key (``due_triggers`` and
    ``fire_trigger``, called here): the least a fire delay can be."""
    name = f"bench_raw_{uuid.uuid4().hex[:8]}"
    policy = TriggerPolicy("debounce", window_seconds=0.001)
    for n in range(KEYS):
        store.trigger_event(name, f"key{n}", {"n": n}, policy=policy)
    time.sleep(0.01)
    took = []
    for _ in range(KEYS):
        started = time.perf_counter()
        (key,) = store.due_triggers(name, time.time(), 1)
        assert store.fire_trigger(name, key, policy=policy, due_by=time.time()) is not None
        took.append(time.perf_counter() - started)
    return statistics.median(took)


def delays(label: str, url: str, make: Callable[[], Store]) -> None:
    store = make()
    name = f"bench_debounce_{uuid.uuid4().hex[:8]}"
    debounced(name, WINDOW)
    with worker(url, f"debounced,{name},{WINDOW}"):
        fired = asyncio.run(debounce_delays(store, name))
    print(
        f"  {label:<12} Debounce(window_seconds={WINDOW:g}) fire delay: {spread(fired)}; "
        f"raw: the store's own fire of a due key takes {raw_fire(store) * 1e3:.1f} ms",
        flush=True,
    )
    name = f"bench_sleep_{uuid.uuid4().hex[:8]}"
    sleeper(name)
    with worker(url, f"sleeper,{name}"):
        late = asyncio.run(sleep_delays(store, name))
    print(f"  {label:<12} a 1 s sleep ends late by: {spread(late)}", flush=True)
    store.close()


def valkey_idle_commands(url: str) -> float:
    import redis

    namespace = f"idle{uuid.uuid4().hex[:8]}"
    target = f"{url}?namespace={namespace}"
    name = f"bench_idle_{uuid.uuid4().hex[:8]}"
    raw = redis.Redis.from_url(url)
    with worker(target, f"debounced,{name},{WINDOW}"):
        time.sleep(2.0)
        before = sum(int(s["calls"]) for s in raw.info("commandstats").values())
        time.sleep(IDLE)
        after = sum(int(s["calls"]) for s in raw.info("commandstats").values())
    raw.close()
    return (after - before - 1) / IDLE  # the second INFO counts itself


class CountingSQLiteStore(SQLiteStore):
    """An SQLiteStore counting the statements its connection runs."""

    statements = 0

    def _connect(self) -> sqlite3.Connection:
        conn = super()._connect()

        def count(_: str) -> None:
            CountingSQLiteStore.statements += 1

        conn.set_trace_callback(count)
        return conn


def sqlite_idle_statements(path: Path) -> float:
    store = CountingSQLiteStore(path)
    worker = WorkflowWorker(
        workflows=[debounced(f"bench_idle_{uuid.uuid4().hex[:8]}", WINDOW)], store=store
    )

    async def idle() -> float:
        task = asyncio.create_task(worker.run())
        await asyncio.sleep(2.0)
        before = CountingSQLiteStore.statements
        await asyncio.sleep(IDLE)
        counted = CountingSQLiteStore.statements - before
        worker.stop()
        await task
        return counted / IDLE

    try:
        return asyncio.run(idle())
    finally:
        store.close()


def main() -> None:
    given = os.environ.get("LOCKGATE_BENCH_VALKEY_URL")
    server = None if given else ValkeyServer().start()
    url = given or (server.url if server else "")
    try:
        with tempfile.TemporaryDirectory(dir=HERE.parent) as tmp:
            path = Path(tmp) / "fire.db"
            SQLiteStore(path).close()
            print("with default worker options, events and runs sent from another process:")
            delays("SQLiteStore", f"sqlite:///{path}", lambda: SQLiteStore(path))
            namespace = f"bench{uuid.uuid4().hex[:8]}"
            target = f"{url}?namespace={namespace}"
            delays("ValkeyStore", target, lambda: open_store(target))
            print("an idle worker serving one triggered workflow, default options:")
            print(
                f"  SQLiteStore  {sqlite_idle_statements(Path(tmp) / 'idle.db'):.1f} statements/s"
            )
            print(f"  ValkeyStore  {valkey_idle_commands(url):.1f} commands/s")
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
