"""Opening a store from a URL: one spelling for the CLI, workers, the environment and code.

``open_store`` knows each scheme's store class and nothing else about it: options, whether
from the URL's query or from keyword arguments, go to that class's constructor. Each one is
checked against the constructor's signature and converted to the type it declares, so a
misspelt option, or one only another backend takes, fails loudly instead of doing nothing.
"""

from __future__ import annotations

import inspect
import math
import os
import types
import typing
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal, TypeVar
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit

from lockgate._errors import ConfigurationError, JournalTopicMismatch, ShardCountMismatch

if TYPE_CHECKING:
    from lockgate.stores._base import Store

T = TypeVar("T")

#: The environment variable ``open_store`` reads when it is given no URL.
STORE_URL_ENV = "LOCKGATE_STORE_URL"
#: The environment variable ``open_store`` reads when it is given no journal URL.
JOURNAL_URL_ENV = "LOCKGATE_JOURNAL_URL"

_SCHEMES = ("memory://", "sqlite:///PATH", "valkey://HOST:PORT/DB", "rediss://", "unix://PATH")
_VALKEY_SCHEMES = frozenset({"valkey", "valkeys", "redis", "rediss", "unix"})
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})
_NONE = frozenset({"", "none", "null"})


def is_valkey_url(url: str) -> bool:
    """Whether ``url``'s scheme is one :func:`open_store` opens a Valkey store for
    (``valkey``, ``valkeys``, ``redis``, ``rediss``, ``unix``); nothing else is checked."""
    return urlsplit(url).scheme in _VALKEY_SCHEMES


def open_store(
    url: str | None = None,
    *,
    default: str | None = None,
    allow_memory: bool = False,
    option_defaults: Mapping[str, Any] | None = None,
    journal: str | None = None,
    **options: Any,
) -> Store:
    """Open the store ``url`` names.

    Without ``url`` the URL comes from ``LOCKGATE_STORE_URL``, and failing that from
    ``default``. Supported URLs:

    - ``sqlite:///relative/path.db`` (relative to the current directory) and
      ``sqlite:////absolute/path.db``: a :class:`SQLiteStore` on that file;
    - ``memory://``: a new :class:`MemoryStore`, only with ``allow_memory=True``, since a store
      that lives inside one process is shared by nobody else;
    - ``valkey://host:port/db`` (also ``redis://``, TLS with ``valkeys://`` or ``rediss://``,
      and ``unix:///path/to/socket?db=0``): a :class:`ValkeyStore` on that server. ``db`` stays
      in the URL; every other query parameter is a store option (``?namespace=orders``).

    Query parameters (``sqlite:///app.db?synchronous=normal&lock_ttl=10``) and ``options`` are
    keyword arguments of the store's constructor; text is converted to the type the constructor
    declares. An option the constructor does not take is refused by name. Every refusal is a
    :class:`ConfigurationError`. ``option_defaults`` are options used only where neither the URL
    nor ``options`` gives them and the store takes them (the CLI opens SQLite with
    ``{"create": False}`` this way, which ``?create=true`` overrides).

    ``journal`` (default: ``LOCKGATE_JOURNAL_URL``), ``kafka://host:port[,host:port]``
    with ``?topic_prefix=...`` and other :class:`KafkaEventLogStore` options, keeps the
    journals in Kafka: the store is then a :class:`CompositeStore` whose lifecycle is a
    :class:`ValkeyLifecycleStore` on the Valkey ``url`` (with its options). A journal URL with
    a SQLite or memory store is a :class:`ConfigurationError`. The journal topic has one
    partition per shard: a Valkey URL without ``shard_count`` takes the count its namespace
    recorded, or, for a namespace that records none yet, the existing topic's (else 1).
    """
    chosen = url if url is not None else os.environ.get(STORE_URL_ENV) or default
    if not chosen:
        raise ConfigurationError(
            f"no store given: pass a store URL or set {STORE_URL_ENV} "
            "(for example sqlite:///lockgate.db)"
        )
    scheme, location, query = _split(chosen)
    journal_url = journal if journal is not None else os.environ.get(JOURNAL_URL_ENV) or None
    if journal_url is not None and not journal_url.strip():
        # Said before the store's scheme is looked at: whatever the store, what is wrong is
        # the journal URL (an empty shell variable, `--journal ""`), not the store's.
        raise ConfigurationError(
            f"the journal URL is empty ({_shown(journal_url)!r}): give "
            "kafka://host:port[,host:port][?topic_prefix=...], or no journal at all"
        )
    if journal_url is not None:
        if scheme not in _VALKEY_SCHEMES:
            raise ConfigurationError(
                f"a journal URL ({_shown(journal_url)!r}) keeps the journals of a Valkey store; "
                f"{scheme}:// stores keep their own: drop the journal URL (or "
                f"{JOURNAL_URL_ENV}), or use a valkey:// store"
            )
        return _composite(chosen, query, journal_url, options, option_defaults)
    if scheme == "memory":
        if not allow_memory:
            raise ConfigurationError(
                "memory:// is a store inside one process, so nothing else (a worker, the CLI, "
                "another process) could see its runs; use sqlite:///PATH"
            )
        if location.strip("/"):
            raise ConfigurationError(f"memory:// takes no location, got {chosen!r}")
        from lockgate.stores.memory._store import MemoryStore

        return _construct("memory", MemoryStore, (), query, options, option_defaults)
    if scheme == "sqlite":
        # Each backend is imported when its URL is opened: the CLI's `--help` imports this
        # module, and a `runs list` on SQLite needs no other backend.
        from lockgate.stores.sqlite._store import SQLiteStore

        path = _sqlite_path(chosen, location)
        return _construct("sqlite", SQLiteStore, (path,), query, options, option_defaults)
    if scheme in _VALKEY_SCHEMES:
        from lockgate.stores.valkey._store import ValkeyStore

        return _valkey(ValkeyStore, chosen, query, options, option_defaults)
    raise ConfigurationError(
        f"unknown store URL scheme {scheme + '://'!r} in {chosen!r}; supported: "
        + ", ".join(_SCHEMES)
    )


def _valkey(
    cls: Callable[..., Store],
    url: str,
    query: list[tuple[str, str]],
    options: dict[str, Any],
    option_defaults: Mapping[str, Any] | None,
) -> Store:
    """A Valkey store of ``cls``: the server's query parameters stay in its URL, the others
    are store options."""
    from lockgate.stores.valkey._connect import SERVER_QUERY

    parts = urlsplit(url)
    kept = urlencode([(k, v) for k, v in query if k in SERVER_QUERY])
    # Built by hand: urlunsplit drops the "//" of a URL with no host (unix:///path).
    server = f"{parts.scheme}://{parts.netloc}{parts.path}" + (f"?{kept}" if kept else "")
    store_options = [(k, v) for k, v in query if k not in SERVER_QUERY]
    return _construct(
        "valkey", cls, (server,), store_options, options, option_defaults, in_url=SERVER_QUERY
    )


def _composite(
    url: str,
    query: list[tuple[str, str]],
    journal: str,
    options: dict[str, Any],
    option_defaults: Mapping[str, Any] | None,
) -> Store:
    """``CompositeStore(lifecycle=ValkeyLifecycleStore(url), events=KafkaEventLogStore(...))``
    with the journal topic partitioned as the lifecycle is sharded."""
    from lockgate.stores._composite import CompositeStore
    from lockgate.stores.kafka._store import KafkaEventLogStore
    from lockgate.stores.valkey._lifecycle_store import ValkeyLifecycleStore

    scheme, _location, journal_query = _split(journal, "journal URL")
    bootstrap = urlsplit(journal).netloc
    if scheme != "kafka" or not bootstrap or urlsplit(journal).path.strip("/"):
        raise ConfigurationError(
            f"journal URL {_shown(journal)!r} is not kafka://host:port[,host:port][?topic_prefix=...]"
        )
    if any(key == "shard_count" for key, _ in journal_query):
        raise ConfigurationError(
            f"journal URL {_shown(journal)!r} names a shard_count: the journal topic has one "
            "partition per shard of the store, so give it in the store URL (or leave it out to "
            "use the one the namespace recorded)"
        )
    # The journal first: a topic already there tells the shard count a namespace made now
    # must get (a rebuild after Valkey lost everything), and one that disagrees with the
    # namespace's recorded count is said as the topic's mismatch.
    events = _construct("kafka", KafkaEventLogStore, (bootstrap,), journal_query, {})
    try:
        given = "shard_count" in options or any(key == "shard_count" for key, _ in query)
        if given or not events.topic_ready:
            lifecycle = _valkey(ValkeyLifecycleStore, url, query, options, option_defaults)
        else:
            try:
                lifecycle = _valkey(
                    ValkeyLifecycleStore,
                    url,
                    query,
                    {**options, "shard_count": events.shard_count},
                    option_defaults,
                )
            except ShardCountMismatch as exc:
                raise JournalTopicMismatch(events.topic, events.shard_count, exc.recorded) from None
    except BaseException:
        events.close()
        raise
    try:
        return CompositeStore(lifecycle=lifecycle, events=events)
    except BaseException:
        lifecycle.close()
        events.close()
        raise


def _split(url: str, what: str = "store URL") -> tuple[str, str, list[tuple[str, str]]]:
    """``(scheme, location, query pairs)``; the location is host and path, undecoded. ``what``
    names the URL in a refusal."""
    shown = _shown(url) if what == "journal URL" and isinstance(url, str) else url
    if not isinstance(url, str) or "://" not in url:
        supported = "kafka://" if what == "journal URL" else ", ".join(_SCHEMES)
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


def _sqlite_path(url: str, location: str) -> str:
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


def _construct(
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
        return _from_text(declared, value)
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


def _from_text(declared: Any, text: str) -> Any:
    """``text`` as a value of ``declared``; ValueError when it does not spell one."""
    if declared is None or declared is Any or declared is str:
        return text
    origin = typing.get_origin(declared)
    if origin is typing.Union or origin is types.UnionType:
        members = [m for m in typing.get_args(declared) if m is not type(None)]
        if text.strip().lower() in _NONE and len(members) < len(typing.get_args(declared)):
            return None
        if len(members) == 1:
            return _from_text(members[0], text)
        for member in members:
            try:
                return _from_text(member, text)
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


def _shown(journal_url: str) -> str:
    """A journal URL as a message quotes it: its ``journal_key`` as ``***``."""
    from lockgate.stores.kafka._redact import redacted_journal_url

    return redacted_journal_url(journal_url)
