"""``lockgate worker``, ``submit``, ``store`` and ``demo``.

The parsers are built for every command line, so what this module imports at its top stays
light (see ``cli/_main``); each command imports the client, the worker or a store's parts
where it runs."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import logging
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from lockgate._errors import CapabilityMissing
from lockgate._output import fields, flatten, json_line, note, out
from lockgate.cli._exits import OK, USAGE, Failure
from lockgate.cli._load import import_module, load_workflows
from lockgate.cli._params import (
    FROM_FILE,
    Subparsers,
    count,
    json_object,
    port,
    positive_int,
    seconds,
)
from lockgate.cli._rebuild import add_rebuild_parser
from lockgate.stores._urls import STORE_URL_ENV
from lockgate.stores.opener._open import open_store
from lockgate.worker._options import WorkerOptions

if TYPE_CHECKING:
    from lockgate.stores._base import Store

LOG_LEVELS = ("debug", "info", "warning", "error")


class _StatusNotes(logging.Handler):
    """The worker's changes of state (``lockgate.worker.status``) as notes on stderr."""

    def emit(self, record: logging.LogRecord) -> None:
        level = "" if record.levelno < logging.WARNING else f"{record.levelname.lower()}: "
        note(level + record.getMessage())


@contextlib.contextmanager
def _status_as_notes() -> Iterator[None]:
    """Print the worker's changes of state whatever ``--log-level`` is, once each (not also
    through the log)."""
    from lockgate.worker._status import status_log

    handler = _StatusNotes()
    level, propagate = status_log.level, status_log.propagate
    status_log.addHandler(handler)
    status_log.setLevel(logging.INFO)
    status_log.propagate = False
    try:
        yield
    finally:
        status_log.removeHandler(handler)
        status_log.setLevel(level)
        status_log.propagate = propagate


async def worker(args: argparse.Namespace) -> int:
    """Serve until SIGTERM or Ctrl-C. The store is opened here, not by the dispatcher: while
    it does not answer, the worker waits for it (``/readyz`` saying so) instead of failing.
    The start-up line, and each later change of state, come from the worker."""
    from lockgate._repeats import log_to_stderr
    from lockgate.stores.valkey._first_contact import redacted_url
    from lockgate.worker._serve import serve

    workflows = load_workflows(args.target)
    repeats = log_to_stderr(args.log_level)
    given = {field: value for field, value in _worker_options(args).items() if value is not None}
    options = WorkerOptions(**given)
    url = args.store if args.store is not None else os.environ.get(STORE_URL_ENV)
    try:
        with _status_as_notes():
            await serve(
                # A worker creates a store that does not exist yet, and says so as it starts.
                lambda: open_store(
                    args.store, option_defaults={"create": True}, journal=args.journal
                ),
                store_name=redacted_url(url) if url else "(none)",
                workflows=workflows,
                options=options,
            )
    finally:
        # The last series' count, however the worker ends: logging's own flush at exit is
        # skipped when the process leaves by os._exit (an interrupt).
        if repeats is not None:
            repeats.flush()
    return OK


def _worker_options(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "max_concurrent_runs": args.concurrency,
        "claim_poll_interval": args.poll_interval,
        "timer_poll_interval_s": args.timer_interval,
        "orphan_scan_interval": args.orphan_scan_interval,
        "shutdown_grace": args.shutdown_grace,
        "health_port": args.health_port,
        "metrics_port": args.metrics_port,
        **_poison_options(args),
    }


def _poison_options(args: argparse.Namespace) -> dict[str, Any]:
    """The poison, cancel and stranded knobs (None: the option's default)."""
    return {
        "poison_max_retries": args.poison_max_retries,
        "poison_retry_ttl_s": args.poison_retry_ttl,
        "poison_counts_loop_blocked": False if args.poison_ignores_loop_blocked else None,
        "cancel_timeout": args.cancel_timeout,
        "stranded_policy": args.stranded_policy,
        "stranded_timeout": args.stranded_timeout,
    }


def _add_poison_flags(p: argparse.ArgumentParser, defaults: dict[str, Any]) -> None:
    p.add_argument(
        "--poison-max-retries",
        type=count,
        metavar="N",
        help=f"quarantine a run at its crash N+1 within the TTL ({defaults['poison_max_retries']})",
    )
    for flag, field, what in (
        ("--poison-retry-ttl", "poison_retry_ttl_s", "forget a run's crashes after S seconds"),
        ("--cancel-timeout", "cancel_timeout", "cancel a body that ignores a cancel after S"),
        ("--stranded-timeout", "stranded_timeout", "with --stranded-policy fail: after S"),
    ):
        p.add_argument(flag, type=seconds, metavar="S", help=f"{what} ({defaults[field]}s)")
    p.add_argument(
        "--poison-ignores-loop-blocked",
        action="store_true",
        help="a lapse of a worker whose event loop was blocked is not counted as a crash",
    )
    p.add_argument(
        "--stranded-policy",
        choices=("wait", "fail"),
        help="queued pinned runs no live worker's version serves: wait, or fail (wait)",
    )


def _known_here_or_there(store: Store, name: str) -> bool:
    """True when a worker has recorded ``name``'s policy on the store or a run of it exists."""
    try:
        if store.get_workflow_policy(name) is not None:
            return True
    except CapabilityMissing:
        pass
    runs, _ = store.list_runs(name, limit=1)
    return bool(runs)


def check_workflow(store: Store, name: str, app: str | None) -> None:
    from lockgate.workflow._spec import get_workflow

    if app is not None:
        import_module(app)
        if get_workflow(name) is None:
            raise Failure(f"unknown workflow {name}: --app {app} does not declare it")
        return
    if get_workflow(name) is None and not _known_here_or_there(store, name):
        raise Failure(
            f"unknown workflow {name}: no worker has served it on this store; start one "
            f"with `lockgate worker MODULE` or pass --app MODULE"
        )


async def submit(args: argparse.Namespace, store: Store) -> int:
    from lockgate.client._client import WorkflowClient

    params = json_object(args.params, "--params")
    check_workflow(store, args.name, args.app)
    client = WorkflowClient(store)
    handle = await client.submit(
        args.name, params, idempotency_key=args.idempotency_key, delay=args.delay
    )
    out(handle.run_id)
    if args.wait:
        result = await handle.result(timeout=args.timeout)
        out(json.dumps(result, sort_keys=True))
    return OK


def _store_method(store: Store, method: str) -> Any:
    found = getattr(store, method, None)
    if not callable(found):
        raise Failure(f"{type(store).__name__} has no {method}()", USAGE)
    return found


def store_init(args: argparse.Namespace, store: Store) -> int:
    """The store is open, so it exists now: mark it (``Store.ensure_marker``), and say whether
    this call made it or marked it. A store without its marker is a new one, or one that lost
    its data: marked, the workers waiting on it go on with it as it is."""
    from lockgate.worker._status import describe_store

    marked = store.ensure_marker()
    name = describe_store(store)
    if getattr(store, "created", False):
        out(f"created {name}, an empty store")
    elif marked:
        out(
            f"marked {name} as a store: it carried no marker (a new store, one an older "
            f"lockgate made, or one that lost its data); workers go on with it as it is"
        )
    else:
        out(f"{name} is already a store; nothing to do")
    return OK


def store_info(args: argparse.Namespace, store: Store) -> int:
    info = _store_method(store, "info")()
    if args.json:
        json_line(info)
    else:
        out(fields(flatten(info)))
    return OK


def store_backup(args: argparse.Namespace, store: Store) -> int:
    from lockgate.worker._status import describe_store

    written = _store_method(store, "backup")(args.dest)
    target = os.fspath(written) if isinstance(written, str | os.PathLike) else args.dest
    out(f"backed up {describe_store(store)} to {target} ({os.path.getsize(target)} bytes)")
    return OK


def demo(args: argparse.Namespace) -> int:
    live = False if args.plain else None
    if args.kafka:
        if args.store is not None:
            raise Failure("--store is the SQLite demo's: the --kafka demo starts its own services")
        from lockgate.demo import run_kafka_demo

        return run_kafka_demo(live=live)
    from lockgate.demo import run_demo

    return run_demo(args.store, live=live)


def add_parsers(group: Subparsers, common: list[argparse.ArgumentParser]) -> None:
    """``worker``, ``submit``, ``store`` and ``demo`` (see ``cli/_main``)."""
    add_run_parsers(group, common)
    add_admin_parsers(group, common)


def add_run_parsers(group: Subparsers, common: list[argparse.ArgumentParser]) -> None:
    """``worker`` and ``submit``."""
    p = group.add_parser("worker", parents=common, help="run a worker until interrupted")
    p.add_argument(
        "target",
        metavar="MODULE[:ATTR]",
        help="module whose @workflow functions to serve, or MODULE:ATTR naming one or a list",
    )
    defaults = {f.name: f.default for f in dataclasses.fields(WorkerOptions)}
    p.add_argument(
        "--concurrency",
        type=positive_int,
        metavar="N",
        help=f"runs at once ({defaults['max_concurrent_runs']})",
    )
    p.add_argument("--log-level", choices=LOG_LEVELS, default="warning", help="(warning)")
    for flag, field, what in (
        ("--poll-interval", "claim_poll_interval", "poll an empty queue every S seconds"),
        (
            "--timer-interval",
            "timer_poll_interval_s",
            "ask the store for its next timer or trigger deadline at least this often",
        ),
        ("--orphan-scan-interval", "orphan_scan_interval", "requeue runs whose lease lapsed"),
        ("--shutdown-grace", "shutdown_grace", "on stop, S seconds for attempts to hand back"),
    ):
        p.add_argument(flag, type=seconds, metavar="S", help=f"{what} ({defaults[field]}s)")
    p.add_argument(
        "--health-port",
        type=port,
        metavar="PORT",
        help="serve /livez, /readyz and /metrics on 127.0.0.1 (0: a free port, printed at start)",
    )
    p.add_argument(
        "--metrics-port",
        type=port,
        metavar="PORT",
        help="serve Prometheus metrics on 127.0.0.1 (0: a free port); needs lockgate[metrics]",
    )
    _add_poison_flags(p, defaults)
    p.set_defaults(run=worker, opens_store=True)

    p = group.add_parser("submit", parents=common, help="start a run; prints its id")
    p.add_argument("name", metavar="NAME", help="workflow name")
    p.add_argument(
        "--params", default="{}", metavar="JSON", help=f"a JSON object ({{}}); {FROM_FILE}"
    )
    p.add_argument("--idempotency-key", metavar="K", help="a repeat with K returns the same run")
    p.add_argument("--delay", type=seconds, metavar="S", help="start the run S seconds from now")
    p.add_argument("--wait", action="store_true", help="wait for the result and print it")
    p.add_argument("--timeout", type=seconds, metavar="S", help="give up waiting after S seconds")
    p.add_argument("--app", metavar="MODULE", help="import MODULE to check params against")
    p.set_defaults(run=submit)


def add_admin_parsers(group: Subparsers, common: list[argparse.ArgumentParser]) -> None:
    """``store`` and ``demo``."""
    store = group.add_parser("store", help="the store itself")
    sub = store.add_subparsers(dest="store_command", metavar="COMMAND", required=True)
    p = sub.add_parser(
        "init", parents=common, help="create the store if it does not exist, and write its marker"
    )
    p.set_defaults(run=store_init, creates_store=True)
    p = sub.add_parser("info", parents=common, help="what the store holds and how it is set")
    p.add_argument("--json", action="store_true", help="one JSON object")
    p.set_defaults(run=store_info)
    p = sub.add_parser("backup", parents=common, help="copy the store to a new file")
    p.add_argument("dest", metavar="DEST", help="path of the copy; must not exist")
    p.set_defaults(run=store_backup)
    add_rebuild_parser(sub, common)

    p = group.add_parser(
        "demo", help="a durable workflow on SQLite with a worker, live (--kafka: streaming)"
    )
    p.add_argument(
        "--store",
        metavar="URL",
        help="an sqlite:/// URL to keep the demo's runs in (default: a temporary file)",
    )
    p.add_argument(
        "--kafka",
        action="store_true",
        help="the streaming demo: its own Kafka broker (Java 17 and Maven) and Valkey server, "
        "two workers on a trigger topic and a bound topic, one killed mid-stream",
    )
    p.add_argument("--plain", action="store_true", help="plain lines, even on a terminal")
    p.set_defaults(run=None, demo=demo)
