"""``lockgate``: argument parsing, dispatch, and exit codes.

Every command is a thin layer over the public client and the store: it opens the store the
``--store`` URL (or ``LOCKGATE_STORE_URL``) names, does one thing, and exits 0 when it did it,
1 when the run or the operation failed, 2 when the command cannot work as given. A failure is
one line on stderr; set ``LOCKGATE_DEBUG=1`` to get the traceback as well.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import inspect
import os
import signal
import sys
from collections.abc import Sequence
from typing import NoReturn

from lockgate import __version__
from lockgate._errors import LockgateError
from lockgate.cli import _bound, _commands, _dev, _journal, _runs, _serve, _topics, _triggers
from lockgate.cli._exits import BROKEN_PIPE, INTERRUPTED, Failure, report
from lockgate.cli._params import check_names
from lockgate.stores._open import JOURNAL_URL_ENV, STORE_URL_ENV, open_store

DEBUG_ENV = "LOCKGATE_DEBUG"
INTERRUPTED_LINE = "lockgate: interrupted"


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--store",
        metavar="URL",
        help=f"store URL, e.g. sqlite:///lockgate.db (default: ${STORE_URL_ENV})",
    )
    common.add_argument(
        "--journal",
        metavar="URL",
        help="keep a valkey:// store's journals in Kafka, e.g. kafka://host:9092"
        f"?topic_prefix=orders (default: ${JOURNAL_URL_ENV})",
    )
    parser = argparse.ArgumentParser(
        prog="lockgate",
        description="Run workers, start runs and look after them on a lockgate store.",
        epilog="exit codes: 0 done, 1 the run or operation failed, 2 usage or configuration "
        "error, 70 a worker's topic consumer died of a bug, 130 interrupted. Docs: docs/cli.md",
    )
    parser.add_argument("--version", action="version", version=f"lockgate {__version__}")
    group = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    _commands.add_run_parsers(group, [common])
    _serve.add_parser(group, [common])
    _triggers.add_parsers(group, [common])
    _bound.add_parsers(group, [common])
    _runs.add_parsers(group, [common])
    _commands.add_admin_parsers(group, [common])
    _journal.add_parsers(group)
    _topics.add_parsers(group)
    _dev.add_parser(group)
    return parser


def _dispatch(args: argparse.Namespace) -> int:
    check_names(args)
    if args.run is None:
        code: int = args.demo(args)
        return code
    if getattr(args, "opens_no_store", False):  # `journal replay` reads Kafka alone
        return int(args.run(args))
    if getattr(args, "opens_store", False):  # `worker` waits for a store that does not answer
        loop_factory = getattr(args, "loop_factory", None)
        with asyncio.Runner(loop_factory=loop_factory() if loop_factory else None) as runner:
            return int(runner.run(args.run(args)))
    # Only a worker and `store init` create a store that does not exist yet (a URL can ask
    # for it with ?create=true): any other command on a missing file is a mistyped path or a
    # store that was removed, and a new empty one there would hide that.
    store = open_store(
        args.store,
        option_defaults={"create": getattr(args, "creates_store", False)},
        journal=args.journal,
    )
    try:
        outcome = args.run(args, store)
        code = asyncio.run(outcome) if inspect.iscoroutine(outcome) else outcome
    except KeyboardInterrupt:
        # Left open: a store call may still be running on a store thread, and closing under
        # it would wait for it (an SQLite busy wait, a socket timeout) or break it. The process
        # is ending (see ``run``).
        raise
    except BaseException:
        store.close()
        raise
    store.close()
    return code


def run() -> NoReturn:
    """The ``lockgate`` program: :func:`main`, then exit with its code.

    An interrupted command exits at once: from the first Ctrl-C on, further ones are ignored,
    and the interpreter's shutdown is skipped, since that shutdown waits for store threads
    still inside a call, and a second Ctrl-C landing in it printed a traceback."""
    try:
        code = main(exiting=True)
    except KeyboardInterrupt:  # a second Ctrl-C before the first was reported
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        print(INTERRUPTED_LINE, file=sys.stderr, flush=True)
        code = INTERRUPTED
    if code != INTERRUPTED:
        sys.exit(code)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(INTERRUPTED)


def main(argv: Sequence[str] | None = None, *, exiting: bool = False) -> int:
    """Run the ``lockgate`` command line with ``argv`` (default ``sys.argv[1:]``) and return
    its exit code. ``exiting`` says the process ends with it (:func:`run`): then an interrupt
    also makes the process ignore further ones."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:
        return exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 2)
    try:
        return _dispatch(args)
    except KeyboardInterrupt:
        if exiting:  # before the line, so that a second Ctrl-C cannot land after it
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        print(INTERRUPTED_LINE, file=sys.stderr, flush=True)
        return INTERRUPTED
    except BrokenPipeError:
        # The reader went away (`| head`): stop quietly, as a program killed by SIGPIPE does,
        # and keep the interpreter's last flush of stdout from failing again.
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return BROKEN_PIPE
    except (Failure, LockgateError, ValueError, OSError) as exc:
        if os.environ.get(DEBUG_ENV):
            raise
        return report(exc)
