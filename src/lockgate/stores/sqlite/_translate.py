"""Failures of the SQLite library, translated at the store's edge."""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from lockgate._errors import StoreUnavailable

P = ParamSpec("P")
R = TypeVar("R")


def translated(method: Callable[P, R]) -> Callable[P, R]:
    """Turn a failure of the SQLite library into StoreUnavailable, chained to its cause."""

    @functools.wraps(method)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return method(*args, **kwargs)
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"SQLite failed in {method.__name__}: {exc}") from exc

    return wrapper
