"""The worker's loop over bound topics: with a Kafka journal, one
:class:`~lockgate.streams.bound.BoundConsumer` per served workflow bound to a topic, each on a
thread of its own, for as long as the worker serves."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable

from lockgate._errors import ConfigurationError, StoreUnavailable
from lockgate.stores._shards import shard_for
from lockgate.stores.kafka import KafkaEventLogStore
from lockgate.streams.bound import BoundConsumer, partition_shard_key
from lockgate.worker._consumer_threads import on_thread, serve_consumers, soon
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
    loop = asyncio.get_running_loop()
    stop = threading.Event()
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
            on_submitted=soon(loop, rt.wakeup(f"claim:{name}").set),
            on_assigned=soon(loop, _owner_of(rt, name, spec.topic.name)),
        )
        rt.run_ended[name] = consumer.ended
        consumers.append(consumer)
    served = [on_thread(loop, consumer, stop, "bound") for consumer in consumers]
    try:
        await serve_consumers(asyncio.ensure_future(rt.stop.wait()), served, stop)
    finally:
        for consumer in consumers:
            rt.run_ended.pop(consumer.spec.name, None)


def _owner_of(rt: Runtime, name: str, topic: str) -> Callable[[list[int]], None]:
    """What tells ``rt`` the shards of the partitions of ``topic`` its consumer owns."""
    count = getattr(rt.store, "shard_count", 1)
    shards = count if isinstance(count, int) and count > 1 else 1

    def owned(partitions: list[int]) -> None:
        rt.owned[name] = sorted(
            {shard_for(partition_shard_key(topic, p), shards) for p in partitions}
        )

    return owned
