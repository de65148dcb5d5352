"""How soon a SIGKILLed worker's run starts again on a live worker, with default options.

For each store (SQLite, Valkey, Valkey + a Kafka journal serving a bound topic), two
``lockgate worker`` processes with default options (default leases, presence and takeover)
serve ``_takeover.py``'s workflow. KILLS times (``LOCKGATE_BENCH_KILLS``, 10): a run's step
starts and holds; the worker running it is killed with SIGKILL; the figure is the seconds from
the kill to the step's next start on the other worker, as the step's own record says; a
fresh worker is started in the victim's place before the next kill.

Baseline: on the bound topic, the seconds from the same kill to the survivor's log saying the
victim's partitions were assigned to it (the consumer group's own rebalance: a member found
gone after its session timeout, 6 s), and the ratio of each store's takeover median to it.

About five minutes on two cores, most of it starting workers (``LOCKGATE_BENCH_STORES``, a
comma list of ``sqlite``, ``valkey``, ``kafka``, measures fewer). Starts a valkey-server on
loopback (``LOCKGATE_BENCH_VALKEY_URL`` for an existing one) and uses the broker of
``_broker.py``. Not a test; record the output in docs/performance.md with the
command:

    .venv/bin/python bench/takeover.py
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import IO

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from lockgate import WorkflowClient, open_store

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _broker import kafka_bootstrap  # noqa: E402
from _servers import valkey_url  # noqa: E402

KILLS = int(os.environ.get("LOCKGATE_BENCH_KILLS", "10"))
STORES = os.environ.get("LOCKGATE_BENCH_STORES", "sqlite,valkey,kafka").split(",")
PARTITIONS = 2
#: Seconds any one state the benchmark waits for may take.
DEADLINE = 120.0
HEALTH = re.compile(rb"health (?:endpoint )?on http://127\.0\.0\.1:(\d+)")
ASSIGNED = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) .*partition\(s\) \[[0-9, ]+\] assigned to", re.M
)


def wait(what: str, check: Callable[[], bool], timeout: float = DEADLINE) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting until {what}")
        time.sleep(0.02)


def readyz(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as answer:
            return int(answer.status) == 200
    except (urllib.error.URLError, OSError):
        return False


@dataclass
class Fleet:
    """``lockgate worker _takeover:SERVED`` processes on one store, with default options."""

    tmp: Path
    served: str
    store_url: str
    journal: str | None = None
    topic: str = ""
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    logs: list[IO[bytes]] = field(default_factory=list)

    @property
    def record(self) -> Path:
        return self.tmp / "record.txt"

    def log(self, index: int) -> Path:
        return self.tmp / f"worker-{index}.log"

    def start(self) -> subprocess.Popen[bytes]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("LOCKGATE_")}
        env.update(LOCKGATE_BENCH_RECORD=str(self.record), LOCKGATE_BENCH_TOPIC=self.topic)
        index = len(self.procs)
        log = self.log(index).open("wb")
        self.logs.append(log)
        command = ["worker", f"_takeover:{self.served}", "--store", self.store_url]
        if self.journal is not None:
            command += ["--journal", self.journal]
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "lockgate",
                *command,
                "--health-port",
                "0",
                "--log-level",
                "info",
            ],
            cwd=HERE,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        self.procs.append(proc)

        def ready() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"worker {proc.pid} exited: {self.log(index).read_text()}")
            found = HEALTH.search(self.log(index).read_bytes())
            return found is not None and readyz(int(found.group(1)))

        wait(f"worker {proc.pid} is ready", ready)
        return proc

    def starts(self) -> list[tuple[str, int, float]]:
        if not self.record.exists():
            return []
        rows = [line.split() for line in self.record.read_text().splitlines() if line]
        return [(run_id, int(pid), float(at)) for _, run_id, pid, at in rows]

    def assigned_after(self, at: float) -> float | None:
        """When a live worker's log first said it was assigned partitions after ``at``."""
        times = []
        for index, proc in enumerate(self.procs):
            if proc.poll() is not None:
                continue
            for stamp in ASSIGNED.findall(self.log(index).read_text(errors="replace")):
                when = datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()
                if when >= at - 0.001:
                    times.append(when)
        return min(times) if times else None

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(10)
        for log in self.logs:
            log.close()


def submit_plain(store_url: str) -> None:
    async def go() -> None:
        store = open_store(store_url)
        try:
            await WorkflowClient(store).submit("bench_takeover")
        finally:
            store.close()

    asyncio.run(go())


def one_kill(
    fleet: Fleet, queue_one: Callable[[], None], seen: set[str]
) -> tuple[float, float | None]:
    """Queue a run, kill the worker running its step, and time the step's next start (and,
    on a bound topic, the survivor's assignment of the victim's partitions) from the kill."""
    queue_one()
    wait("a new run starts its step", lambda: any(r not in seen for r, _, _ in fleet.starts()))
    run_id, pid, _ = next(s for s in fleet.starts() if s[0] not in seen)
    seen.add(run_id)
    (victim,) = [p for p in fleet.procs if p.pid == pid]
    killed_at = time.time()
    victim.send_signal(signal.SIGKILL)
    victim.wait(10)

    def again() -> list[float]:
        return [at for r, p, at in fleet.starts() if r == run_id and p != pid]

    wait(f"run {run_id} starts again", lambda: bool(again()))
    if fleet.journal is None:
        return again()[0] - killed_at, None
    # A victim that owned no partition leaves nothing to assign: no baseline from that kill.
    with contextlib.suppress(RuntimeError):
        wait("the group rebalances", lambda: fleet.assigned_after(killed_at) is not None, 30)
    assigned = fleet.assigned_after(killed_at)
    return again()[0] - killed_at, None if assigned is None else assigned - killed_at


def measure(fleet: Fleet, queue_one: Callable[[], None]) -> tuple[list[float], list[float]]:
    """KILLS kills: the takeover time of each, and (on a bound topic) the rebalance time."""
    fleet.start()
    fleet.start()
    takeovers: list[float] = []
    rebalances: list[float] = []
    seen: set[str] = set()
    for kill in range(KILLS):
        took, rebalanced = one_kill(fleet, queue_one, seen)
        takeovers.append(took)
        note = ", the victim owned no partition" if fleet.journal and rebalanced is None else ""
        if rebalanced is not None:
            rebalances.append(rebalanced)
            note = f", partitions assigned to the survivor after {rebalanced:.2f} s"
        print(f"  kill {kill + 1}/{KILLS}: step started again after {took:.2f} s{note}", flush=True)
        fleet.start()  # in the victim's place, for the next kill
    return takeovers, rebalances


def bound_records(bootstrap: str, topic: str) -> Callable[[], None]:
    producer = Producer({"bootstrap.servers": bootstrap})
    sent = iter(range(1_000_000))

    def queue_one() -> None:
        n = next(sent)
        producer.produce(topic, json.dumps({"n": n}).encode(), partition=n % PARTITIONS)
        assert producer.flush(30) == 0

    return queue_one


def summary(label: str, takeovers: list[float], baseline: float | None) -> str:
    median = statistics.median(takeovers)
    ratio = f"{median / baseline:.2f}" if baseline else "-"
    return f"{label:<22} {median:>8.2f} {max(takeovers):>8.2f} {ratio:>22}"


def main() -> None:
    results: dict[str, list[float]] = {}
    rebalance: list[float] = []
    with (
        valkey_url() as server,
        kafka_bootstrap() as bootstrap,
        tempfile.TemporaryDirectory() as scratch,
    ):
        sqlite = f"sqlite:///{Path(scratch) / 'sqlite' / 'lockgate.db'}"
        stores = [
            ("SQLite", sqlite, None),
            ("Valkey", f"{server}?namespace=b{uuid.uuid4().hex[:8]}", None),
            (
                "Valkey + Kafka bound",
                f"{server}?namespace=b{uuid.uuid4().hex[:8]}",
                f"kafka://{bootstrap}?topic_prefix=bt{uuid.uuid4().hex[:8]}",
            ),
        ]
        for label, url, journal in stores:
            if ("kafka" if journal else label.lower()) not in STORES:
                continue
            tmp = Path(scratch) / label.split()[0].lower() / uuid.uuid4().hex[:6]
            tmp.mkdir(parents=True)
            print(f"{label}: {KILLS} kills of 2 default workers ...", flush=True)
            queue: Callable[[], None]
            if journal is None:
                fleet = Fleet(tmp, "plain", url)
                queue = functools.partial(submit_plain, url)
            else:
                topic = f"bench-takeover-{uuid.uuid4().hex[:8]}"
                admin = AdminClient({"bootstrap.servers": bootstrap})
                admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
                fleet = Fleet(tmp, "bound", url, journal, topic)
                queue = bound_records(bootstrap, topic)
            try:
                results[label], rebalanced = measure(fleet, queue)
            finally:
                fleet.close()
            rebalance += rebalanced
    baseline = statistics.median(rebalance) if rebalance else None
    print()
    print(f"{'seconds, kill to':<22} {'median':>8} {'max':>8} {'ratio to the rebalance':>22}")
    for label, takeovers in results.items():
        print(summary(label, takeovers, baseline))
    if rebalance:
        print(f"{'group rebalance':<22} {baseline:>8.2f} {max(rebalance):>8.2f} {'1.00':>22}")
    print(f"({KILLS} kills each; the rebalance is the bound topic's: kill to partitions assigned)")


if __name__ == "__main__":
    main()
