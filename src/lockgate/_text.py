"""JSON values and text that strict readers can take: the lone-surrogate checks every boundary
makes (:func:`check_text`) and the replacements every reader of stored data makes
(:func:`readable`). On its own, so that printing a stored value imports nothing else."""

from __future__ import annotations

import json
from typing import Any

from lockgate._errors import InvalidTextError


def json_ready(value: Any) -> bool:
    """True if ``value`` is strict JSON: no NaN or infinities, and no string holding a lone
    surrogate (which has no UTF-8 form), both of which strict readers refuse."""
    try:
        json.dumps(value, allow_nan=False, ensure_ascii=False).encode()
    except (TypeError, ValueError):  # UnicodeEncodeError is a ValueError
        return False
    return True


def check_text(value: Any, what: str) -> None:
    """Refuse, with :class:`InvalidTextError` naming ``what`` and where in it, a value with a
    string (or a key) holding a lone surrogate. Stored, such a value could not be read back
    by any strict JSON reader (a page of runs holding it would fail for every reader), so
    every boundary that takes JSON from outside refuses it here. A value that is no JSON at
    all is left to the caller's own check."""
    try:
        json.dumps(value, allow_nan=False, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        path = _surrogate_path(value)
        raise InvalidTextError(
            f"{what} holds a lone surrogate (U+D800-U+DFFF, such as the escape \\ud800) at "
            f"{path}, which UTF-8 cannot carry; nothing was written",
            what=what,
            path=path,
        ) from None
    except (TypeError, ValueError, RecursionError):
        return


def readable(value: Any) -> Any:
    """``value`` with every lone surrogate in its strings (and keys) replaced by U+FFFD, for a
    reader that must show stored data whatever it holds: such a value cannot be written as
    UTF-8, and a page holding it would otherwise fail for every reader. The boundaries refuse
    such strings (:func:`check_text`), but a store may hold some written before they did.
    ``value`` itself when it has none, which is what a quick check finds first."""
    try:
        json.dumps(value, ensure_ascii=False, default=repr).encode()
    except UnicodeEncodeError:
        return _replaced(value)
    except (TypeError, ValueError, RecursionError):
        return value
    return value


def readable_text(text: str) -> str:
    """``text`` with each lone surrogate replaced by U+FFFD."""
    if not _unencodable(text):
        return text
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def _replaced(value: Any) -> Any:
    if isinstance(value, str):
        return readable_text(value)
    if isinstance(value, dict):
        return {
            readable_text(k) if isinstance(k, str) else k: _replaced(v) for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [_replaced(item) for item in value]
    return value


def _surrogate_path(value: Any) -> str:
    """Where in ``value`` the first string holding a lone surrogate is, as ``$.a[0]``."""
    stack: list[tuple[Any, str]] = [(value, "$")]
    while stack:
        item, path = stack.pop()
        if isinstance(item, str):
            if _unencodable(item):
                return path
        elif isinstance(item, dict):
            for key, inner in reversed(list(item.items())):
                if isinstance(key, str) and _unencodable(key):
                    return f"{path} (a key)"
                stack.append((inner, f"{path}.{key}"))
        elif isinstance(item, list | tuple):
            stack.extend((inner, f"{path}[{i}]") for i, inner in reversed(list(enumerate(item))))
    return "$"


def _unencodable(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return True
    return False
