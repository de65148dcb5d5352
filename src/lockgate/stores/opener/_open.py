"""Opening a store from a URL: one spelling for the CLI, workers, the environment and code.

``open_store`` knows each scheme's store class and nothing else about it: options, whether
from the URL's query or from keyword arguments, go to that class's constructor, checked and
typed by ``stores/_urls.py`` (which a backend's own ``from_url`` shares).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode, urlsplit

from lockgate._errors import ConfigurationError, JournalTopicMismatch, ShardCountMismatch
from lockgate.stores._urls import (
    JOURNAL_URL_ENV,
    STORE_SCHEMES,
    STORE_URL_ENV,
    construct,
    split_url,
    sqlite_path,
)

if TYPE_CHECKING:
    from lockgate.stores._base import Store

_VALKEY_SCHEMES = frozenset({"valkey", "valkeys", "redis", "rediss", "unix"})


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
    scheme, location, query = split_url(chosen)
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

        return construct("memory", MemoryStore, (), query, options, option_defaults)
    if scheme == "sqlite":
        # Each backend is imported when its URL is opened: the CLI's `--help` imports this
        # module, and a `runs list` on SQLite needs no other backend.
        from lockgate.stores.sqlite._store import SQLiteStore

        path = sqlite_path(chosen, location)
        return construct("sqlite", SQLiteStore, (path,), query, options, option_defaults)
    if scheme in _VALKEY_SCHEMES:
        from lockgate.stores.valkey._store import ValkeyStore

        return _valkey(ValkeyStore, chosen, query, options, option_defaults)
    raise ConfigurationError(
        f"unknown store URL scheme {scheme + '://'!r} in {chosen!r}; supported: "
        + ", ".join(STORE_SCHEMES)
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
    from lockgate.stores.valkey._first_contact import SERVER_QUERY

    parts = urlsplit(url)
    kept = urlencode([(k, v) for k, v in query if k in SERVER_QUERY])
    # Built by hand: urlunsplit drops the "//" of a URL with no host (unix:///path).
    server = f"{parts.scheme}://{parts.netloc}{parts.path}" + (f"?{kept}" if kept else "")
    store_options = [(k, v) for k, v in query if k not in SERVER_QUERY]
    return construct(
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
    from lockgate.stores.composite._store import CompositeStore
    from lockgate.stores.kafka._store import KafkaEventLogStore
    from lockgate.stores.valkey._lifecycle_store import ValkeyLifecycleStore

    scheme, _location, journal_query = split_url(journal, "journal URL", shown=_shown(journal))
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
    events = construct("kafka", KafkaEventLogStore, (bootstrap,), journal_query, {})
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


def _shown(journal_url: str) -> str:
    """A journal URL as a message quotes it: its ``journal_key`` as ``***``."""
    from lockgate.stores.kafka._redact import redacted_journal_url

    return redacted_journal_url(journal_url)
