"""The Kafka broker a benchmark measures: ``LOCKGATE_BENCH_KAFKA_BOOTSTRAP`` or
``LOCKGATE_TEST_KAFKA_BOOTSTRAP`` when set (an existing cluster), else a single-node broker
started here with ``tools/kafka_broker.py`` and stopped at the end. Says which on stdout."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))

import kafka_broker

BENCH_BOOTSTRAP_ENV = "LOCKGATE_BENCH_KAFKA_BOOTSTRAP"


@contextmanager
def kafka_bootstrap() -> Iterator[str]:
    for env in (BENCH_BOOTSTRAP_ENV, kafka_broker.BOOTSTRAP_ENV):
        given = os.environ.get(env)
        if given:
            print(f"Kafka: the existing broker at {given} ({env})", flush=True)
            yield given
            return
    broker = kafka_broker.KafkaBroker()
    print(f"Kafka: starting a broker with tools/kafka_broker.py in {broker.dir} ...", flush=True)
    broker.start()
    print(f"Kafka: the broker started here at {broker.bootstrap}", flush=True)
    try:
        yield broker.bootstrap
    finally:
        broker.close()
