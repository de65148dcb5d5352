"""The ``lockgate`` parser: a line per command of :data:`~lockgate.cli._main.COMMANDS`, or the
parsers of the one command a command line names (see ``cli/_main``)."""

from __future__ import annotations

import argparse
import importlib

from lockgate import __version__
from lockgate.cli._help import DESCRIPTION, EPILOG, PROG, width
from lockgate.cli._main import COMMANDS

TYPE_CHECKING = False  # typing itself is not imported for ``--help``
if TYPE_CHECKING:
    from typing import Any


def _common() -> argparse.ArgumentParser:
    """The options every command that opens a store takes."""
    from lockgate.stores._urls import JOURNAL_URL_ENV, STORE_URL_ENV

    common = _Parser(add_help=False)
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
    return common


def _formatter(prog: str) -> argparse.HelpFormatter:
    return argparse.HelpFormatter(prog, width=width())  # argparse's own width


class _Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` with :func:`_formatter` (argparse makes a formatter for every
    argument added, and the subparsers of a parser are of its class)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _formatter)
        super().__init__(*args, **kwargs)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser for a command line naming ``command``: that command's module's parsers, or,
    with ``None`` (or a name that is no command), a line per command, which is all that
    ``lockgate --help`` shows and all that an error naming no command needs."""
    parser = _Parser(prog=PROG, description=DESCRIPTION, epilog=EPILOG)
    parser.add_argument("--version", action="version", version=f"lockgate {__version__}")
    group = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    if command in COMMANDS:
        module = importlib.import_module(f"lockgate.cli.{COMMANDS[command][0]}")
        module.add_parsers(group, [_common()])
    else:
        for name, (_, line) in COMMANDS.items():
            group.add_parser(name, help=line, add_help=False)  # only listed, never parsing
    return parser
