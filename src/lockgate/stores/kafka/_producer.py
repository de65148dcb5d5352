"""One idempotent producer per process and configuration, shared by every journal store.

An idempotent producer's first send waits for the broker to give it a producer id (half a
second or more); Kafka's clients are made to be shared across threads, and one producer batches
every store's records together. A store that closes flushes it and leaves it open for the rest.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Mapping
from typing import Any

with contextlib.suppress(ImportError):  # the extra may be missing: no store is made then
    from confluent_kafka import Producer

_lock = threading.Lock()
_producers: dict[tuple[tuple[str, str], ...], Producer] = {}


def producer_config(common: Mapping[str, Any], delivery_timeout: float) -> dict[str, Any]:
    """The settings of a journal producer for ``common`` (bootstrap servers and any added
    settings): idempotent, ``acks=all``, giving up on a record after ``delivery_timeout``
    seconds."""
    return {
        **common,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 2,  # appends of concurrent callers share a batch
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
        return producer
