"""``lockgate bound status NAME``: a bound workflow's topic per partition, as Kafka and the store
see it (its group's owner, commit, end and lag; the runs in flight and waiting; the records
dead-lettered). The work is ``streams/bound/_status.py``'s, imported when the command runs."""

from __future__ import annotations

import argparse

from lockgate._output import json_line, out
from lockgate.cli._exits import OK, Failure
from lockgate.cli._params import Subparsers, positive_int

TYPE_CHECKING = False  # typing itself is not imported to build the parser
if TYPE_CHECKING:
    from lockgate.stores._base import Store

#: The workflow's runs read at most, unless ``--most-runs`` says otherwise.
MOST_RUNS = 10_000


def add_parsers(group: Subparsers, common: list[argparse.ArgumentParser]) -> None:
    p = group.add_parser("bound", help="look at the topics of workflows bound to Kafka topics")
    sub = p.add_subparsers(dest="bound_command", metavar="COMMAND", required=True)
    s = sub.add_parser(
        "status",
        parents=common,
        help="per partition of NAME's bound topic: its owner, committed offset, end offset, "
        "lag, runs in flight and waiting, and records dead-lettered",
    )
    s.add_argument("name", metavar="NAME", help="workflow name")
    s.add_argument("--app", metavar="MODULE", help="import MODULE for the workflow's binding")
    s.add_argument("--json", action="store_true", help="one JSON object per partition")
    s.add_argument(
        "--most-runs",
        type=positive_int,
        default=MOST_RUNS,
        metavar="N",
        help=f"read at most the workflow's newest N runs (default {MOST_RUNS:,})",
    )
    s.set_defaults(run=bound_status)


def _bound_topic(store: Store, name: str) -> str:
    """The topic ``name`` is bound to: as imported here, else as its workers recorded it."""
    from lockgate.workflow._spec import get_workflow

    spec = get_workflow(name)
    if spec is not None:
        if spec.topic is None:
            raise Failure(f"workflow {name!r} is bound to no topic")
        return spec.topic.name
    record = None
    if "policies" in store.capabilities():
        record = store.get_workflow_policy(name)
    topic = record.get("topic") if isinstance(record, dict) else None
    if not isinstance(topic, str):
        raise Failure(
            f"workflow {name!r} is bound to no topic that its workers recorded (a worker "
            f"records it at start); pass --app MODULE"
        )
    return topic


def bound_status(args: argparse.Namespace, store: Store) -> int:
    # Plain, not a coroutine: it awaits nothing, and running a coroutine imports asyncio.
    from lockgate.cli._commands import check_workflow
    from lockgate.streams._topics import kafka_journal
    from lockgate.streams.bound._status import bound_status as status_of

    check_workflow(store, args.name, args.app)
    journal = kafka_journal(store)
    if journal is None:
        raise Failure(
            "bound status needs a Kafka journal: pass --journal kafka://HOST:PORT (or set "
            "$LOCKGATE_JOURNAL_URL) with a valkey:// --store"
        )
    topic = _bound_topic(store, args.name)
    status = status_of(store, journal, args.name, topic, runs_most=args.most_runs)
    for p in status.partitions:
        if args.json:
            json_line(
                {
                    "partition": p.partition,
                    "owner": p.owner,
                    "committed": p.committed,
                    "end": p.end,
                    "lag": p.lag,
                    "in_flight": p.in_flight,
                    "waiting": p.waiting,
                    "dead_lettered": p.dead_lettered,
                    "runs_cut": status.runs_cut,
                    "dead_lettered_cut": status.dead_cut,
                }
            )
            continue
        committed = "-" if p.committed is None else str(p.committed)
        dead = f"{'at least ' if status.dead_cut else ''}{p.dead_lettered}"
        out(
            f"partition {p.partition}: owner {p.owner or '-'}, committed {committed}, end "
            f"{p.end}, lag {p.lag}, {p.in_flight} in flight, {p.waiting} waiting, {dead} "
            f"dead-lettered"
        )
    if args.json:
        return OK
    if status.runs_cut:
        out(
            f"(runs in flight and waiting counted among the newest {status.runs_read:,} runs "
            f"of {args.name} only: pass --most-runs N to read more)"
        )
    if status.dead_cut:
        out(f"({status.dlq} was not read to its end in time: its counts are at least those shown)")
    return OK
