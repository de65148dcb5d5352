"""One idempotent producer per process and configuration, shared by every journal store.

An idempotent producer's first send waits for the broker to give it a producer id (half a
second or more); Kafka's clients are made to be shared across threads, and one producer batches
every store's records together. A store that closes flushes it and leaves it open for the rest.

Each producer has one daemon thread of its own that serves its delivery reports as they come
(``poll``), so an append waits on its own records' reports only, woken the moment the last
lands, and many appends in flight cost no thread each polling.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Mapping
from typing import Any

with contextlib.suppress(ImportError):  # the extra may be missing: no store is made then
    from confluent_kafka import Producer

#: How long the producer holds a batch open for more records: appends of concurrent callers
#: share a batch (see docs/performance.md for the measurement behind the figure).
LINGER_MS = 2
_lock = threading.Lock()
_producers: dict[tuple[tuple[str, str], ...], Producer] = {}


def producer_config(common: Mapping[str, Any], delivery_timeout: float) -> dict[str, Any]:
    """The settings of a journal producer for ``common`` (bootstrap servers and any added
    settings): idempotent, ``acks=all``, giving up on a record after ``delivery_timeout``
    seconds."""
    return {
        "linger.ms": LINGER_MS,  # may be set otherwise; the guarantees below may not
        **common,
        "enable.idempotence": True,
        "acks": "all",
        "delivery.timeout.ms": int(delivery_timeout * 1000),
    }


def shared_producer(common: Mapping[str, Any], delivery_timeout: float) -> Producer:
    """The process's producer for ``common`` (see :func:`producer_config`)."""
    config = producer_config(common, delivery_timeout)
    key = tuple(sorted((str(k), str(v)) for k, v in config.items()))
    with _lock:
        producer = _producers.get(key)
        if producer is None:
            producer = _producers[key] = Producer(config)
            threading.Thread(
                target=_serve_reports,
                args=(producer,),
                name="lockgate-kafka-reports",
                daemon=True,
            ).start()
        return producer


def _serve_reports(producer: Producer) -> None:
    """Serve the producer's delivery reports (and its log lines) for the life of the process
    (the producer is kept for it)."""
    while True:
        producer.poll(0.05)
