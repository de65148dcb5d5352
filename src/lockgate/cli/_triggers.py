"""``lockgate trigger``: send events to a Collect or Debounce workflow, one or a JSON Lines file
of them; and ``lockgate triggers status``: a trigger topic's partitions, as Kafka and the store
see them."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import TYPE_CHECKING, Any

from lockgate._errors import LockgateError, one_line
from lockgate._output import json_line, out
from lockgate.cli._commands import check_workflow
from lockgate.cli._exits import OK, Failure, exit_code_for
from lockgate.cli._params import FROM_FILE, Subparsers, json_object

if TYPE_CHECKING:  # imported where used: the parsers below are built for every command line
    from lockgate.stores._base import Store

#: Width of the progress bar, in characters.
BAR = 30


def add_parsers(group: Subparsers, common: list[argparse.ArgumentParser]) -> None:
    p = group.add_parser(
        "trigger",
        parents=common,
        help="send events to a Collect or Debounce workflow; prints the run a Collect batch "
        "fired, else 'buffered' (with a Kafka journal: 'sent', the fires happen in the workers)",
    )
    p.add_argument("name", metavar="NAME", help="workflow name")
    given = p.add_mutually_exclusive_group(required=True)
    given.add_argument("--event", metavar="JSON", help=f"the event, a JSON object; {FROM_FILE}")
    given.add_argument(
        "--file",
        metavar="PATH",
        help="events as JSON Lines, one object per line (- reads standard input); all are "
        "checked before any is sent",
    )
    p.add_argument(
        "--key",
        metavar="K",
        help="the trigger key of every event, instead of the one the workflow resolves",
    )
    p.add_argument("--app", metavar="MODULE", help="import MODULE for its trigger")
    p.set_defaults(run=trigger)

    p = group.add_parser("triggers", help="look at the trigger topics of a Kafka journal")
    sub = p.add_subparsers(dest="triggers_command", metavar="COMMAND", required=True)
    s = sub.add_parser(
        "status",
        parents=common,
        help="per partition of NAME's trigger topic: its owner, committed offset, lag and open "
        "windows",
    )
    s.add_argument("name", metavar="NAME", help="workflow name")
    s.add_argument("--app", metavar="MODULE", help="import MODULE for its trigger")
    s.add_argument("--json", action="store_true", help="one JSON object per partition")
    s.set_defaults(run=triggers_status)


async def trigger(args: argparse.Namespace, store: Store) -> int:
    from lockgate.client._client import WorkflowClient
    from lockgate.streams._topics import kafka_journal, trigger_topic

    check_workflow(store, args.name, args.app)
    client = WorkflowClient(store)
    journal = kafka_journal(store)
    if args.event is not None:
        event = json_object(args.event, "--event")
        handle = await client.trigger(args.name, event, key=args.key)
        out(handle.run_id if handle is not None else ("sent" if journal else "buffered"))
        return OK
    where = _file_name(args.file)
    numbered = _json_lines(args.file)
    events = [event for _, event in numbered]
    for line, event in numbered:
        try:  # each event as the send will check it, so a bad one is named by its line
            await client.trigger_many(args.name, [event], key=args.key, check_only=True)
        except (LockgateError, ValueError) as exc:
            raise Failure(f"--file {where} line {line}: {one_line(exc)}") from None
    bar = _Bar(len(events)) if sys.stderr.isatty() else None
    sent = [0]

    def progress(done: int) -> None:
        sent[0] = done
        if bar is not None:
            bar.show(done)

    try:
        fired = await client.trigger_many(args.name, events, key=args.key, progress=progress)
    except LockgateError as exc:
        if bar is not None:
            print(file=sys.stderr)  # off the bar's line
        # Blank lines hold no event, so the first unsent event is named by its line in the file.
        rest = (
            f"send the rest, from line {numbered[sent[0]][0]} of {where} on"
            if sent[0] < len(numbered)
            else "none is left to send"
        )
        raise Failure(
            f"{one_line(exc)}; {sent[0]} of {len(events)} event(s) were sent before it: {rest}",
            exit_code_for(exc),
        ) from None
    for handle in fired:
        out(handle.run_id)
    if journal:
        topic = trigger_topic(journal.topic_prefix, await client.triggered_workflow(args.name))
        out(f"sent {len(events)} event(s) to {topic}")
    else:
        out(f"buffered {len(events)} event(s)")
    return OK


def _file_name(path: str) -> str:
    """How messages name the ``--file`` ``path``."""
    return "standard input" if path == "-" else path


def _json_lines(path: str) -> list[tuple[int, dict[str, Any]]]:
    """Every event of a JSON Lines file (``-``: standard input) with the number of its line
    (blank lines hold none); a line that is not a JSON object is a usage error naming it, and
    nothing is sent."""
    where = _file_name(path)
    try:
        if path == "-":
            lines = sys.stdin.read().splitlines()
        else:
            with open(path, encoding="utf-8") as f:
                lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise Failure(f"--file {where}: {exc}") from None
    events = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            event = json.loads(line, parse_constant=_not_json)
        except (ValueError, RecursionError) as exc:
            raise Failure(
                f"--file {where} line {number} is not a JSON object: {one_line(exc)}; nothing "
                f"was sent"
            ) from None
        if not isinstance(event, dict):
            raise Failure(
                f"--file {where} line {number} must be a JSON object, not "
                f"{type(event).__name__}; nothing was sent"
            )
        events.append((number, event))
    return events


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


class _Bar:
    """A progress bar on standard error, redrawn at most ten times a second."""

    def __init__(self, total: int) -> None:
        self.total = max(total, 1)
        self.shown = 0.0

    def show(self, sent: int) -> None:
        now = time.monotonic()
        if sent < self.total and now - self.shown < 0.1:
            return
        self.shown = now
        filled = BAR * sent // self.total
        end = "\n" if sent >= self.total else ""
        print(
            f"\rlockgate: [{'#' * filled}{'.' * (BAR - filled)}] {sent:,} of {self.total:,} "
            f"events sent",
            end=end,
            file=sys.stderr,
            flush=True,
        )


async def triggers_status(args: argparse.Namespace, store: Store) -> int:
    import asyncio

    from lockgate.client._client import WorkflowClient
    from lockgate.streams._topics import kafka_journal
    from lockgate.streams.triggers._status import trigger_status

    check_workflow(store, args.name, args.app)
    if kafka_journal(store) is None:
        raise Failure(
            "triggers status needs a Kafka journal: pass --journal kafka://HOST:PORT (or set "
            "$LOCKGATE_JOURNAL_URL) with a valkey:// --store"
        )
    spec = await WorkflowClient(store).triggered_workflow(args.name)
    for status in await asyncio.to_thread(trigger_status, store, spec):
        windows = [{"key": w.key, "count": w.count, "due_at": w.due_at} for w in status.windows]
        if args.json:
            json_line(
                {
                    "partition": status.partition,
                    "owner": status.owner,
                    "committed": status.committed,
                    "end": status.end,
                    "lag": status.lag,
                    "windows": windows,
                }
            )
            continue
        committed = "-" if status.committed is None else str(status.committed)
        out(
            f"partition {status.partition}: owner {status.owner or '-'}, committed "
            f"{committed}, end {status.end}, lag {status.lag}, {len(windows)} open window(s)"
        )
        for w in status.windows:
            due = time.strftime("%H:%M:%S", time.localtime(w.due_at))
            out(f"  {w.key}: {w.count} event(s), due {due}")
    return OK
