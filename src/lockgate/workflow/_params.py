"""Params checked at submit against the workflow body: the names it takes, and the values its
annotations allow.

A run's params reach the body as the JSON they were stored as, so a value is checked as JSON
against its parameter's annotation, with pydantic in strict mode: what is accepted is what the
body will be handed (``n: int`` takes ``5``, not ``"5"`` or ``5.0``), and a type JSON has no
spelling for (a ``datetime``, a ``UUID``, a pydantic model) takes the JSON pydantic reads as
one. The params are stored as given, never converted: what was submitted is what the journal
holds, the idempotency hash and the gate keys are computed from, and what every replay sees.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import typing
import weakref
from collections.abc import Callable
from typing import Any

from pydantic import PydanticSchemaGenerationError, TypeAdapter, ValidationError

from lockgate._errors import InvalidParamsError

#: Where the adapter of the ``**kwargs`` annotation is kept, beside those of named params.
EXTRA = "**"
#: How much of a refused value its error message shows.
SHOWN = 60

#: A parameter's annotation, and the adapter that checks values against it.
Check = tuple[Any, TypeAdapter[Any]]

_ADAPTERS: weakref.WeakKeyDictionary[Any, dict[str, Check]] = weakref.WeakKeyDictionary()


def body_parameters(fn: Callable[..., Any]) -> list[inspect.Parameter]:
    """The body's parameters after the context."""
    return list(inspect.signature(fn).parameters.values())[1:]


def check_params(name: str, fn: Callable[..., Any], params: dict[str, Any]) -> None:
    """Refuse, with :class:`InvalidParamsError` naming the parameter, params the body cannot
    take: a name it does not take, one it needs and is not given, a value its annotation does
    not allow. Defaults are the body's own and are not checked."""
    parameters = body_parameters(fn)
    accepts_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)
    named = {
        p.name: p
        for p in parameters
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    }
    if not accepts_any:
        for key in params:
            if key not in named:
                raise InvalidParamsError(
                    f"workflow {name!r} takes no parameter {key!r} "
                    f"(it takes: {', '.join(named) or 'none'})",
                    workflow=name,
                    parameter=key,
                )
    for pname, parameter in named.items():
        if parameter.default is inspect.Parameter.empty and pname not in params:
            raise InvalidParamsError(
                f"workflow {name!r} needs parameter {pname!r}", workflow=name, parameter=pname
            )
    checks = _checks(fn)
    for key, value in params.items():
        check = checks.get(key if key in named else EXTRA)
        if check is not None:
            _check_value(name, key, value, check)


def _check_value(name: str, key: str, value: Any, check: Check) -> None:
    hint, adapter = check
    try:
        text = json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return  # not JSON at all: the submit refuses it next, saying so
    try:
        adapter.validate_json(text, strict=True)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first.get("loc", ()))
        shown = text if len(text) <= SHOWN else text[: SHOWN - 3] + "..."
        raise InvalidParamsError(
            f"workflow {name!r}: parameter {key!r}{f' at {where}' if where else ''} must be "
            f"{_type_name(hint)}: {first['msg']} (got {shown})",
            workflow=name,
            parameter=key,
        ) from exc


def _checks(fn: Callable[..., Any]) -> dict[str, Check]:
    """A pydantic adapter per annotated parameter of ``fn`` (and ``EXTRA`` for an annotated
    ``**kwargs``), built once. Left out, so not checked: unannotated parameters, ``Any``, and
    annotations that cannot be resolved or have no pydantic schema (a type no JSON value could
    be anyway)."""
    try:
        return _ADAPTERS[fn]
    except (KeyError, TypeError):
        pass
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception:
        hints = None  # one annotation does not resolve: resolve the others one by one
    checks: dict[str, Check] = {}
    for parameter in body_parameters(fn):
        hint = hints.get(parameter.name, Any) if hints is not None else _resolved(fn, parameter)
        if hint is Any or parameter.kind is inspect.Parameter.VAR_POSITIONAL:
            continue
        try:
            adapter: TypeAdapter[Any] = TypeAdapter(hint)
        except (PydanticSchemaGenerationError, TypeError, NameError):
            continue
        key = EXTRA if parameter.kind is inspect.Parameter.VAR_KEYWORD else parameter.name
        checks[key] = (hint, adapter)
    with contextlib.suppress(TypeError):  # not weak-referenceable: built again next time
        _ADAPTERS[fn] = checks
    return checks


def _resolved(fn: Callable[..., Any], parameter: inspect.Parameter) -> Any:
    """One parameter's annotation, a string evaluated as ``typing.get_type_hints`` would (in
    the body's module); ``Any`` when it does not resolve (a name imported only for type
    checkers, say), so that parameter alone goes unchecked."""
    annotation = parameter.annotation
    if annotation is inspect.Parameter.empty:
        return Any
    if not isinstance(annotation, str):
        return annotation
    try:
        return eval(annotation, dict(getattr(fn, "__globals__", {})))
    except Exception:
        return Any


def _type_name(hint: Any) -> str:
    if isinstance(hint, type):
        return hint.__name__
    return str(hint).replace("typing.", "")
