"""A short tour on a real store: five orders in an SQLite file, served by ``lockgate worker``
processes. The first worker dies inside a step; a second takes its runs over once their leases
lapse and replays their journals, so finished steps are not run again. One order waits for an
approval signal, one is cancelled while it sleeps. The runs' states are shown as they change."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections import Counter
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import parse_qsl, quote, urlencode, urlsplit

from lockgate._errors import ConfigurationError
from lockgate._output import event_detail
from lockgate.client._client import WorkflowClient
from lockgate.client._handle import RunHandle
from lockgate.demo._board import Board
from lockgate.demo._orders import CRASH_EXIT, DEMO_DIR_ENV
from lockgate.journal._events import RunStatus
from lockgate.stores._base import Store
from lockgate.stores.opener._open import open_store

ORDERS: dict[str, dict[str, Any]] = {
    "A-100": {"items": 2, "amount": 1200},
    "A-101": {"items": 1, "amount": 9900},
    "A-102": {"items": 3, "amount": 4200, "crash": True},
    "A-103": {"items": 1, "amount": 800},
    "A-104": {"items": 5, "amount": 2500},
}
APPROVE, CRASH, CANCEL = "A-101", "A-102", "A-103"
#: Short leases so the demo's lost worker is noticed in seconds rather than the default 30.
STORE_OPTIONS = {"lock_ttl": "2", "heartbeat_interval": "0.5", "synchronous": "normal"}
WORKER_FLAGS = (
    "--concurrency=8",
    "--timer-interval=0.2",
    "--orphan-scan-interval=0.5",
    "--shutdown-grace=2",
)
DEADLINE_S = 40.0
TERMINAL = frozenset(str(s) for s in RunStatus if s.is_terminal)


def demo_url(store_url: str | None, folder: Path) -> str:
    """The demo's store URL: ``store_url`` or a file in ``folder``, with short leases."""
    base = store_url or f"sqlite:///{quote(str(folder / 'demo.db'))}"
    parts = urlsplit(base)
    if parts.scheme != "sqlite":
        raise ConfigurationError(f"the demo runs on an sqlite:/// store, not {base!r}")
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    query = {**STORE_OPTIONS, **query}
    # Not urlunsplit: it folds the empty host of sqlite:////abs into sqlite://abs.
    return base.partition("?")[0] + "?" + urlencode(query)


class Tour:
    """The demo's story, told on ``board`` while it drives ``store``."""

    def __init__(self, url: str, folder: Path, board: Board) -> None:
        self.url = url
        self.folder = folder
        self.board = board
        self.workers: list[subprocess.Popen[bytes]] = []
        self.handles: dict[str, RunHandle] = {}
        self.done: set[str] = set()

    def start_worker(self) -> subprocess.Popen[bytes]:
        number = len(self.workers) + 1
        log = open(self.folder / f"worker-{number}.log", "wb")  # noqa: SIM115 - the child owns it
        command = [sys.executable, "-m", "lockgate", "worker", "lockgate.demo._orders"]
        process = subprocess.Popen(
            [*command, "--store", self.url, *WORKER_FLAGS],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, DEMO_DIR_ENV: str(self.folder)},
        )
        log.close()
        self.workers.append(process)
        self.board.say(f"worker {number} started (pid {process.pid})")
        return process

    def stop_workers(self) -> None:
        for process in self.workers:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.workers:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def rows(self, store: Store) -> list[tuple[str, ...]]:
        rows: list[tuple[str, ...]] = []
        for order, handle in self.handles.items():
            info = store.get_run(handle.name, handle.run_id)
            last = store.get_last_event(handle.name, handle.run_id)
            status = str(info.status) if info else "?"
            what = "-" if last is None else f"{last.kind} {event_detail(last)}".strip()
            if last is not None and last.kind == "run:init":
                what = "run:init (queued)"
            rows.append((order, status, what[:60], handle.run_id[:8]))
        return rows

    async def tour(self) -> int:
        store = open_store(self.url)
        try:
            return await self._tour(store)
        finally:
            store.close()

    async def _tour(self, store: Store) -> int:
        say = self.board.say
        client = WorkflowClient(store)
        say(f"lockgate demo: orders in the SQLite file {getattr(store, 'path', self.url)}")
        for order, params in ORDERS.items():
            self.handles[order] = await client.submit("demo_order", {"order_id": order, **params})
        say(f"submitted {len(ORDERS)} orders with no worker running: they wait in the file")
        self.board.show(self.rows(store))
        first = self.start_worker()
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline:
            rows = self.rows(store)
            self.board.show(rows)
            statuses = {row[0]: row[1] for row in rows}
            if all(s in TERMINAL for s in statuses.values()):
                return self._summary(store)
            await self._react(client, first, statuses)
            await asyncio.sleep(0.1)
        say(f"the demo did not finish within {DEADLINE_S:g}s; worker logs follow")
        self._dump_logs()
        return 1

    async def _react(
        self, client: WorkflowClient, first: subprocess.Popen[bytes], statuses: dict[str, str]
    ) -> None:
        say = self.board.say
        if "crash" not in self.done and first.poll() is not None:
            self.done.add("crash")
            code = first.returncode
            why = "inside charge_card of " + CRASH if code == CRASH_EXIT else "unexpectedly"
            say(f"worker 1 died (exit {code}) {why}; the runs it held keep their journals")
            self.start_worker()
            say("worker 2 takes over each run once its lease (2s) lapses, replaying its journal")
        if "approve" not in self.done and statuses.get(APPROVE) == "signal_waiting":
            self.done.add("approve")
            await self.handles[APPROVE].signal("approve", {"by": "dana"}, signal_id="ok-A-101")
            say(f"{APPROVE} is over 5000 and waits for approval: sent signal 'approve'")
        if "cancel" not in self.done and statuses.get(CANCEL) == "sleeping":
            self.done.add("cancel")
            await self.handles[CANCEL].cancel(reason="customer changed their mind")
            say(f"{CANCEL} cancelled while it sleeps: a worker ends it at once")

    def _summary(self, store: Store) -> int:
        say = self.board.say
        say("every run has ended; stopping the worker with SIGTERM")
        self.stop_workers()
        self.board.close()
        effects = self._effects()
        lines = ["", "step executions (from each step's side effect, across both workers):"]
        lines.append(f"  {'ORDER':<6} {'reserve_stock':>13} {'charge_card':>11} {'ship':>4}")
        for order in ORDERS:
            counts = [effects[(order, s)] for s in ("reserve_stock", "charge_card", "ship")]
            lines.append(f"  {order:<6} {counts[0]:>13} {counts[1]:>11} {counts[2]:>4}")
        ok = self._as_expected(store, effects)
        lines += ["", *self._lessons(ok)]
        print("\n".join(lines), flush=True)
        return 0 if ok else 1

    def _effects(self) -> Counter[tuple[str, str]]:
        path = self.folder / "effects.log"
        lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
        return Counter((line.split()[0], line.split()[1]) for line in lines if line.strip())

    def _as_expected(self, store: Store, effects: Counter[tuple[str, str]]) -> bool:
        for order, handle in self.handles.items():
            info = store.get_run(handle.name, handle.run_id)
            wanted = RunStatus.CANCELLED if order == CANCEL else RunStatus.COMPLETE
            if info is None or info.status != wanted:
                return False
        shipped = all(effects[(o, "ship")] == (0 if o == CANCEL else 1) for o in ORDERS)
        return shipped and effects[(CRASH, "reserve_stock")] == 1

    def _lessons(self, ok: bool) -> list[str]:
        if not ok:
            self._dump_logs()
            return ["UNEXPECTED: a run ended otherwise, or a journaled step ran again"]
        keys = self._charge_keys()
        again = sorted(order for order, used in keys.items() if len(used) > 1)
        same = all(len(set(used)) == 1 for used in keys.values())
        return crash_lessons(again, same=same)

    def _charge_keys(self) -> dict[str, list[str]]:
        """The idempotency key each execution of charge_card passed, by order."""
        path = self.folder / "effects.log"
        keys: dict[str, list[str]] = {}
        for line in path.read_text(encoding="utf-8").splitlines():
            order, step_name, _, key = line.split()
            if step_name == "charge_card":
                keys.setdefault(order, []).append(key)
        return keys

    def _dump_logs(self) -> None:
        for log in sorted(self.folder.glob("worker-*.log")):
            tail = log.read_text(encoding="utf-8", errors="replace").splitlines()[-15:]
            print(f"--- {log.name}", *tail, sep="\n", file=sys.stderr)


def crash_lessons(again: list[str], *, same: bool) -> list[str]:
    """The closing lines about the crash: ``again`` are the orders whose charge_card ran a
    second time, ``same`` whether every one of them passed the same idempotency key."""
    if len(again) > 1:
        orders = f"{', '.join(again[:-1])} and {again[-1]} were"
        taken = "them over and replayed their journals"
    else:
        orders = f"{again[0] if again else 'an order'} was"
        taken = "it over and replayed its journal"
    key = "the same" if same else "a DIFFERENT (!)"
    text = (
        f"Worker 1 died while {orders} inside charge_card. Worker 2 took {taken}: "
        f"reserve_stock had finished and was journaled, so it did not run again; charge_card "
        f"had not, so it ran a second time, with {key} ctx.idempotency_key: a payment API "
        f"given that key charges once. Every order that was not cancelled shipped exactly once."
    )
    return textwrap.wrap(text, width=88)


def run_demo(store_url: str | None = None, *, live: bool | None = None) -> int:
    """Run the tour. ``store_url`` (an ``sqlite:///`` URL) keeps its runs after it ends;
    ``live`` forces the live table on or off (default: on when stdout is a terminal)."""
    stream: TextIO = sys.stdout
    folder = Path(tempfile.mkdtemp(prefix="lockgate-demo-"))
    board = Board(stream, live=stream.isatty() if live is None else live)
    tour: Tour | None = None
    try:
        tour = Tour(demo_url(store_url, folder), folder, board)
        return asyncio.run(tour.tour())
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    finally:
        if tour is not None:
            tour.stop_workers()
        board.close()
        shutil.rmtree(folder, ignore_errors=True)


def main() -> int:
    return run_demo()
