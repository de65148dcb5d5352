"""Reading what the command line gives: JSON objects, counts and durations, names and ids."""

from __future__ import annotations

import argparse
import json
import math
from typing import Any, TypeAlias

from lockgate._names import check_name
from lockgate.cli._exits import Failure

#: What ``add_subparsers()`` returns; argparse gives the type no public name.
Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def json_object(text: str, option: str) -> dict[str, Any]:
    """``text`` parsed as a JSON object; anything else is a usage error naming ``option``."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise Failure(f"{option} is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise Failure(f"{option} must be a JSON object ({{...}}), not {type(value).__name__}")
    return value


#: The arguments holding names or ids: the argument, what it is, and whether its length is
#: checked too. A run id names an existing run, which a hand-on may have made longer than any
#: id given at submit (it adds ``.g``): its characters only are checked.
NAMED_ARGUMENTS = (
    ("name", "workflow name", True),
    ("run_id", "run id", False),
    ("signal", "signal name", True),
    ("signal_id", "signal id", True),
    ("idempotency_key", "idempotency key", True),
)


def check_names(args: argparse.Namespace) -> None:
    """Refuse, before the store is opened, a name or id the naming rules refuse
    (:class:`InvalidNameError`: exit 2, one line)."""
    for argument, what, length in NAMED_ARGUMENTS:
        value = getattr(args, argument, None)
        if value is not None:
            check_name(what, value, length=length)


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {value}")
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
