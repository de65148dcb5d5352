"""The Valkey key layout: user-derived parts length-prefixed, the same from Lua and Python,
every key in its prefix's slot whatever braces a name holds, a namespace of another layout
refused at connect, and maintenance and ``info`` reading names that hold ``:``."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from redis.crc import key_slot

from lockgate import ConfigurationError, EventKind, ManualClock, RunEvent, ValkeyStore
from lockgate.stores.valkey._keys import KEY_LAYOUT, key, parts_of
from valkey_server import shared_url


@pytest.fixture
def namespace() -> str:
    return f"k{uuid.uuid4().hex[:12]}"


def connect(namespace: str, clock: ManualClock | None = None, shards: int = 1) -> ValkeyStore:
    return ValkeyStore(
        shared_url(), namespace=namespace, clock=clock, shard_count=shards, retry_attempts=0
    )


@pytest.fixture
def store(namespace: str, clock: ManualClock) -> Iterator[ValkeyStore]:
    opened = connect(namespace, clock)
    yield opened
    opened.close()


def keys_of(store: ValkeyStore) -> list[str]:
    pattern = f"lg:{{{store.namespace}*"
    return sorted(k.decode() for k in store._redis.scan_iter(match=pattern))


def test_a_key_is_its_kind_then_each_part_length_prefixed_in_utf8_bytes(
    store: ValkeyStore,
) -> None:
    store.submit_run("billing:eu", "42", {})
    store.submit_run("billing", "eu:42", {})
    store.submit_run("café", "ü{1}", {})
    prefix = store.prefix
    written = set(keys_of(store))
    for name, run_id in (("billing:eu", "42"), ("billing", "eu:42"), ("café", "ü{1}")):
        assert key(prefix, "r", name, run_id) in written
        assert key(prefix, "e", name, run_id) in written
    assert f"{prefix}r:10#billing:eu:2#42" in written
    assert f"{prefix}r:7#billing:5#eu:42" in written
    assert f"{prefix}r:5#café:5#ü{{1}}" in written  # é and ü are two bytes each


def test_parts_of_reads_back_what_key_wrote() -> None:
    for parts in (["billing:eu", "42"], ["", "7#x:1#"], ["café", "{ü}", "a b/c"]):
        assert parts_of(key("p:", "r", *parts).removeprefix("p:r")) == parts
    with pytest.raises(ValueError, match="not a key"):
        parts_of(":9#short")


@pytest.mark.parametrize("shards", [1, 3])
def test_braces_in_names_and_keys_never_move_a_key_out_of_its_prefix_s_slot(
    namespace: str, clock: ManualClock, shards: int
) -> None:
    store = connect(namespace, clock, shards)
    for n, name in enumerate(["{x}", "a}b{c", "}{", "{}"]):
        store.submit_run(name, f"{{{n}}}", {}, concurrency_key="{k}", concurrency_max=1)
        store.submit_run(
            name, f"i{n}", {}, idempotency_key="{i}", rate_key="}r{", rate_per_second=1
        )
        store.claim_next_run(name, "lease")
    prefixes = {key_slot(p.encode()): p for p in {store.prefix, *store._prefixes}}
    for written in keys_of(store):
        slot = key_slot(written.encode())
        assert slot in prefixes, written
        assert written.startswith(prefixes[slot]), written
    store.close()


def test_a_fresh_namespace_records_the_layout_and_opens_again(
    store: ValkeyStore, namespace: str
) -> None:
    assert store._redis.get(f"lg:{{{namespace}}}:layout") == KEY_LAYOUT.encode()
    store.submit_run("w", "r1", {})
    again = connect(namespace)
    assert again.get_run("w", "r1") is not None
    again.close()


@pytest.mark.parametrize("left_by_old", ["shards", "qseq"])
def test_a_namespace_an_older_lockgate_wrote_is_refused_with_what_to_do(
    namespace: str, left_by_old: str
) -> None:
    """The first layout joined parts with ``:``: a store of this one would not find its runs
    (and its keys mixed up names holding ``:``), so it refuses the namespace and writes
    nothing to it."""
    old = connect(f"{namespace}-probe")
    old._redis.set(f"lg:{{{namespace}}}:{left_by_old}", "1")
    old._redis.set(f"lg:{{{namespace}}}:r:billing:eu:42", "x")
    with pytest.raises(ConfigurationError) as refused:
        connect(namespace)
    message = str(refused.value)
    assert "older lockgate (key layout 1)" in message
    assert "new namespace" in message
    assert old._redis.get(f"lg:{{{namespace}}}:layout") is None
    old.close()


def test_a_namespace_of_a_newer_layout_says_to_upgrade(namespace: str) -> None:
    probe = connect(f"{namespace}-probe")
    probe._redis.set(f"lg:{{{namespace}}}:layout", "9")
    with pytest.raises(ConfigurationError, match=r"newer lockgate .* upgrade lockgate"):
        connect(namespace)
    probe.close()


def test_maintenance_and_info_read_names_holding_colons(namespace: str, clock: ManualClock) -> None:
    store = ValkeyStore(
        shared_url(), namespace=namespace, clock=clock, completed_ttl=60, retry_attempts=0
    )
    store.submit_run("billing:eu", "42", {}, idempotency_key="k")
    store.submit_run("billing", "eu:42", {}, idempotency_key="k", idempotency_ttl=200_000)
    store.claim_run("billing:eu", "42", "lease")
    store.append_events(
        "billing:eu",
        "42",
        [RunEvent(EventKind.RUN_COMPLETE, {"result": 1}, "42")],
        fence="lease",
    )
    assert store.info()["workflows"] == {"billing:eu": {"runs": 1}, "billing": {"runs": 1}}
    clock.advance(86_401)  # past completed_ttl and the first key's day, not the second's
    assert store.run_maintenance() == 2
    assert store.get_run("billing:eu", "42") is None
    assert store.get_idempotency_run("billing:eu", "k") is None
    assert store.get_run("billing", "eu:42") is not None
    assert store.get_idempotency_run("billing", "k") == "eu:42"
    assert store.info()["workflows"] == {"billing": {"runs": 1}}
    store.close()
