"""A submit on the Valkey + Kafka composite copies the run's opening events as the submit script
answered them, without reading the outbox back: the topic alone must then hold exactly what the
outbox holds (every event, its ``run_seq``, payload and headers), once per ``run_seq``, and an
idempotent repeat or a control held for the id must still reach the topic."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from composite_pair import Make, composites_made, counted_requests, lifecycle_of
from lockgate import EventKind, RunEvent
from lockgate.stores import CompositeStore, KafkaEventLogStore

NAME = "csub_flow"


@pytest.fixture
def composites(kafka_bootstrap: str) -> Iterator[Make]:
    yield from composites_made(kafka_bootstrap)


def on_topic_alone(store: CompositeStore, run_id: str) -> list[RunEvent]:
    """``run_id``'s journal as a journal store on the same topic with no lifecycle and no
    memory reads it: what a reader of the raw topic finds."""
    log = store.events
    assert isinstance(log, KafkaEventLogStore)
    alone = KafkaEventLogStore(
        log.bootstrap_servers,
        topic_prefix=log.topic.removesuffix(".journal"),
        shard_count=log.shard_count,
    )
    try:
        return alone.load_run(NAME, run_id)
    finally:
        alone.close()


@pytest.mark.parametrize("shard_count", [1, 4])
def test_a_submit_copies_its_opening_events_as_the_outbox_keeps_them(
    composites: Make, shard_count: int
) -> None:
    store = composites(shard_count)
    asked = counted_requests(lifecycle_of(store))
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
    outbox = lifecycle_of(store).events_after(NAME, "r-1", 0)
    assert [e.kind for e in outbox] == [EventKind.RUN_INIT, EventKind.RUN_SLEEPING]
    assert on_topic_alone(store, "r-1") == outbox
    # Another process (memory of nothing) reads the same journal, starting where it is kept.
    assert composites(shard_count).load_run(NAME, "r-1") == outbox


def test_an_idempotent_repeat_copies_nothing_new_and_answers_the_first_run(
    composites: Make,
) -> None:
    first, again = composites(), composites()
    assert first.submit_run(NAME, "r-1", {"n": 1}, idempotency_key="k") == "r-1"
    assert again.submit_run(NAME, "r-2", {"n": 1}, idempotency_key="k") == "r-1"
    journal = on_topic_alone(first, "r-1")
    assert on_topic_alone(first, "r-2") == []
    assert [e.run_seq for e in journal] == [1]
    assert journal == lifecycle_of(first).events_after(NAME, "r-1", 0)


def test_a_cancel_held_for_the_id_reaches_the_topic_with_the_opening_events(
    composites: Make,
) -> None:
    """The submit latches a cancel asked before it: the outbox holds more than the opening
    events, so the copy is made from the outbox as after any write, the cancel included."""
    store = composites(4)
    store.request_cancel(NAME, "r-held", detail={"by": "parent"})
    store.submit_run(NAME, "r-held", {})
    outbox = lifecycle_of(store).events_after(NAME, "r-held", 0)
    assert [e.kind for e in outbox] == [EventKind.RUN_INIT, EventKind.RUN_CANCEL]
    assert on_topic_alone(store, "r-held") == outbox
