"""``lockgate topics create|list|describe``: Kafka topics made and looked at, on the brokers the
``--journal`` URL (or ``LOCKGATE_JOURNAL_URL``) names. They open no store; the work is
``streams/_topic_admin.py``'s, imported when a command runs (it brings in the Kafka client)."""

from __future__ import annotations

import argparse
import logging
import os
from typing import TYPE_CHECKING, Any

from lockgate._output import json_line, out, table
from lockgate.cli._exits import OK, Failure
from lockgate.cli._params import Subparsers

if TYPE_CHECKING:
    from lockgate.streams._topic_admin import KafkaAdmin, TopicDescription

#: The environment variable a command reads when it is given no ``--journal``.
JOURNAL_URL_ENV = "LOCKGATE_JOURNAL_URL"


def add_parsers(group: Subparsers, common: list[argparse.ArgumentParser]) -> None:
    """``topics create``, ``topics list`` and ``topics describe``, which open no store (their
    own ``--journal`` names the brokers), so ``common`` goes unused."""
    topics = group.add_parser("topics", help="create and look at Kafka topics (a bound workflow's)")
    sub = topics.add_subparsers(dest="topics_command", metavar="COMMAND", required=True)
    journal = argparse.ArgumentParser(add_help=False)
    journal.add_argument(
        "--journal",
        metavar="URL",
        help="the brokers: kafka://host:port[,host:port][?read_timeout=S&replication_factor=R] "
        f"(default: ${JOURNAL_URL_ENV})",
    )
    p = sub.add_parser(
        "create",
        parents=[journal],
        help="create topic NAME (for a workflow bound to it: its partition count is how many "
        "workers share it)",
    )
    p.add_argument("topic", metavar="NAME", help="topic name")
    p.add_argument("--partitions", type=int, required=True, metavar="N", help="partition count")
    p.add_argument(
        "--replication-factor",
        type=int,
        metavar="R",
        help="copies of each partition (default: the URL's replication_factor, else the "
        "brokers' default)",
    )
    p.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a topic setting, e.g. retention.ms=604800000 (repeat for more)",
    )
    p.add_argument(
        "--if-not-exists",
        action="store_true",
        help="a topic there already with N partitions is no error (it is left as it is)",
    )
    p.set_defaults(run=create, opens_no_store=True)
    p = sub.add_parser("list", parents=[journal], help="the cluster's topics")
    p.add_argument("--internal", action="store_true", help="Kafka's own topics too (__...)")
    p.add_argument("--json", action="store_true", help="one JSON object per topic")
    p.set_defaults(run=list_, opens_no_store=True)
    p = sub.add_parser(
        "describe",
        parents=[journal],
        help="topic NAME: its partitions, leaders, offsets, retention and settings",
    )
    p.add_argument("topic", metavar="NAME", help="topic name")
    p.add_argument("--json", action="store_true", help="one JSON object")
    p.set_defaults(run=describe, opens_no_store=True)


def admin_of(args: argparse.Namespace) -> KafkaAdmin:
    """The brokers ``--journal`` (or ``LOCKGATE_JOURNAL_URL``) names."""
    from lockgate.streams._topic_admin import admin_for_url

    url = args.journal if args.journal is not None else os.environ.get(JOURNAL_URL_ENV)
    if not url:
        raise Failure(
            f"no brokers given: pass --journal kafka://host:port or set {JOURNAL_URL_ENV}"
        )
    # librdkafka's log lines (a refused connection, once per retry) would land on stderr
    # through logging's last resort; the one error line says what went wrong.
    logging.getLogger("lockgate.kafka").addHandler(logging.NullHandler())
    return admin_for_url(url)


def create(args: argparse.Namespace) -> int:
    from lockgate.streams._topic_admin import create_topic, parse_settings

    admin = admin_of(args)
    made = create_topic(
        admin,
        args.topic,
        partitions=args.partitions,
        replication_factor=args.replication_factor,
        settings=parse_settings(args.config),
        if_not_exists=args.if_not_exists,
    )
    if made.created:
        out(f"created topic {made.name} with {made.partitions} partition(s) on {admin.bootstrap}")
    else:
        out(f"topic {made.name} exists already with {made.partitions} partition(s)")
    return OK


def list_(args: argparse.Namespace) -> int:
    from lockgate.streams._topic_admin import list_topics

    found = list_topics(admin_of(args), internal=args.internal)
    if args.json:
        for topic in found:
            json_line(
                {
                    "topic": topic.name,
                    "partitions": topic.partitions,
                    "replication_factor": topic.replication_factor,
                }
            )
        return OK
    if not found:
        out("no topics")
        return OK
    rows = [(t.name, str(t.partitions), str(t.replication_factor)) for t in found]
    out(table(("TOPIC", "PARTITIONS", "REPLICATION"), rows))
    return OK


def describe(args: argparse.Namespace) -> int:
    from lockgate.streams._topic_admin import describe_topic

    found = describe_topic(admin_of(args), args.topic)
    if args.json:
        json_line(description_json(found))
        return OK
    settings = " ".join(f"{k}={v}" for k, v in found.overrides.items()) or "-"
    out(f"topic        {found.name}")
    out(f"partitions   {len(found.partitions)}")
    out(f"replication  {found.replication_factor}")
    out(f"retention    {_retention(found.retention)}")
    out(f"settings     {settings}")
    out(f"records      {found.records}")
    out()
    rows = [
        (
            str(p.partition),
            "-" if p.leader is None else str(p.leader),
            ",".join(map(str, p.replicas)) or "-",
            ",".join(map(str, p.isr)) or "-",
            str(p.start),
            str(p.end),
        )
        for p in found.partitions
    ]
    out(table(("PARTITION", "LEADER", "REPLICAS", "IN SYNC", "START", "END"), rows))
    return OK


def description_json(found: TopicDescription) -> dict[str, Any]:
    return {
        "topic": found.name,
        "replication_factor": found.replication_factor,
        "retention": found.retention,
        "config": found.overrides,
        "partitions": [
            {
                "partition": p.partition,
                "leader": p.leader,
                "replicas": list(p.replicas),
                "isr": list(p.isr),
                "start": p.start,
                "end": p.end,
            }
            for p in found.partitions
        ],
    }


def _retention(retention: dict[str, str]) -> str:
    """``cleanup.policy=delete, retention.ms=604800000 (7 days), ...`` for people."""
    shown = []
    for key, value in retention.items():
        text = f"{key}={value}"
        if key == "retention.ms" and value.lstrip("-").isdigit():
            ms = int(value)
            text += " (forever)" if ms < 0 else f" ({_duration(ms / 1000)})"
        elif key == "retention.bytes" and value == "-1":
            text += " (no limit)"
        shown.append(text)
    return ", ".join(shown) or "-"


def _duration(seconds: float) -> str:
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size and seconds % size == 0:
            count = int(seconds // size)
            return f"{count} {unit}{'s' if count != 1 else ''}"
    return f"{seconds:g} s"
