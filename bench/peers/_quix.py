"""Quix Streams' side: ``quix_app.py`` (quixstreams 3.28.1, in its own venv) reading a fresh
topic of the collect work each repeat and writing each window's event ids to a fresh output
topic. The bench reads the output with ``isolation.level=read_committed`` (what the
transactions committed, nothing else) to time it and check it."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

from _install import python_peer
from _procs import Started, scratch
from _timing import exactly_once, span_rate, wait_completion
from _work import (
    COLLECT_PARTITIONS,
    WINDOW,
    Outcome,
    Scale,
    create_topic,
    fresh_name,
    produce_events,
)
from confluent_kafka import Consumer

HERE = Path(__file__).resolve().parent
VERSION = "3.28.1"

DURABILITY = (
    "Kafka transactions (exactly-once: the output, the changelog of its RocksDB window "
    "state and the consumer offsets committed together every 5 s, Quix's default "
    "commit_interval), acks=all on one broker, Kafka's default flush (no fsync per write)"
)


class Quix:
    def __init__(self) -> None:
        self.python = python_peer("quixstreams", VERSION, [f"quixstreams=={VERSION}"])

    def collect(self, bootstrap: str, scale: Scale) -> Outcome:
        topic = fresh_name("quix")
        output = f"{topic}-windows"
        create_topic(bootstrap, topic, COLLECT_PARTITIONS)
        create_topic(bootstrap, output, 1)
        produce_events(bootstrap, topic, scale)
        with scratch("quix") as work:
            reader = Consumer(
                {
                    "bootstrap.servers": bootstrap,
                    "group.id": f"peers-read-{uuid.uuid4().hex}",
                    "isolation.level": "read_committed",
                    "auto.offset.reset": "earliest",
                    "enable.auto.commit": False,
                }
            )
            reader.subscribe([output])
            seen: list[int] = []
            emitted: list[float] = []
            visible: list[float] = []

            def completed() -> int:
                for message in reader.consume(10_000, timeout=0.01):
                    if message.error() is None:
                        window = json.loads(message.value())
                        seen.extend(window["ids"])
                        emitted.append(window["at"])
                if len(seen) >= scale.events and not visible:
                    visible.append(time.time())
                return len(seen)

            serving = Started(
                "quix",
                [str(self.python), str(HERE / "quix_app.py")],
                work / "quix.log",
                BENCH_BOOTSTRAP=bootstrap,
                BENCH_GROUP=topic,
                BENCH_TOPIC=topic,
                BENCH_OUTPUT=output,
                BENCH_STATE=str(work / "state"),
            )
            try:
                try:
                    polled = wait_completion(completed, scale.events, serving.alive)
                except Exception:
                    print(serving.tail(), flush=True)
                    raise
                # A window committed past the last event would be a repeat: read on for 2 s.
                until = time.monotonic() + 2
                while time.monotonic() < until:
                    completed()
                line, exact = exactly_once(seen, scale.events, "events", "committed window")
                # The same span ending when the bench saw the last window committed instead.
                span = visible[0] - min(emitted)
                committed = (len(emitted) - 1) * WINDOW / span if span > 0 else 0.0
                note = (
                    f"from the first window's emission to the bench seeing the last one "
                    f"committed: {committed:,.1f} events/s"
                )
                return Outcome(span_rate(emitted, WINDOW), polled, line, exact, note)
            finally:
                serving.stop()
                reader.close()
