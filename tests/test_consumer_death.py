"""A worker whose trigger-topic consumer dies of a bug (a key function raising what no record
explains: a ``BaseException``) stops at once with one error line and ``ConsumerDied``, rather
than serve on with the topic unread. ``test_kafka_bound_poison_processes`` shows the same for a
bound topic with a ``lockgate worker`` process (exit 70)."""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Producer

from lockgate import Collect, ConsumerDied, WorkflowContext, open_store, workflow
from lockgate.stores import CompositeStore, KafkaEventLogStore
from lockgate.streams import trigger_topic
from lockgate.streams.triggers._produce import prepare_trigger_topics
from lockgate.worker import WorkerOptions, WorkflowWorker
from lockgate.workflow._spec import spec_of
from valkey_server import shared_url


class KeyFunctionBroke(BaseException):
    """No ``Exception``: nothing a consumer may set aside as one record's fault."""


def breaking_key(event: dict[str, Any]) -> str:
    if event.get("break"):
        raise KeyFunctionBroke("the key function broke")
    return str(event["k"])


@workflow(name="kcd_trigger", trigger=Collect(key=breaking_key, max_events=1, window_seconds=60))
async def kcd_trigger(
    ctx: WorkflowContext, key: str, events: list[dict[str, Any]], count: int
) -> int:
    return count


@pytest.fixture
def composite(kafka_bootstrap: str) -> Iterator[CompositeStore]:
    store = open_store(
        f"{shared_url()}?namespace=kcd{uuid.uuid4().hex[:8]}",
        journal=f"kafka://{kafka_bootstrap}?topic_prefix=kcd{uuid.uuid4().hex[:8]}",
    )
    assert isinstance(store, CompositeStore)
    yield store
    store.close()


async def test_a_trigger_consumer_dying_of_a_bug_stops_the_worker_with_one_error(
    composite: CompositeStore, kafka_bootstrap: str, caplog: pytest.LogCaptureFixture
) -> None:
    journal = composite.events
    assert isinstance(journal, KafkaEventLogStore)
    topic = trigger_topic(journal.topic_prefix, spec_of(kcd_trigger))
    prepare_trigger_topics(journal, topic)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    producer.produce(topic, value=json.dumps({"k": "a", "break": True}).encode(), partition=0)
    assert producer.flush(30) == 0
    worker = WorkflowWorker(
        workflows=[kcd_trigger],
        store=composite,
        worker_id="kcd-w1",
        options=WorkerOptions(claim_poll_interval=0.01, shutdown_grace=30.0),
    )
    caplog.set_level(logging.INFO)
    with pytest.raises(ConsumerDied) as died:
        # Well inside the shutdown grace: the stop is at once, not a drain.
        await asyncio.wait_for(worker.run(), timeout=25)
    assert died.value.topic == topic
    assert died.value.role == "trigger"
    assert "KeyFunctionBroke: the key function broke" in str(died.value)
    assert "in breaking_key" in str(died.value)  # where it was raised
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1, [r.getMessage() for r in errors]
    assert "trigger topic consumer" in errors[0].getMessage()
    assert errors[0].exc_info is None
