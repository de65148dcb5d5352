"""Reading what the command line gives: JSON objects, counts and durations, names and ids."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any, TypeAlias

from lockgate._names import check_name
from lockgate._output import note
from lockgate._text import check_text
from lockgate.cli._exits import Failure

#: How a JSON option's help says it also reads a file or standard input.
FROM_FILE = "@FILE reads it from FILE, - from standard input"
#: What ``add_subparsers()`` returns; argparse gives the type no public name.
Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


class _NotJSON(ValueError):
    """A constant Python's JSON reader takes but JSON has not (NaN, Infinity, -Infinity)."""


def _refuse_constant(name: str) -> Any:
    raise _NotJSON(name)


def json_object(given: str, option: str) -> dict[str, Any]:
    """The JSON object ``given`` spells; ``@PATH`` reads it from that file and ``-`` from
    standard input, for objects too big for a command line. Anything that is not one JSON
    object (NaN and Infinity are not JSON) is a usage error naming ``option`` and the source."""
    value, where = _json(given, option, "a JSON object ({...})")
    if not isinstance(value, dict):
        raise Failure(f"{where} must be a JSON object ({{...}}), not {type(value).__name__}")
    return value


def json_value(given: str, option: str) -> Any:
    """The JSON value ``given`` spells (an object, a list, a string in quotes, a number,
    true, false or null), read as :func:`json_object` reads an object."""
    return _json(given, option, "a JSON value")[0]


def _json(given: str, option: str, wanted: str) -> tuple[Any, str]:
    """The JSON ``given`` spells, and how to name where it came from."""
    text, where = _json_text(given, option)
    if not text.strip():
        raise Failure(f"{where} is empty: give {wanted}")
    try:
        value = json.loads(text, parse_constant=_refuse_constant)
    except _NotJSON as exc:
        raise Failure(
            f"{where}: {exc} is not JSON (JSON has no NaN or Infinity; use a number or null)"
        ) from None
    except json.JSONDecodeError as exc:
        raise Failure(f"{where} is not valid JSON: {exc}") from None
    except RecursionError:
        raise Failure(f"{where} is nested too deeply to read as JSON") from None
    check_text(value, where)  # InvalidTextError: exit 2, one line
    return value, where


#: The arguments holding names or ids: the argument, what it is, and whether its length is
#: checked too. A run id names an existing run, which a hand-on may have made longer than any
#: id given at submit (it adds ``.g``): its characters only are checked.
NAMED_ARGUMENTS = (
    ("name", "workflow name", True),
    ("run_id", "run id", False),
    ("signal", "signal name", True),
    ("signal_id", "signal id", True),
    ("wait_id", "wait id", True),
    ("idempotency_key", "idempotency key", True),
)


def check_names(args: argparse.Namespace) -> None:
    """Refuse, before the store is opened, a name or id the naming rules refuse
    (:class:`InvalidNameError`: exit 2, one line)."""
    for argument, what, length in NAMED_ARGUMENTS:
        value = getattr(args, argument, None)
        if value is not None:
            check_name(what, value, length=length)


def _json_text(given: str, option: str) -> tuple[str, str]:
    """The text ``given`` stands for, and how to name where it came from."""
    if given == "-":
        return _decoded(_stdin_bytes(option), f"{option} (stdin)"), f"{option} (stdin)"
    if not given.startswith("@"):
        return given, option
    where = f"{option} {given}"
    if given == "@":
        raise Failure(f"{where} names no file: give @PATH, or - to read standard input")
    try:
        data = Path(given[1:]).expanduser().read_bytes()
    except FileNotFoundError:
        raise Failure(f"{where}: no such file") from None
    except IsADirectoryError:
        raise Failure(f"{where}: is a directory, not a file") from None
    except PermissionError:
        raise Failure(f"{where}: cannot read it (permission denied)") from None
    except OSError as exc:
        raise Failure(f"{where}: cannot read it ({exc.strerror or exc})") from None
    return _decoded(data, where), where


def _stdin_bytes(option: str) -> bytes | str:
    stream = sys.stdin
    if stream is None:
        raise Failure(f"{option} -: there is no standard input to read")
    if stream.isatty():
        note(f"reading {option} from standard input; end it with Ctrl-D")
    buffer = getattr(stream, "buffer", None)
    return buffer.read() if buffer is not None else stream.read()


def _decoded(data: bytes | str, where: str) -> str:
    if isinstance(data, str):
        return data
    try:
        return data.decode("utf-8-sig")  # a byte-order mark some editors write is no error
    except UnicodeDecodeError as exc:
        raise Failure(
            f"{where} is not UTF-8 text (byte {exc.start} is {data[exc.start : exc.start + 1]!r})"
        ) from None


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {value}")
    return value


def count(text: str) -> int:
    """A whole number >= 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds >= 0, got {text}")
    return value


def port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= value <= 65_535:
        raise argparse.ArgumentTypeError(f"must be 0 (any free port) to 65535, got {value}")
    return value
