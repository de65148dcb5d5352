"""Finding the user's workflows: ``MODULE`` or ``MODULE:ATTR``, imported from the working
directory as ``python -m`` would."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any

from lockgate.cli._exits import Failure

if TYPE_CHECKING:
    from lockgate.workflow._spec import WorkflowSpec


def _spec(obj: object) -> WorkflowSpec | None:
    from lockgate.workflow._spec import WorkflowSpec

    spec = getattr(obj, "__lockgate_workflow__", None)
    return spec if isinstance(spec, WorkflowSpec) else None


def import_module(module_name: str) -> ModuleType:
    """Import ``module_name`` with the working directory on ``sys.path``; any failure of the
    user's module (a missing import, a syntax error, a bad declaration) becomes one line."""
    if not module_name or module_name.startswith("."):
        raise Failure(f"{module_name!r} is not a module name; give MODULE or MODULE:ATTR")
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    try:
        return importlib.import_module(module_name)
    except Exception as exc:
        raise Failure(f"cannot import {module_name!r}: {type(exc).__name__}: {exc}") from exc


def load_workflows(target: str) -> list[Callable[..., Any]]:
    """The ``@workflow`` functions ``target`` names.

    ``MODULE:ATTR`` names one workflow function or a list or tuple of them (``ATTR`` may be
    dotted); ``MODULE`` alone means every workflow function defined in that module."""
    module_name, _, attr = target.partition(":")
    module = import_module(module_name)
    if attr:
        found = _attribute(module, module_name, attr)
        items = list(found) if isinstance(found, list | tuple) else [found]
        for item in items:
            if _spec(item) is None:
                raise Failure(
                    f"{target} is not a @workflow function or a list of them "
                    f"(found {type(item).__name__})"
                )
    else:
        items = [
            value
            for value in vars(module).values()
            if _spec(value) is not None and getattr(value, "__module__", None) == module.__name__
        ]
        if not items:
            raise Failure(
                f"module {module_name!r} defines no @workflow function; "
                f"name them with {module_name}:ATTR"
            )
    unique: dict[str, Callable[..., Any]] = {}
    for item in items:
        spec = _spec(item)
        if spec is not None and callable(item):
            unique.setdefault(spec.name, item)
    return list(unique.values())


def workflow_names(workflows: list[Callable[..., Any]]) -> list[str]:
    return [spec.name for spec in map(_spec, workflows) if spec is not None]


def _attribute(module: ModuleType, module_name: str, attr: str) -> object:
    found: object = module
    for part in attr.split("."):
        try:
            found = getattr(found, part)
        except AttributeError:
            raise Failure(f"module {module_name!r} has no attribute {attr!r}") from None
    return found
