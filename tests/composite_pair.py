"""Composites (Valkey lifecycle + Kafka journal) on one namespace and one topic, as separate
processes would have them, and a count of the Valkey requests one of them makes: what the
composite's copy tests share."""

from __future__ import annotations

import collections
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from lockgate.stores import CompositeStore, KafkaEventLogStore, ValkeyLifecycleStore
from valkey_server import shared_url

Make = Callable[..., CompositeStore]


def composites_made(kafka_bootstrap: str, *, shard_count: int = 1) -> Iterator[Make]:
    """A fixture's body: yields ``make(shard_count=...)``, each call a new composite on the
    same namespace and topic; closes them all at the end."""
    namespace, prefix = f"cp{uuid.uuid4().hex[:10]}", f"cp{uuid.uuid4().hex[:10]}"
    made: list[CompositeStore] = []

    def make(shard_count: int = shard_count) -> CompositeStore:
        lifecycle = ValkeyLifecycleStore(shared_url(), namespace=namespace, shard_count=shard_count)
        events = KafkaEventLogStore(kafka_bootstrap, topic_prefix=prefix, shard_count=shard_count)
        made.append(CompositeStore(lifecycle=lifecycle, events=events))
        return made[-1]

    yield make
    for store in made:
        store.close()


def lifecycle_of(store: CompositeStore) -> ValkeyLifecycleStore:
    assert isinstance(store.lifecycle, ValkeyLifecycleStore)
    return store.lifecycle


def counted_requests(lifecycle: ValkeyLifecycleStore) -> collections.Counter[str]:
    """Every request the lifecycle makes from here on (its blocking client), by what it is."""
    asked: collections.Counter[str] = collections.Counter()
    blocking = lifecycle._io

    def counted(call: Any, what: str) -> Any:
        asked[what] += 1
        return blocking(call, what)

    lifecycle._io = counted  # type: ignore[method-assign]
    return asked
