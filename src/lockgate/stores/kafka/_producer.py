"""One idempotent producer per process and configuration, shared by every journal store.

An idempotent producer's first send waits for the broker to give it a producer id (half a
second or more); Kafka's clients are made to be shared across threads, and one producer batches
every store's records together. Stores take a producer with :func:`shared_producer` and give it
back with :func:`release_producer`; when the last store of a configuration gives it back, the
producer is flushed and let go, so a process that closed its stores keeps no client (nor its
reconnect attempts and their log lines) for a cluster it no longer uses.

Each producer has one daemon thread of its own that serves its delivery reports as they come
(``poll``), so an append waits on its own records' reports only, woken the moment the last
lands, and many appends in flight cost no thread each polling.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

with contextlib.suppress(ImportError):  # the extra may be missing: no store is made then
    from confluent_kafka import Producer

#: How long the producer holds a batch open for more records: appends of concurrent callers
#: share a batch (see docs/performance.md for the measurement behind the figure).
LINGER_MS = 1
_lock = threading.Lock()


@dataclass
class _Shared:
    producer: Producer
    users: int = 0
    stopped: threading.Event = field(default_factory=threading.Event)


_producers: dict[tuple[tuple[str, str], ...], _Shared] = {}


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


def _key(config: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((str(k), str(v)) for k, v in config.items()))


def shared_producer(common: Mapping[str, Any], delivery_timeout: float) -> Producer:
    """The process's producer for ``common`` (see :func:`producer_config`), taken by one more
    store: give it back with :func:`release_producer`."""
    config = producer_config(common, delivery_timeout)
    with _lock:
        shared = _producers.get(_key(config))
        if shared is None:
            shared = _producers[_key(config)] = _Shared(Producer(config))
            threading.Thread(
                target=_serve_reports,
                args=(shared,),
                name="lockgate-kafka-reports",
                daemon=True,
            ).start()
        shared.users += 1
        return shared.producer


def release_producer(producer: Producer, timeout: float) -> None:
    """A store is done with ``producer``: flush it (up to ``timeout`` seconds), and when no
    store uses it any more, stop serving its reports and let it go."""
    producer.flush(timeout)
    with _lock:
        for key, shared in list(_producers.items()):
            if shared.producer is producer:
                shared.users -= 1
                if shared.users <= 0:
                    del _producers[key]
                    shared.stopped.set()
                return


def _serve_reports(shared: _Shared) -> None:
    """Serve the producer's delivery reports (and its log lines) until it is let go."""
    while not shared.stopped.is_set():
        shared.producer.poll(0.05)
