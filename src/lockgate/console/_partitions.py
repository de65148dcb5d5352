"""The Kafka half of the windows page: for a store with a Kafka journal, each consumed topic of
a served workflow (a ``Collect``/``Debounce`` workflow's trigger topic, a bound workflow's
topic) with its consumer group's owner, committed offset and lag per partition
(``streams/_group_view.py``). Kafka is asked off the event loop and within a deadline: a broker
that does not answer makes the page say so, never fail."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from fastapi import Request

from lockgate._errors import StoreUnavailable
from lockgate.console._web import api_of, console_of
from lockgate.workflow._spec import WorkflowSpec

if TYPE_CHECKING:
    from lockgate.streams._group_view import GroupView

#: Seconds one request to Kafka may take; the page waits for all of them a little longer.
KAFKA_TIMEOUT = 3.0


@dataclass(frozen=True)
class Consumed:
    """A topic a served workflow's workers consume, and their group."""

    workflow: str
    kind: str
    topic: str
    group: str


@dataclass
class KafkaReport:
    """``configured``: the store has a Kafka journal. ``views`` pairs each consumed topic with
    its group's view; ``error`` says why Kafka gave none (it did not answer in time)."""

    configured: bool
    bootstrap: str = ""
    views: list[tuple[Consumed, GroupView]] = field(default_factory=list)
    error: str | None = None


def consumed_topics(topic_prefix: str, served: dict[str, WorkflowSpec]) -> list[Consumed]:
    """What the workers of ``served`` consume from Kafka, by workflow name."""
    from lockgate.streams import group_id, trigger_topic
    from lockgate.streams.bound import bound_group

    found = []
    for name in sorted(served):
        spec = served[name]
        if spec.trigger is not None:
            topic = trigger_topic(topic_prefix, spec)
            found.append(Consumed(name, "trigger topic", topic, group_id(topic)))
        if spec.topic is not None:
            group = bound_group(topic_prefix, name)
            found.append(Consumed(name, "bound topic", spec.topic.name, group))
    return found


async def kafka_report(request: Request) -> KafkaReport:
    """The consumed topics of the served workflows and their groups' views, if Kafka is the
    journal; a report saying Kafka did not answer when it did not within the deadline."""
    from lockgate.streams._group_view import GroupViewer
    from lockgate.streams._topics import kafka_journal

    api, console = api_of(request), console_of(request)
    journal = kafka_journal(api.store)
    if journal is None:
        return KafkaReport(configured=False)
    if console.kafka is None:
        console.kafka = GroupViewer(journal.client_config, timeout=KAFKA_TIMEOUT)
    viewer = console.kafka
    report = KafkaReport(configured=True, bootstrap=viewer.bootstrap)
    consumed = consumed_topics(journal.topic_prefix, api.served)
    if not consumed:
        return report

    def ask() -> list[tuple[Consumed, GroupView]]:
        return [(c, viewer.view(c.topic, c.group)) for c in consumed]

    # Each request is bounded by the viewer's timeout; a topic is four of them.
    deadline = KAFKA_TIMEOUT * (4 * len(consumed) + 1)
    try:
        report.views = await asyncio.wait_for(asyncio.to_thread(ask), deadline)
    except StoreUnavailable as exc:
        report.error = str(exc)
    except TimeoutError:
        report.error = f"Kafka at {viewer.bootstrap} did not answer within {deadline:g} s"
    return report
