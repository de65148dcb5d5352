"""``lockgate runs ...``: look at runs and talk to them, through the public client."""

from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING

from lockgate._errors import DurableInvocationCancelled, RunNotFoundError
from lockgate._output import (
    EVENT_HEADERS,
    RUN_HEADERS,
    compact,
    event_row,
    json_line,
    note,
    out,
    run_fields,
    run_row,
    table,
)
from lockgate.cli._exits import FAILED, OK, Failure
from lockgate.cli._params import (
    FROM_FILE,
    Subparsers,
    json_object,
    json_value,
    positive_int,
    seconds,
)
from lockgate.journal._events import RunStatus
from lockgate.stores._types import TerminateOutcome

if TYPE_CHECKING:
    from lockgate.client._client import WorkflowClient
    from lockgate.stores._base import Store
    from lockgate.stores._types import RunInfo

#: What ``runs resume`` takes: the values of ``InterruptAction``, whose module (with the
#: workflow machinery behind it) the parsers do not import; a test checks the two agree.
INTERRUPT_ACTIONS = ("approve", "reject", "respond", "edit")

PAGE = 200


def _requested_by() -> str:
    import getpass  # it imports termios, which nothing else of a command needs

    try:
        return f"cli:{getpass.getuser()}"
    except (OSError, KeyError):
        return "cli"


def _client(store: Store) -> WorkflowClient:
    """The client, imported when a command talks to runs (see ``cli/_main``)."""
    from lockgate.client._client import WorkflowClient

    return WorkflowClient(store)


def _info(store: Store, name: str, run_id: str) -> RunInfo:
    info = store.get_run(name, run_id)
    if info is None:
        raise RunNotFoundError(name, run_id)
    return info


def _gate_keys(store: Store, info: RunInfo) -> set[str]:
    """The Limit and Rate keys the run was stamped with, from its ``run:init``."""
    opening = store.load_run(info.name, info.run_id, max_events=1)
    gates = opening[0].payload.get("gates", {}) if opening else {}
    return {str(g["key"]) for g in gates.values() if isinstance(g, dict) and "key" in g}


def list_runs(args: argparse.Namespace, store: Store) -> int:
    # Not a coroutine: it awaits nothing, and a plain one starts no event loop (nor imports
    # asyncio), which is most of what `runs list` would otherwise take.
    wanted = RunStatus(args.status) if args.status else None
    runs: list[RunInfo] = []
    cursor: str | None = None
    while len(runs) < args.limit:
        page, cursor = store.list_runs(args.name, limit=max(args.limit, PAGE), cursor=cursor)
        runs.extend(
            info
            for info in page
            if (wanted is None or info.status == wanted)
            and (args.gate_key is None or args.gate_key in _gate_keys(store, info))
        )
        if cursor is None:
            break
    runs = runs[: args.limit]
    if args.json:
        for info in runs:
            json_line(info.to_dict())
        return OK
    if not runs:
        which = f"{wanted} runs" if wanted else "runs"
        note(f"no {which} of workflow {args.name!r} in this store")
        return OK
    now = time.time()
    out(table(RUN_HEADERS, (run_row(info, now) for info in runs)))
    return OK


async def show(args: argparse.Namespace, store: Store) -> int:
    client = _client(store)
    info = _info(store, args.name, args.run_id)
    events = await client.events(args.name, args.run_id)
    if args.json:
        last = events[-args.events :] if args.events > 0 else []
        waiting = await client.why_waiting(args.name, args.run_id)
        json_line(
            {"run": info.to_dict(), "waiting": waiting, "events": [e.to_dict() for e in last]}
        )
        return OK
    waiting = await client.why_waiting(args.name, args.run_id)
    out(run_fields(info, events, time.time(), args.events, waiting))
    return OK


async def events(args: argparse.Namespace, store: Store) -> int:
    journal = await _client(store).events(args.name, args.run_id)
    if args.json:
        for event in journal:
            json_line(event.to_dict())
        return OK
    out(table(EVENT_HEADERS, map(event_row, journal)))
    return OK


async def cancel(args: argparse.Namespace, store: Store) -> int:
    """Ask for a cancel. A run that has already ended is left as it is: that is done (0) when
    it ended cancelled, and with ``--wait``, which asked for it to end cancelled, a failure (1)
    when it ended otherwise."""
    _info(store, args.name, args.run_id)
    client = _client(store)
    status = await client.status(args.name, args.run_id)  # a handed-on run's successor's
    if status == RunStatus.CANCELLED:
        note(f"run {args.run_id} had already been cancelled; nothing to do")
        return OK
    if status.is_terminal:
        ended = f"run {args.run_id} had already ended ({status}); nothing to cancel"
        if args.wait:
            raise Failure(ended, FAILED)
        note(ended)
        return OK
    await client.cancel(args.name, args.run_id, reason=args.reason, requested_by=_requested_by())
    if not args.wait:
        out(f"cancel requested: run {args.run_id} ends cancelled at its next boundary")
        return OK
    try:
        await client.result(args.name, args.run_id, timeout=args.timeout)
    except DurableInvocationCancelled:
        out(f"run {args.run_id} was cancelled")
        return OK
    status = await client.status(args.name, args.run_id)
    raise Failure(f"run {args.run_id} ended {status} before the cancel took effect", FAILED)


async def terminate(args: argparse.Namespace, store: Store) -> int:
    client = _client(store)
    result = await client.terminate(
        args.name, args.run_id, reason=args.reason, requested_by=_requested_by()
    )
    closed = result.children
    if closed.total:
        note(
            f"children: {closed.terminated} terminated, {closed.cancelled} asked to cancel, "
            f"{closed.abandoned} left running"
        )
    if result.outcome == TerminateOutcome.ALREADY_ENDED:
        status = await client.status(args.name, args.run_id)
        note(f"run {args.run_id} had already ended ({status}); nothing to terminate")
        return OK
    out(f"run {args.run_id} terminated")
    return OK


async def retry(args: argparse.Namespace, store: Store) -> int:
    """Start a run that ended without completing again, and print the new run's id; with
    ``--plan``, print what the retry would carry over and run again, starting nothing."""
    client = _client(store)
    plan = await client.plan_retry(args.name, args.run_id)
    if args.plan:
        out(f"retry run      {plan.retry_run_id}")
        out(f"carried over   {plan.seeded_events} events of {args.run_id}'s journal")
        out(f"runs again     from index {plan.cut} of that journal")
        out(f"in doubt       {', '.join(plan.in_doubt) or 'none'}")
        return OK
    handle = await client.retry(args.name, args.run_id)
    out(handle.run_id)
    note(f"run {args.run_id} retried as run {handle.run_id}")
    if plan.in_doubt:
        note(
            f"started with no recorded outcome, so the retry runs them again: "
            f"{', '.join(plan.in_doubt)} (check their effects did not land twice)"
        )
    return OK


async def signal(args: argparse.Namespace, store: Store) -> int:
    payload = json_object(args.payload, "--payload")
    answer = await _client(store).signal(
        args.name, args.run_id, args.signal, payload, signal_id=args.signal_id
    )
    if answer == "duplicate":
        out(
            f"signal {args.signal!r} not sent: run {args.run_id} already had signal id "
            f"{args.signal_id!r} (a duplicate); the first send stands and this payload was dropped"
        )
    else:
        out(f"signal {args.signal!r} {answer}: run {args.run_id}")
    return OK


async def resume(args: argparse.Namespace, store: Store) -> int:
    """Answer the interrupt the run waits on (or the one ``--wait-id`` names)."""
    value = json_value(args.value, "--value") if args.value is not None else None
    from lockgate.runs._interrupts import resume as answer_interrupt

    client = _client(store)
    question = await answer_interrupt(
        client.store, client.clock, args.name, args.run_id, args.action, value, args.wait_id
    )
    out(
        f"{question.wait_id} of run {args.run_id} answered: {args.action}"
        + (f" {compact(value)}" if value is not None else "")
    )
    return OK


def add_parsers(group: Subparsers, common: list[argparse.ArgumentParser]) -> None:
    """``runs`` and its subcommands."""
    runs = group.add_parser("runs", help="look at runs and talk to them")
    sub = runs.add_subparsers(dest="runs_command", metavar="COMMAND", required=True)
    statuses = [str(s) for s in RunStatus]

    p = sub.add_parser("list", parents=common, help="runs of a workflow, newest first")
    p.add_argument("name", metavar="NAME", help="workflow name")
    p.add_argument("--limit", type=positive_int, default=50, metavar="N", help="at most N runs")
    p.add_argument(
        "--status",
        choices=statuses,
        metavar="S",
        help=f"only runs in status S: {', '.join(statuses)}",
    )
    p.add_argument(
        "--gate-key",
        metavar="K",
        help="only runs whose Limit or Rate key is K (with --status pending: who waits on K)",
    )
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p.set_defaults(run=list_runs)

    p = sub.add_parser("show", parents=common, help="one run: state, wait and last events")
    _run_arguments(p)
    p.add_argument("--events", type=int, default=10, metavar="N", help="last N events (10)")
    p.add_argument("--json", action="store_true", help="one JSON object")
    p.set_defaults(run=show)

    p = sub.add_parser("events", parents=common, help="a run's whole journal")
    _run_arguments(p)
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p.set_defaults(run=events)

    p = sub.add_parser("cancel", parents=common, help="ask a run to stop; it ends cancelled")
    _run_arguments(p)
    p.add_argument("--reason", metavar="R", help="recorded with the cancel")
    p.add_argument(
        "--wait", action="store_true", help="wait until it has ended cancelled (exit 1 if not)"
    )
    p.add_argument("--timeout", type=seconds, metavar="S", help="give up waiting after S seconds")
    p.set_defaults(run=cancel)

    p = sub.add_parser("terminate", parents=common, help="end a run now, without its worker")
    _run_arguments(p)
    p.add_argument("--reason", metavar="R", help="recorded with the termination")
    p.set_defaults(run=terminate)

    p = sub.add_parser(
        "retry", parents=common, help="run an ended run that did not complete again; prints its id"
    )
    _run_arguments(p)
    p.add_argument(
        "--plan",
        action="store_true",
        help="print what the retry would carry over and run again (in-doubt steps too); "
        "start nothing",
    )
    p.set_defaults(run=retry)

    p = sub.add_parser("signal", parents=common, help="send a signal to a run")
    _run_arguments(p)
    p.add_argument("signal", metavar="SIGNAL", help="signal name")
    p.add_argument(
        "--payload", default="{}", metavar="JSON", help=f"a JSON object ({{}}); {FROM_FILE}"
    )
    p.add_argument("--signal-id", metavar="ID", help="a retry with the same id applies once")
    p.set_defaults(run=signal)

    actions = ", ".join(INTERRUPT_ACTIONS)
    p = sub.add_parser(
        "resume", parents=common, help="answer the question a run waits on (ctx.interrupt)"
    )
    _run_arguments(p)
    p.add_argument("action", metavar="ACTION", help=f"one of {actions}, as the question takes")
    p.add_argument(
        "--value", metavar="JSON", help=f"the answer, any JSON value (none); {FROM_FILE}"
    )
    p.add_argument(
        "--wait-id",
        metavar="ID",
        help="the interrupt answered (`runs show` names it); default: the one it waits on now",
    )
    p.set_defaults(run=resume)


def _run_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", metavar="NAME", help="workflow name")
    parser.add_argument("run_id", metavar="RUN_ID", help="run id")
