"""A package's public names imported when first used (PEP 562), not when the package is.

Importing any module of lockgate runs the ``__init__`` of every package above it, so an
``__init__`` that imported its names eagerly made ``lockgate --version`` import every backend,
the HTTP stack and pydantic. A package instead hands :func:`lazy_exports` a table of where each
name lives and assigns what it returns to its ``__getattr__`` and ``__dir__``; it keeps its
literal ``__all__`` and repeats the imports under ``if TYPE_CHECKING:`` so that type checkers
and readers still see every name. ``from lockgate.stores import SQLiteStore`` and
``lockgate.stores.SQLiteStore`` work as before: the first use imports the defining module and
keeps the value on the package, so later uses are plain attribute reads.
"""

from __future__ import annotations

import importlib
import sys

TYPE_CHECKING = False  # not typing's: this module is imported by `lockgate --version`
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from typing import Any


def lazy_exports(
    package: str, table: Mapping[str, Sequence[str]]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``, whose names are in ``table``
    (defining module -> the names taken from it)."""
    where = {name: module for module, names in table.items() for name in names}

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(where))

    return __getattr__, __dir__
