"""The worker's loop over bound topics: with a Kafka journal, one
:class:`~lockgate.streams.bound.BoundConsumer` per served workflow bound to a topic, each on a
thread of its own, for as long as the worker serves."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from lockgate._errors import ConfigurationError, StoreUnavailable
from lockgate.stores._shards import shard_for
from lockgate.stores.kafka import KafkaEventLogStore
from lockgate.streams.bound import BoundConsumer, partition_shard_key
from lockgate.worker._consumer_threads import Launch
from lockgate.worker._runtime import Runtime


def check_bindings(rt: Runtime, journal: KafkaEventLogStore | None) -> None:
    """Refuse to serve a bound workflow without a Kafka journal to reach the broker through.
    (Two workflows may be bound to one topic: each has a consumer group of its own.)"""
    for name, spec in rt.specs.items():
        if spec.topic is not None and journal is None:
            raise ConfigurationError(
                f"workflow {name!r} is bound to Kafka topic {spec.topic.name!r}: serve it on a "
                f"store with a Kafka journal (lockgate worker ... --journal kafka://HOST:PORT)"
            )


async def check_bound_topics(rt: Runtime, journal: KafkaEventLogStore | None) -> None:
    """Refuse to start serving a workflow bound to a topic the brokers do not have
    (:class:`ConfigurationError`, naming the command that creates it): lockgate never creates a
    user's topic, and a worker waiting for one that nobody is going to make would look as if it
    served. A broker that does not answer now is no reason to stop: the consumers wait for it,
    and say so, as they do whenever Kafka is away."""
    from lockgate.streams._topic_admin import (
        admin_for_journal,
        create_command,
        missing_bound_topics,
    )

    bound = {name: spec.topic.name for name, spec in rt.specs.items() if spec.topic is not None}
    if journal is None or not bound:
        return
    admin = admin_for_journal(journal)
    try:
        missing = await asyncio.to_thread(missing_bound_topics, admin, bound)
    except StoreUnavailable as exc:
        logging.getLogger("lockgate.worker").warning(
            "could not check the bound topics at start: %s", exc
        )
        return
    if missing:
        workflow, topic = missing[0]
        others = sorted({t for _, t in missing[1:]} - {topic})
        more = f"; missing too: {', '.join(map(repr, others))}" if others else ""
        raise ConfigurationError(
            f"topic {topic!r} does not exist: create it with `{create_command(admin, topic)}` "
            f"(workflow {workflow!r} is bound to it; N is how many workers can share it){more}"
        )


async def serve_bound_topics(rt: Runtime, journal: KafkaEventLogStore) -> None:
    """Serve the topic of every bound workflow of ``rt`` until the worker stops. Submits wake
    the workflow's claim loop, the runs this worker finishes are told to their consumer, and
    the shards of the partitions each consumer owns are the ones its claims try first
    (``Runtime.owned``)."""
    launch = Launch(rt, "bound")
    consumers = []
    for name, spec in rt.specs.items():
        if spec.topic is None:
            continue
        consumer = BoundConsumer(
            rt.store,
            journal,
            spec,
            worker_id=rt.worker_id,
            clock=rt.clock,
            on_submitted=launch.woke(name),
            on_assigned=launch.owned(name, _shards_of(rt, spec.topic.name)),
        )
        rt.run_ended[name] = consumer.ended
        consumers.append(consumer)
    try:
        await launch.serve(consumers)
    finally:
        for consumer in consumers:
            rt.run_ended.pop(consumer.spec.name, None)


def _shards_of(rt: Runtime, topic: str) -> Callable[[list[int]], list[int]]:
    """The shards of ``rt``'s store that the runs of partitions of ``topic`` are in."""
    count = getattr(rt.store, "shard_count", 1)
    shards = count if isinstance(count, int) and count > 1 else 1

    def of(partitions: list[int]) -> list[int]:
        return sorted({shard_for(partition_shard_key(topic, p), shards) for p in partitions})

    return of
