"""A submit on the Valkey + Kafka composite copies the run's opening events as the submit script
answered them, without reading the outbox back: the topic alone must then hold exactly what the
outbox holds (every event, its ``run_seq``, payload and headers), once per ``run_seq``, and an
idempotent repeat or a control held for the id must still reach the topic."""

from __future__ import annotations

import collections
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from lockgate import EventKind
from lockgate.stores import CompositeStore, KafkaEventLogStore, ValkeyLifecycleStore
from valkey_server import shared_url

Make = Callable[..., CompositeStore]
NAME = "csub_flow"


@pytest.fixture
def composites(kafka_bootstrap: str) -> Iterator[Make]:
    """Composites on one Valkey namespace and one topic, as separate processes would have."""
    namespace, prefix = f"cs{uuid.uuid4().hex[:10]}", f"cs{uuid.uuid4().hex[:10]}"
    made: list[Any] = []

    def make(shard_count: int = 1) -> CompositeStore:
        lifecycle = ValkeyLifecycleStore(shared_url(), namespace=namespace, shard_count=shard_count)
        events = KafkaEventLogStore(kafka_bootstrap, topic_prefix=prefix, shard_count=shard_count)
        made.append(CompositeStore(lifecycle=lifecycle, events=events))
        return made[-1]

    yield make
    for store in made:
        store.close()


def _lifecycle(store: CompositeStore) -> ValkeyLifecycleStore:
    assert isinstance(store.lifecycle, ValkeyLifecycleStore)
    return store.lifecycle


def _topic_alone(store: CompositeStore) -> KafkaEventLogStore:
    """A journal store on the same topic with no lifecycle and no memory: what a reader of
    the raw topic finds."""
    log = store.events
    assert isinstance(log, KafkaEventLogStore)
    return KafkaEventLogStore(
        log.bootstrap_servers,
        topic_prefix=log.topic.removesuffix(".journal"),
        shard_count=log.shard_count,
    )


def _counted(lifecycle: ValkeyLifecycleStore) -> collections.Counter[str]:
    """Every request the lifecycle makes from here on, by what it is."""
    asked: collections.Counter[str] = collections.Counter()
    blocking = lifecycle._io

    def counted(call: Any, what: str) -> Any:
        asked[what] += 1
        return blocking(call, what)

    lifecycle._io = counted  # type: ignore[method-assign]
    return asked


@pytest.mark.parametrize("shard_count", [1, 4])
def test_a_submit_copies_its_opening_events_as_the_outbox_keeps_them(
    composites: Make, shard_count: int
) -> None:
    store = composites(shard_count)
    asked = _counted(_lifecycle(store))
    # An idempotency key (journaled in run:init's headers) and a delayed start (a second
    # opening event, run:sleeping): the copy must carry both as the script kept them.
    run_id = store.submit_run(
        NAME,
        "r-1",
        {"n": 1, "x": 0.1, "s": "é"},
        idempotency_key="key-1",
        start_at=time.time() + 3600,
    )
    assert run_id == "r-1"
    assert "read_page" not in asked  # the outbox was not read back
    outbox = _lifecycle(store).events_after(NAME, "r-1", 0)
    assert [e.kind for e in outbox] == [EventKind.RUN_INIT, EventKind.RUN_SLEEPING]
    alone = _topic_alone(store)
    try:
        assert alone.load_run(NAME, "r-1") == outbox
    finally:
        alone.close()
    # Another process (memory of nothing) reads the same journal, starting where it is kept.
    assert composites(shard_count).load_run(NAME, "r-1") == outbox


def test_an_idempotent_repeat_copies_nothing_new_and_answers_the_first_run(
    composites: Make,
) -> None:
    first, again = composites(), composites()
    assert first.submit_run(NAME, "r-1", {"n": 1}, idempotency_key="k") == "r-1"
    assert again.submit_run(NAME, "r-2", {"n": 1}, idempotency_key="k") == "r-1"
    alone = _topic_alone(first)
    try:
        journal = alone.load_run(NAME, "r-1")
        assert alone.load_run(NAME, "r-2") == []
    finally:
        alone.close()
    assert [e.run_seq for e in journal] == [1]
    assert journal == _lifecycle(first).events_after(NAME, "r-1", 0)


def test_a_cancel_held_for_the_id_reaches_the_topic_with_the_opening_events(
    composites: Make,
) -> None:
    """The submit latches a cancel asked before it: the outbox holds more than the opening
    events, so the copy is made from the outbox as after any write, the cancel included."""
    store = composites(4)
    store.request_cancel(NAME, "r-held", detail={"by": "parent"})
    store.submit_run(NAME, "r-held", {})
    outbox = _lifecycle(store).events_after(NAME, "r-held", 0)
    assert [e.kind for e in outbox] == [EventKind.RUN_INIT, EventKind.RUN_CANCEL]
    alone = _topic_alone(store)
    try:
        assert alone.load_run(NAME, "r-held") == outbox
    finally:
        alone.close()
