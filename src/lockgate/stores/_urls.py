"""Store URLs read into a constructor call: the options every backend's URL takes, one parser.

A URL's query parameters, and options given as keywords, are keyword arguments of the store
class's constructor: each is checked against the constructor's signature and converted to the
type it declares, so a misspelt option, or one only another backend takes, fails loudly instead
of doing nothing. :func:`lockgate.stores.open_store` (``stores/opener/``) and a backend's own
``from_url`` share this module, so that no backend imports the opener above it.
"""

from __future__ import annotations

import inspect
import math
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, Literal, TypeVar
from urllib.parse import parse_qsl, unquote, urlsplit

from lockgate._errors import ConfigurationError

T = TypeVar("T")

#: The environment variable ``open_store`` reads when it is given no URL.
STORE_URL_ENV = "LOCKGATE_STORE_URL"
#: The environment variable ``open_store`` reads when it is given no journal URL.
JOURNAL_URL_ENV = "LOCKGATE_JOURNAL_URL"
#: The store URLs :func:`lockgate.stores.open_store` opens, as a refusal lists them.
STORE_SCHEMES = (
    "memory://",
    "sqlite:///PATH",
    "valkey://HOST:PORT/DB",
    "rediss://",
    "unix://PATH",
)
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})
_NONE = frozenset({"", "none", "null"})


def split_url(
    url: str, what: str = "store URL", *, shown: object = None
) -> tuple[str, str, list[tuple[str, str]]]:
    """``(scheme, location, query pairs)``; the location is host and path, undecoded. ``what``
    names the URL in a refusal, which quotes it as ``shown`` (default: the URL itself)."""
    shown = url if shown is None else shown
    if not isinstance(url, str) or "://" not in url:
        supported = "kafka://" if what == "journal URL" else ", ".join(STORE_SCHEMES)
        raise ConfigurationError(f"{what} {shown!r} has no scheme; supported: {supported}")
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise ConfigurationError(f"{what} {shown!r} does not parse: {exc}") from exc
    if parts.fragment:
        raise ConfigurationError(f"{what} {shown!r} has a fragment ('#...'); remove it")
    try:
        query = parse_qsl(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query))
    except ValueError as exc:
        raise ConfigurationError(f"{what} {shown!r} has a malformed query: {exc}") from exc
    return parts.scheme.lower(), parts.netloc + parts.path, query


def sqlite_path(url: str, location: str) -> str:
    if not location.startswith("/"):
        raise ConfigurationError(
            f"sqlite URL {url!r} names a host; use sqlite:///relative.db or "
            "sqlite:////absolute/path.db"
        )
    path = unquote(location[1:])
    if not path or path.endswith("/"):
        raise ConfigurationError(
            f"sqlite URL {url!r} names no file; use sqlite:///relative.db or "
            "sqlite:////absolute/path.db"
        )
    return path


def construct(
    label: str,
    cls: Callable[..., T],
    args: tuple[Any, ...],
    query: list[tuple[str, str]],
    options: dict[str, Any],
    option_defaults: Mapping[str, Any] | None = None,
    *,
    in_url: tuple[str, ...] = (),
) -> T:
    """``cls(*args, **options)`` with the URL's ``query`` among the options, each checked and
    typed; ``in_url`` names what the URL itself takes besides (named when refusing one)."""
    accepted = _keyword_parameters(cls)
    kwargs: dict[str, Any] = {}
    for key, text in query:
        if key in kwargs:
            raise ConfigurationError(f"{label} store option {key!r} is given twice in the URL")
        kwargs[key] = _convert(label, key, text, accepted, in_url, from_url=True)
    for key, value in options.items():
        if key in kwargs:
            raise ConfigurationError(
                f"{label} store option {key!r} is given both in the URL and as an argument"
            )
        kwargs[key] = _convert(label, key, value, accepted, in_url, from_url=False)
    for key, value in (option_defaults or {}).items():
        if key in accepted and key not in kwargs:
            kwargs[key] = value
    try:
        return cls(*args, **kwargs)
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(f"{label} store: {exc}") from exc


def _keyword_parameters(cls: Callable[..., Any]) -> dict[str, tuple[Any, Any]]:
    """``{name: (declared type, default)}`` of the keyword-only parameters of ``cls``."""
    init = getattr(cls, "__init__", cls)
    try:
        hints = typing.get_type_hints(init)
    except (NameError, TypeError):
        hints = {}
    accepted: dict[str, tuple[Any, Any]] = {}
    for parameter in inspect.signature(cls).parameters.values():
        if parameter.kind is not inspect.Parameter.KEYWORD_ONLY:
            continue
        declared = hints.get(parameter.name)
        if declared is None and parameter.default not in (None, inspect.Parameter.empty):
            declared = type(parameter.default)
        accepted[parameter.name] = (declared, parameter.default)
    return accepted


def _convert(
    label: str,
    key: str,
    value: Any,
    accepted: dict[str, tuple[Any, Any]],
    in_url: tuple[str, ...],
    *,
    from_url: bool,
) -> Any:
    if key not in accepted:
        known = ", ".join([*in_url, *sorted(accepted)]) or "none"
        raise ConfigurationError(f"{label} store takes no option {key!r} (it takes: {known})")
    if not isinstance(value, str):
        return value
    declared = accepted[key][0]
    try:
        return from_text(declared, value)
    except _NotText:
        if from_url:
            raise ConfigurationError(
                f"{label} store option {key!r} cannot be given in a URL; pass it in code"
            ) from None
        return value
    except ValueError as exc:
        raise ConfigurationError(f"{label} store option {key!r}: {exc}") from None


class _NotText(Exception):
    """The declared type has no text spelling (a callable, an object)."""


def from_text(declared: Any, text: str) -> Any:
    """``text`` as a value of ``declared``; ValueError when it does not spell one."""
    if declared is None or declared is Any or declared is str:
        return text
    origin = typing.get_origin(declared)
    if origin is typing.Union or origin is types.UnionType:
        members = [m for m in typing.get_args(declared) if m is not type(None)]
        if text.strip().lower() in _NONE and len(members) < len(typing.get_args(declared)):
            return None
        if len(members) == 1:
            return from_text(members[0], text)
        for member in members:
            try:
                return from_text(member, text)
            except (ValueError, _NotText):
                continue
        raise ValueError(f"{text!r} fits none of {declared}")
    if origin is Literal:
        choices = typing.get_args(declared)
        for choice in choices:
            if isinstance(choice, str) and choice == text:
                return choice
        raise ValueError(f"must be one of {', '.join(map(repr, choices))}, got {text!r}")
    if declared is bool:
        lowered = text.strip().lower()
        if lowered in _TRUE | _FALSE:
            return lowered in _TRUE
        raise ValueError(f"must be true or false, got {text!r}")
    if declared is int:
        try:
            return int(text.strip())
        except ValueError:
            raise ValueError(f"must be a whole number, got {text!r}") from None
    if declared is float:
        try:
            number = float(text.strip())
        except ValueError:
            raise ValueError(f"must be a number, got {text!r}") from None
        if not math.isfinite(number):
            raise ValueError(f"must be a finite number, got {text!r}")
        return number
    raise _NotText()
