"""``lockgate``: argument parsing, dispatch, and exit codes.

Every command is a thin layer over the public client and the store: it opens the store the
``--store`` URL (or ``LOCKGATE_STORE_URL``) names, does one thing, and exits 0 when it did it,
1 when the run or the operation failed, 2 when the command cannot work as given. A failure is
one line on stderr; set ``LOCKGATE_DEBUG=1`` to get the traceback as well.

Starting at once. ``lockgate --version`` imports nothing of lockgate but this module (nor
argparse), ``--help`` this module and ``cli/_help`` (which writes the page argparse would,
without argparse), and a command imports only what it needs, when it runs. The pattern, for a
new command:

- Add one line to :data:`COMMANDS`: the command's name, the module (under ``lockgate.cli``)
  whose ``add_parsers(group, common)`` adds it, and the line ``lockgate --help`` shows for it.
  ``--help`` lists the commands from this table alone; a command line naming a command imports
  its module and builds that module's parsers only (``cli/_parser.build_parser``;
  ``tests/test_cli_imports.py`` checks the table against the parsers).
- In that module, ``add_parsers`` adds the subparser (``group.add_parser(NAME, parents=common,
  help=...)`` with the same help line) and ``set_defaults(run=handler)``: ``run(args, store)``
  gets the store opened from ``--store``/``--journal``; with ``opens_store=True`` it is a
  coroutine ``run(args)`` that opens its own, with ``opens_no_store=True`` a plain
  ``run(args)``. A handler may be a coroutine or a plain function; one that awaits nothing is
  better plain, since running a coroutine imports asyncio (``runs list`` is plain).
- A new command group gets a module of its own (``lockgate topics`` in ``cli/_topics.py``), so
  that branches adding commands meet only in their one line each of :data:`COMMANDS`.
- Keep that module's top-level imports light (argparse, ``cli._params``, ``lockgate._output``,
  ``cli._exits``, ``stores._urls``, ``stores.opener._open``, enums and option dataclasses):
  import the client, the worker, a store backend, ``streams``, ``http``, confluent_kafka, redis
  or fastapi inside the handler that uses them (types for annotations under
  ``if TYPE_CHECKING:``).
  ``tests/test_cli_imports.py`` fails when ``--help`` or ``runs list`` on SQLite imports one
  of the heavy modules it names.

The package ``__init__``s help: they import their names when first used (``lockgate._lazy``),
so ``from lockgate.stores.opener._open import open_store`` imports no backend.
"""

from __future__ import annotations

import contextlib
import os
import sys

from lockgate import __version__

TYPE_CHECKING = False  # typing itself is not imported for ``--version``
if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence
    from typing import NoReturn

DEBUG_ENV = "LOCKGATE_DEBUG"
INTERRUPTED_LINE = "lockgate: interrupted"
#: The exit code of an interrupted command (as :data:`lockgate.cli._exits.INTERRUPTED`).
INTERRUPTED = 130

#: Every command: the module whose ``add_parsers(group, common)`` adds it, and its line in
#: ``lockgate --help``, in the order ``--help`` lists them.
COMMANDS: dict[str, tuple[str, str]] = {
    "worker": ("_commands", "run a worker until interrupted"),
    "submit": ("_commands", "start a run; prints its id"),
    "serve": ("_serve", "serve the HTTP API until interrupted"),
    "trigger": (
        "_triggers",
        "send events to a Collect or Debounce workflow; prints the run a Collect batch "
        "fired, else 'buffered' (with a Kafka journal: 'sent', the fires happen in the workers)",
    ),
    "triggers": ("_triggers", "look at the trigger topics of a Kafka journal"),
    "bound": ("_bound", "look at the topics of workflows bound to Kafka topics"),
    "runs": ("_runs", "look at runs and talk to them"),
    "store": ("_commands", "the store itself"),
    "demo": ("_commands", "a durable workflow on SQLite with a worker, live (--kafka: streaming)"),
    "journal": ("_journal", "the Kafka journal topic itself"),
    "topics": ("_topics", "create and look at Kafka topics (a bound workflow's)"),
    "dev": ("_dev", "start a Valkey server and a Kafka broker on this machine, until Ctrl-C"),
}


def _command(argv: Sequence[str]) -> str | None:
    """The command a command line names: its first word. When that is an option, it is one of
    ``lockgate``'s own (``--help``, ``--version``, or a mistake), which the parser answers with
    the line of every command: ``lockgate --help runs`` shows them all, as it did."""
    return argv[0] if argv and not argv[0].startswith("-") else None


def _dispatch(args: argparse.Namespace) -> int:
    from collections.abc import Coroutine

    from lockgate.cli._params import check_names
    from lockgate.stores.opener._open import open_store

    check_names(args)
    if args.run is None:
        code: int = args.demo(args)
        return code
    if getattr(args, "opens_no_store", False):  # `journal replay` reads Kafka alone
        return int(args.run(args))
    if getattr(args, "opens_store", False):  # `worker` waits for a store that does not answer
        import asyncio

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
        if isinstance(outcome, Coroutine):
            import asyncio  # a command that needs no event loop starts none

            code = asyncio.run(outcome)
        else:
            code = outcome
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
        import signal  # here: it imports enum, which `--version` need not

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
    words = sys.argv[1:] if argv is None else list(argv)
    if words == ["--version"]:  # what argparse would print, without importing it
        print(f"lockgate {__version__}")
        return 0
    if words in (["--help"], ["-h"]):  # the page argparse would print, without it if we can
        from lockgate.cli._help import top_help, width

        page = top_help(width())
        if page is not None:
            with contextlib.suppress(AttributeError, OSError):  # as argparse writes it
                sys.stdout.write(page)
            return 0
    from lockgate.cli._parser import build_parser

    parser = build_parser(_command(words))
    try:
        args = parser.parse_args(words)
    except SystemExit as exit_:
        return exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 2)
    from lockgate._errors import LockgateError
    from lockgate.cli._exits import BROKEN_PIPE, Failure, report

    try:
        return _dispatch(args)
    except KeyboardInterrupt:
        if exiting:  # before the line, so that a second Ctrl-C cannot land after it
            import signal

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
