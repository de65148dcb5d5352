"""open_store: which URL it reads, what each scheme opens, and how options are typed or refused."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import pytest

from lockgate import (
    ConfigurationError,
    MemoryStore,
    Store,
    StoreAuthenticationError,
    StoreProtocolError,
    StoreUnavailable,
)
from lockgate.stores import SQLiteStore, ValkeyStore
from lockgate.stores._urls import STORE_URL_ENV, from_text
from lockgate.stores.opener._open import is_valkey_url, open_store
from valkey_server import ValkeyServer, free_port, http_server, shared_url


@pytest.fixture(autouse=True)
def _no_env_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(STORE_URL_ENV, raising=False)


@pytest.fixture
def opened() -> Iterator[list[Store]]:
    stores: list[Store] = []
    yield stores
    for store in stores:
        store.close()


def _sqlite(store: Store, opened: list[Store]) -> SQLiteStore:
    opened.append(store)
    assert isinstance(store, SQLiteStore)
    return store


# -- which URL -------------------------------------------------------------------------------


def test_no_url_no_env_no_default_says_what_to_set() -> None:
    with pytest.raises(ConfigurationError, match=STORE_URL_ENV):
        open_store()


def test_the_environment_names_the_store_when_no_url_is_given(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, opened: list[Store]
) -> None:
    monkeypatch.setenv(STORE_URL_ENV, f"sqlite:///{tmp_path}/env.db")
    store = _sqlite(open_store(), opened)
    assert store.path == tmp_path / "env.db"


def test_an_explicit_url_wins_over_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, opened: list[Store]
) -> None:
    monkeypatch.setenv(STORE_URL_ENV, "postgres://nowhere")
    store = _sqlite(open_store(f"sqlite:///{tmp_path}/given.db"), opened)
    assert store.path == tmp_path / "given.db"


def test_default_is_used_only_without_url_or_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert isinstance(open_store(default="memory://", allow_memory=True), MemoryStore)
    monkeypatch.setenv(STORE_URL_ENV, f"sqlite:///{tmp_path}/env.db")
    store = open_store(default="memory://", allow_memory=True)
    try:
        assert isinstance(store, SQLiteStore)
    finally:
        store.close()


def test_an_empty_environment_variable_counts_as_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(STORE_URL_ENV, "")
    assert isinstance(open_store(default="memory://", allow_memory=True), MemoryStore)


# -- memory:// -------------------------------------------------------------------------------


def test_memory_is_refused_unless_allowed_and_says_why() -> None:
    with pytest.raises(ConfigurationError, match="inside one process"):
        open_store("memory://")
    assert isinstance(open_store("memory://", allow_memory=True), MemoryStore)


def test_memory_takes_typed_options_from_the_query_and_from_arguments() -> None:
    store = open_store(
        "memory://?lock_ttl=5&max_retries=7", allow_memory=True, max_store_requeues=9
    )
    assert isinstance(store, MemoryStore)
    assert store.lock_ttl == 5.0
    assert isinstance(store.lock_ttl, float)
    assert store.max_retries == 7
    assert isinstance(store.max_retries, int)
    assert store.max_store_requeues == 9


def test_memory_with_a_location_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="no location"):
        open_store("memory://somewhere", allow_memory=True)


# -- sqlite:// -------------------------------------------------------------------------------


def test_three_slashes_is_relative_to_the_working_directory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, opened: list[Store]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    store = _sqlite(open_store("sqlite:///sub/relative.db"), opened)
    assert store.path == tmp_path / "sub" / "relative.db"
    assert store.path.exists()


def test_four_slashes_is_absolute(tmp_path: Path, opened: list[Store]) -> None:
    url = f"sqlite:///{tmp_path}/absolute.db"
    assert url.startswith("sqlite:////")
    store = _sqlite(open_store(url), opened)
    assert store.path == tmp_path / "absolute.db"


def test_a_percent_encoded_path_is_decoded(tmp_path: Path, opened: list[Store]) -> None:
    store = _sqlite(open_store(f"sqlite:///{tmp_path}/with%20space.db"), opened)
    assert store.path == tmp_path / "with space.db"


def test_query_options_are_converted_to_the_constructor_types(
    tmp_path: Path, opened: list[Store]
) -> None:
    url = (
        f"sqlite:///{tmp_path}/typed.db?synchronous=normal&lock_ttl=10&max_retries=5"
        "&retention_seconds=none&busy_timeout_s=2.5&heartbeat_interval=1"
    )
    store = _sqlite(open_store(url), opened)
    assert store.synchronous == "normal"
    assert store.lock_ttl == 10.0
    assert isinstance(store.lock_ttl, float)
    assert store.max_retries == 5
    assert isinstance(store.max_retries, int)
    assert store.retention_seconds is None
    assert store.busy_timeout_s == 2.5
    assert store.heartbeat_interval == 1.0


def test_keyword_options_are_typed_too_and_objects_pass_through(
    tmp_path: Path, opened: list[Store]
) -> None:
    def clock() -> float:
        return time.time()

    url = f"sqlite:///{tmp_path}/kw.db"
    store = _sqlite(open_store(url, lock_ttl="4", max_retries=2, clock=clock), opened)
    assert store.lock_ttl == 4.0
    assert store.max_retries == 2
    assert store._clock is clock


@pytest.mark.parametrize(
    ("query", "match"),
    [
        ("namespace=x", "sqlite store takes no option 'namespace'"),
        ("path=/tmp/y.db", "sqlite store takes no option 'path'"),
        ("synchronous=fast", "'synchronous'.*one of 'full', 'normal'"),
        ("lock_ttl=soon", "'lock_ttl'.*must be a number"),
        ("lock_ttl=inf", "'lock_ttl'.*finite"),
        ("max_retries=2.5", "'max_retries'.*whole number"),
        ("clock=time", "'clock' cannot be given in a URL"),
        ("lock_ttl=1&lock_ttl=2", "'lock_ttl' is given twice"),
        ("lock_ttl", "malformed query"),
    ],
)
def test_bad_query_options_are_refused_by_name(tmp_path: Path, query: str, match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        open_store(f"sqlite:///{tmp_path}/bad.db?{query}")
    assert not (tmp_path / "bad.db").exists()


def test_an_unknown_keyword_option_is_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="sqlite store takes no option 'namespace'"):
        open_store(f"sqlite:///{tmp_path}/bad.db", namespace="tenant-a")
    with pytest.raises(ConfigurationError, match="memory store takes no option 'path'"):
        open_store("memory://", allow_memory=True, path="x.db")


def test_an_option_in_both_the_url_and_the_arguments_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="both in the URL and as an argument"):
        open_store(f"sqlite:///{tmp_path}/x.db?lock_ttl=3", lock_ttl=4)


def test_a_value_the_constructor_refuses_is_a_configuration_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="lock_ttl"):
        open_store(f"sqlite:///{tmp_path}/x.db?lock_ttl=0")


@pytest.mark.parametrize(
    ("url", "match"),
    [
        ("sqlite://host/x.db", "names a host"),
        ("sqlite:///", "names no file"),
        ("sqlite:///some/dir/", "names no file"),
        ("sqlite:///x.db#frag", "fragment"),
    ],
)
def test_malformed_sqlite_urls_are_refused(url: str, match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        open_store(url)


def test_a_file_in_a_missing_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="does not exist"):
        open_store(f"sqlite:///{tmp_path}/missing/x.db")


# -- other schemes ---------------------------------------------------------------------------


@pytest.mark.parametrize("url", ["postgres://db/x", "mongodb://x"])
def test_an_unknown_scheme_names_the_supported_ones(url: str) -> None:
    with pytest.raises(
        ConfigurationError, match=r"unknown store URL scheme.*memory://.*sqlite:///.*valkey://"
    ):
        open_store(url)


def test_valkey_urls_open_a_valkey_store_with_options_from_the_query() -> None:
    url = shared_url()
    for scheme in ("valkey", "redis"):
        store = open_store(
            url.replace("redis://", f"{scheme}://") + "?namespace=urltest&lock_ttl=12"
        )
        assert isinstance(store, ValkeyStore)
        assert (store.namespace, store.lock_ttl) == ("urltest", 12.0)
        store.ping()
        store.close()
    with pytest.raises(ConfigurationError, match="no option 'nope'"):
        open_store(url + "?nope=1")


def test_a_unix_socket_url_opens_a_valkey_store_on_that_socket() -> None:
    server = ValkeyServer(unixsocket=True).start()
    try:
        store = open_store(f"unix://{server.socket}?db=2&namespace=sock")
        assert isinstance(store, ValkeyStore)
        store.submit_run("over_a_socket", "r1", {})
        assert store.get_run("over_a_socket", "r1") is not None
        store.close()
    finally:
        server.close()


def test_a_valkey_server_that_is_not_there_raises_store_unavailable() -> None:
    with pytest.raises(StoreUnavailable, match="cannot reach Valkey"):
        open_store(f"valkey://127.0.0.1:{free_port()}/0?socket_timeout=0.5")


def test_a_valkey_server_that_may_evict_keys_is_refused() -> None:
    from redis import Redis

    server = ValkeyServer().start()
    try:
        Redis.from_url(server.url).config_set("maxmemory-policy", "allkeys-lru")
        with pytest.raises(ConfigurationError, match="allkeys-lru"):
            open_store(server.url)
        store = open_store(server.url, eviction_policy_check=False)
        store.ping()
        store.close()
    finally:
        server.close()


@pytest.mark.parametrize("url", ["lockgate.db", "/var/lib/x.db", "sqlite:x.db"])
def test_a_url_without_a_scheme_is_refused(url: str) -> None:
    with pytest.raises(ConfigurationError, match="scheme"):
        open_store(url)


# -- the text converter ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("declared", "text", "expected"),
    [
        (bool, "true", True),
        (bool, "Off", False),
        (bool, "1", True),
        (int, " 12 ", 12),
        (float, "0.25", 0.25),
        (str, "plain", "plain"),
        (float | None, "null", None),
        (int | None, "3", 3),
        (Literal["a", "b"], "b", "b"),
        (Any, "anything", "anything"),
    ],
)
def test_text_is_converted_to_the_declared_type(declared: Any, text: str, expected: Any) -> None:
    value = from_text(declared, text)
    assert value == expected
    assert type(value) is type(expected)


@pytest.mark.parametrize(
    ("declared", "text"), [(bool, "maybe"), (int, "x"), (Literal["a"], "c"), (int | float, "z")]
)
def test_text_that_spells_no_value_of_the_type_is_refused(declared: Any, text: str) -> None:
    with pytest.raises(ValueError, match=repr(text)):
        from_text(declared, text)


# -- what answers at a Valkey URL, and what the URL itself says ------------------------------

PASSWORD = "open-Pa55word"


@pytest.fixture(scope="module")
def guarded() -> Iterator[ValkeyServer]:
    """A Valkey server that requires a password."""
    server = ValkeyServer(password=PASSWORD)
    try:
        yield server.start()
    finally:
        server.close()


@pytest.fixture(scope="module")
def http_port() -> Iterator[int]:
    """The port of a plain HTTP server: something that is not Valkey listening on a port."""
    with http_server() as port:
        yield port


def test_a_server_that_is_not_valkey_is_a_protocol_error(http_port: int) -> None:
    with pytest.raises(StoreProtocolError, match="not a Valkey server") as refused:
        open_store(f"valkey://127.0.0.1:{http_port}/0")
    assert f"127.0.0.1:{http_port}" in str(refused.value)
    assert isinstance(refused.value, ConfigurationError)


def test_a_missing_password_is_an_authentication_error(guarded: ValkeyServer) -> None:
    with pytest.raises(StoreAuthenticationError, match="needs a password") as refused:
        open_store(f"valkey://127.0.0.1:{guarded.port}/0")
    assert "valkey://:PASSWORD@" in str(refused.value)


def test_a_wrong_password_is_an_authentication_error_that_hides_it(guarded: ValkeyServer) -> None:
    wrong = f"valkey://:wr0ng-Pa55@127.0.0.1:{guarded.port}/0"
    with pytest.raises(StoreAuthenticationError, match="refused the password") as refused:
        open_store(wrong)
    assert "wr0ng-Pa55" not in str(refused.value)
    assert ":***@" in str(refused.value)
    with pytest.raises(StoreAuthenticationError, match="refused the user and password"):
        open_store(f"valkey://someone:{PASSWORD}@127.0.0.1:{guarded.port}/0")
    for right in (
        guarded.url.replace("redis://", "valkey://"),
        f"valkey://127.0.0.1:{guarded.port}/0?password={PASSWORD}&namespace=q",
    ):
        store = open_store(right)
        assert PASSWORD not in repr(store)
        store.close()


def test_tls_against_a_plain_server_is_refused_at_once() -> None:
    server = ValkeyServer().start()
    try:
        started = time.monotonic()
        with pytest.raises(StoreProtocolError, match="does not speak TLS"):
            open_store(f"valkeys://127.0.0.1:{server.port}/0")
        # The TLS handshake alone would wait out socket_timeout (5 s) against a plain server.
        assert time.monotonic() - started < 3
    finally:
        server.close()


def test_a_database_the_server_does_not_have_is_named() -> None:
    with pytest.raises(ConfigurationError, match="no database 99") as refused:
        open_store(shared_url().rsplit("/", 1)[0] + "/99")
    assert "cluster" not in str(refused.value)
    assert "0 to 15" in str(refused.value)


@pytest.mark.parametrize(
    ("tail", "match"),
    [
        ("/abc", "database 'abc' is not a number"),
        ("/-1", "database '-1' is not a number"),
        ("/0/1", "database '0/1' is not a number"),
        ("?db=x", "database 'x' is not a number"),
        ("/0?db=1", "names the database twice"),
        ("?db=1&db=2", "names the database twice"),
    ],
)
def test_a_database_that_is_not_one_number_is_refused(tail: str, match: str) -> None:
    base = shared_url().rsplit("/", 1)[0]
    with pytest.raises(ConfigurationError, match=match):
        open_store(base + tail)
    with pytest.raises(ConfigurationError, match=match):
        ValkeyStore(base + tail)


def test_a_database_path_may_end_in_a_slash() -> None:
    store = open_store(shared_url().rsplit("/", 1)[0] + "/3/?namespace=slash")
    try:
        assert store.url.endswith("/3/")
        store.ping()
    finally:
        store.close()


def test_valkey_store_itself_refuses_query_options_it_does_not_take() -> None:
    with pytest.raises(ConfigurationError, match="no query option 'frob'") as refused:
        ValkeyStore(shared_url() + "?frob=1")
    assert "db" in str(refused.value)
    with pytest.raises(ConfigurationError, match="no option 'frob'") as refused:
        open_store(shared_url() + "?frob=1&namespace=x")
    assert "db, " in str(refused.value)
    assert "namespace" in str(refused.value)


@pytest.mark.parametrize(
    ("url", "valkey"),
    [
        ("valkey://h:6379/0", True),
        ("valkeys://h:6379/0", True),
        ("redis://h", True),
        ("REDISS://h", True),  # a scheme is not case-sensitive
        ("unix:///run/valkey.sock?db=0", True),
        ("sqlite:///lockgate.db", False),
        ("memory://", False),
        ("kafka://h:9092", False),
        ("h:6379", False),
        ("", False),
    ],
)
def test_is_valkey_url_names_the_schemes_open_store_opens_a_valkey_store_for(
    url: str, valkey: bool
) -> None:
    assert is_valkey_url(url) is valkey


def test_sqlite_from_url_refuses_a_journal_url_in_the_environment_as_open_store_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOCKGATE_JOURNAL_URL", "kafka://127.0.0.1:9092")
    with pytest.raises(ConfigurationError, match="LOCKGATE_JOURNAL_URL"):
        SQLiteStore.from_url(f"sqlite:///{tmp_path / 'a.db'}")
    with pytest.raises(ConfigurationError, match="journal URL"):
        open_store(f"sqlite:///{tmp_path / 'a.db'}")
    assert not (tmp_path / "a.db").exists()
    monkeypatch.delenv("LOCKGATE_JOURNAL_URL")
    # open_store's option_defaults, as the CLI passes them, reach the constructor alike.
    with pytest.raises(ConfigurationError):
        SQLiteStore.from_url(f"sqlite:///{tmp_path / 'b.db'}", option_defaults={"create": False})
    store = SQLiteStore.from_url(f"sqlite:///{tmp_path / 'c.db'}", option_defaults={"create": True})
    store.close()
