"""``lockgate --help`` written from :data:`~lockgate.cli._main.COMMANDS` without argparse.

Importing argparse (with ``gettext`` and ``locale``, which its help messages use) and building
the parser cost more than the interpreter's own start, so ``lockgate --help`` alone prints the
page itself, laid out exactly as ``argparse.HelpFormatter`` lays out the parser
``cli/_parser.build_parser`` makes: the same width, the same help column, the same wrapping
(``textwrap``, which argparse uses too). Where that layout would take a turn not reproduced
here (a terminal too narrow for the usage line, a Python whose argparse colours its help),
:func:`top_help` returns None and argparse prints the page. ``tests/test_cli_imports.py``
compares the two at every width from 1 to 200 columns.
"""

from __future__ import annotations

import contextlib
import os
import sys

from lockgate.cli._main import COMMANDS

PROG = "lockgate"
DESCRIPTION = "Run workers, start runs and look after them on a lockgate store."
EPILOG = (
    "exit codes: 0 done, 1 the run or operation failed, 2 usage or configuration "
    "error, 70 a worker's topic consumer died of a bug, 130 interrupted. Docs: docs/cli.md"
)
#: What argparse writes for ``-h`` and ``--version`` (its own help lines).
OPTIONS = (
    ("-h, --help", "show this help message and exit"),
    ("--version", "show program's version number and exit"),
)
USAGE = f"{PROG} [-h] [--version] COMMAND ..."
#: argparse's own: the widest the column of invocations may grow before the help column.
MAX_HELP_POSITION = 24


def columns() -> int:
    """The terminal's width as ``shutil.get_terminal_size`` finds it (``$COLUMNS``, else the
    terminal of stdout, else 80), without importing shutil and the compression modules it
    imports, which argparse does to find it: a tenth of what ``--help`` took."""
    with contextlib.suppress(KeyError, ValueError):
        if (given := int(os.environ["COLUMNS"])) > 0:
            return given
    try:
        return os.get_terminal_size(sys.__stdout__.fileno()).columns or 80  # type: ignore[union-attr]
    except (AttributeError, ValueError, OSError):  # no stdout, or no terminal
        return 80


def width() -> int:
    """The width argparse formats the help to: the terminal's, less 2 (as argparse does)."""
    return columns() - 2


def top_help(text_width: int) -> str | None:
    """The page ``lockgate --help`` prints at ``text_width`` (see :func:`width`), or None when
    argparse must lay it out itself."""
    if sys.version_info >= (3, 14):  # argparse may colour its help there: leave it to it
        return None
    if len("usage: ") + len(USAGE) > text_width:  # argparse wraps the usage line then
        return None
    import textwrap  # what argparse wraps with; `re` is imported already by the console script

    def fill(text: str) -> str:
        return textwrap.fill(" ".join(text.split()), max(text_width, 11))

    # The column of help lines: after the longest invocation, which argparse measures at the
    # section's indent (2), the commands' (indented 4 when shown) included.
    longest = 2 + max(len("COMMAND"), *map(len, COMMANDS), *(len(o) for o, _ in OPTIONS))
    help_position = min(longest + 2, MAX_HELP_POSITION, max(text_width - 20, 4))
    help_width = max(text_width - help_position, 11)

    def item(indent: int, invocation: str, help_text: str) -> str:
        lines = textwrap.wrap(" ".join(help_text.split()), help_width)
        action_width = help_position - indent - 2
        if len(invocation) <= action_width:  # the help starts on the invocation's line
            head, first = f"{'':{indent}}{invocation:<{action_width}}  ", 0
        else:
            head, first = f"{'':{indent}}{invocation}\n", help_position
        rest = "".join(f"{'':{help_position}}{line}\n" for line in lines[1:])
        return f"{head}{'':{first}}{lines[0]}\n{rest}"

    commands = "".join(item(4, name, line) for name, (_, line) in COMMANDS.items())
    options = "".join(item(2, option, line) for option, line in OPTIONS)
    return (
        f"usage: {USAGE}\n\n{fill(DESCRIPTION)}\n\n"
        f"positional arguments:\n  COMMAND\n{commands}\n"
        f"options:\n{options}\n{fill(EPILOG)}\n"
    )
