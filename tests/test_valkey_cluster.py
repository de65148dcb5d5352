"""ValkeyStore on a real three-node Valkey cluster (started here, primaries only), and the
hygiene of its connection errors: a password never shows, an unreadable eviction policy is a
ConfigurationError that says what to do."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from lockgate import (
    ConfigurationError,
    Limit,
    RunStatus,
    StoreAuthenticationError,
    StoreUnavailable,
    ValkeyStore,
    WorkflowClient,
    WorkflowContext,
    workflow,
)
from lockgate.stores.valkey._first_contact import redacted_url
from lockgate.worker import WorkerOptions, WorkflowWorker
from valkey_server import ValkeyCluster, ValkeyServer, free_port, shared_url

NAME = "orders"
SHARDS = 6
OPTIONS = WorkerOptions(
    claim_poll_interval=0.01,
    shard_lease_interval=0.05,
    timer_poll_interval_s=0.05,
    shutdown_grace=2.0,
)


@workflow(name="cluster_echo", concurrency=Limit(key="tenant", max=1))
async def cluster_echo(ctx: WorkflowContext, tenant: str, n: int) -> int:
    await ctx.sleep(0.05)  # parked on a timer in its shard, woken through get_sleeping_runs
    return n * 10


@workflow(name="cluster_nap")
async def cluster_nap(ctx: WorkflowContext) -> str:
    await ctx.sleep(3600)
    return "rested"


# -- a cluster -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster() -> Iterator[ValkeyCluster]:
    started = ValkeyCluster(3)
    try:
        yield started.start()
    finally:
        started.close()


def slot_owners(url: str) -> dict[int, str]:
    """Slot -> ``host:port`` of the primary owning it, from ``CLUSTER SLOTS``."""
    client = redis.Redis.from_url(url)
    try:
        owners: dict[int, str] = {}
        for first, last, primary, *_ in client.execute_command("CLUSTER", "SLOTS"):
            host = primary[0].decode() if isinstance(primary[0], bytes) else primary[0]
            for slot in range(int(first), int(last) + 1):
                owners[slot] = f"{host}:{int(primary[1])}"
        return owners
    finally:
        client.close()


def shard_nodes(url: str, namespace: str) -> dict[int, str]:
    """Shard -> the node owning its hash tag's slot, by ``CLUSTER KEYSLOT``."""
    owners = slot_owners(url)
    client = redis.Redis.from_url(url)
    try:
        return {
            shard: owners[
                int(
                    client.execute_command(
                        "CLUSTER", "KEYSLOT", f"lg:{{{namespace}:{shard}}}:anchor"
                    )
                )
            ]
            for shard in range(SHARDS)
        }
    finally:
        client.close()


@pytest.fixture
def namespace(cluster: ValkeyCluster) -> str:
    """A fresh namespace whose six shards land on all three nodes."""
    for _ in range(100):
        candidate = f"c{uuid.uuid4().hex[:10]}"
        if len(set(shard_nodes(cluster.url, candidate).values())) == 3:
            return candidate
    raise AssertionError("no namespace spread its shards over the three nodes")


@pytest.fixture
def store(cluster: ValkeyCluster, namespace: str) -> Iterator[ValkeyStore]:
    made = ValkeyStore(cluster.url, namespace=namespace, shard_count=SHARDS, retry_attempts=1)
    yield made
    made.close()


def test_a_cluster_is_detected_and_a_single_server_is_not(cluster: ValkeyCluster) -> None:
    on_cluster = ValkeyStore(cluster.url, namespace=f"d{uuid.uuid4().hex[:8]}")
    single = ValkeyStore(shared_url(), namespace=f"d{uuid.uuid4().hex[:8]}")
    try:
        assert on_cluster.cluster is True
        assert single.cluster is False
        on_cluster.ping()
        assert on_cluster._server_now() > 0
    finally:
        on_cluster.close()
        single.close()


def test_cluster_mode_can_be_forced_either_way(cluster: ValkeyCluster, namespace: str) -> None:
    on: dict[str, Any] = {"cluster": True}
    off: dict[str, Any] = {"cluster": False}
    forced = ValkeyStore(cluster.url, namespace=namespace, shard_count=SHARDS, **on)
    try:
        assert forced.cluster is True
        forced.submit_run(NAME, "r1", {})
        assert forced.get_run(NAME, "r1") is not None
    finally:
        forced.close()
    with pytest.raises(ConfigurationError, match="not a cluster"):
        ValkeyStore(shared_url(), namespace="nocluster", **on)

    # Forced off on a cluster: a key another node owns is refused with a hint, not a MOVED.
    def submit_everywhere() -> None:
        plain = ValkeyStore(
            cluster.url,
            namespace=namespace,
            shard_count=SHARDS,
            retry_attempts=0,
            **off,
        )
        try:
            assert plain.cluster is False
            for n in range(60):
                plain.submit_run(NAME, f"p{n}", {})
        finally:
            plain.close()

    with pytest.raises(ConfigurationError, match="cluster node"):
        submit_everywhere()


def test_every_store_call_reaches_the_node_owning_its_shard(
    cluster: ValkeyCluster, store: ValkeyStore, namespace: str
) -> None:
    nodes = shard_nodes(cluster.url, namespace)
    # Gated runs (one Limit key per shard it hashes to) and ungated ones, in every shard.
    ungated = [f"u{n}" for n in range(18)]
    for run_id in ungated:
        store.submit_run(NAME, run_id, {"n": run_id})
    gated = [f"g{n}" for n in range(12)]
    for n, run_id in enumerate(gated):
        store.submit_run(NAME, run_id, {}, concurrency_key=f"tenant-{n % 6}", concurrency_max=1)
    shards = {store.shard_of(NAME, run_id) for run_id in ungated + gated}
    assert len({nodes[shard] for shard in shards}) >= 2
    assert store.get_pending_count(NAME) == 30

    # Scripts were loaded on every primary: drop them all, and the store loads them again.
    store._redis.execute_command("SCRIPT FLUSH", target_nodes=store._redis.PRIMARIES)

    claimed: list[str] = []
    while (run_id := store.claim_next_run(NAME, f"w{len(claimed)}")) is not None:
        claimed.append(run_id)
    # Every ungated run, and one gated run per Limit key (the others wait for the slot).
    assert set(ungated) <= set(claimed)
    assert len([r for r in claimed if r.startswith("g")]) == 6
    assert {store.shard_of(NAME, r) for r in claimed} == shards

    # Reads: one run (the pipelined poll), a journal, and every run, a page at a time.
    assert store.poll_run(NAME, "u0").cancel_requested_at is None
    assert store.load_run(NAME, "u0")[0].kind == "run:init"
    listed: list[str] = []
    cursor: str | None = None
    while True:
        page, cursor = store.list_runs(NAME, limit=7, cursor=cursor)
        listed.extend(info.run_id for info in page)
        if cursor is None:
            break
    assert sorted(listed) == sorted(ungated + gated)

    # A run submitted to start later sleeps in its shard until then.
    now = store._server_now()
    store.submit_run(NAME, "later", {}, start_at=now + 600)
    assert (NAME, "later") in store.get_sleeping_runs(now + 1200)
    assert (NAME, "later") not in store.get_sleeping_runs(now + 1)

    # Maintenance scans the keys of every shard (SCAN goes to the node owning each).
    assert store.run_maintenance() >= 0


async def test_a_worker_runs_workflows_end_to_end_on_the_cluster(
    cluster: ValkeyCluster, store: ValkeyStore, namespace: str
) -> None:
    worker_store = ValkeyStore(cluster.url, namespace=namespace, shard_count=SHARDS)
    worker = WorkflowWorker(
        workflows=[cluster_echo, cluster_nap], store=worker_store, options=OPTIONS
    )
    task = asyncio.create_task(worker.run())
    try:
        client = WorkflowClient(store, poll_interval=0.02)
        handles = [
            await client.submit("cluster_echo", {"tenant": f"t{n % 4}", "n": n}) for n in range(8)
        ]
        assert len({store.shard_of("cluster_echo", h.run_id) for h in handles}) >= 2
        assert [await h.result(timeout=15) for h in handles] == [n * 10 for n in range(8)]

        nap = await client.submit("cluster_nap", {})
        for _ in range(500):
            info = store.get_run("cluster_nap", nap.run_id)
            if info is not None and info.status is RunStatus.SLEEPING:
                break
            await asyncio.sleep(0.02)
        now = store._server_now()
        assert ("cluster_nap", nap.run_id) in store.get_sleeping_runs(now + 7200)
        runs, _ = store.list_runs("cluster_echo", limit=50)
        assert len(runs) == 8
        assert {info.status for info in runs} == {RunStatus.COMPLETE}
    finally:
        worker.stop()
        await asyncio.wait_for(task, timeout=10)
        worker_store.close()


# -- passwords and permissions ---------------------------------------------------------------

PASSWORD = "s3cret-Pa55word"


@pytest.fixture(scope="module")
def guarded() -> Iterator[ValkeyServer]:
    server = ValkeyServer(password=PASSWORD)
    try:
        yield server.start()
    finally:
        server.close()


def test_redacted_url_hides_every_password_form() -> None:
    assert redacted_url("redis://:pw1234@h:6379/0") == "redis://:***@h:6379/0"
    assert redacted_url("rediss://user:pw1234@h/0") == "rediss://user:***@h/0"
    assert redacted_url("redis://user@h/0") == "redis://user@h/0"
    assert redacted_url("unix:///tmp/v.sock?db=0&password=pw1234") == (
        "unix:///tmp/v.sock?db=0&password=***"
    )
    assert redacted_url("redis://h:6379/0") == "redis://h:6379/0"


def test_a_password_never_shows_in_repr_or_errors(guarded: ValkeyServer) -> None:
    store = ValkeyStore(guarded.url, namespace=f"p{uuid.uuid4().hex[:8]}")
    try:
        assert PASSWORD in guarded.url
        assert PASSWORD not in repr(store)
        assert "***" in repr(store)
        assert PASSWORD not in store.url
        store.submit_run(NAME, "r1", {})
    finally:
        store.close()

    wrong = guarded.url.replace(PASSWORD, "wr0ng-Pa55word")
    with pytest.raises(StoreAuthenticationError) as refused:
        ValkeyStore(wrong, namespace="p")
    assert "wr0ng-Pa55word" not in str(refused.value)
    assert "***" in str(refused.value)

    nobody = f"redis://:{PASSWORD}@127.0.0.1:{free_port()}/0"
    with pytest.raises(StoreUnavailable) as unreachable:
        ValkeyStore(nobody, namespace="p")
    assert PASSWORD not in str(unreachable.value)


def test_a_lost_server_is_reported_without_its_password(
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = ValkeyServer(password=PASSWORD).start()
    try:
        store = ValkeyStore(
            server.url, namespace="lost", retry_attempts=1, retry_base=0.01, socket_timeout=1
        )
        server.stop(kill=True)
        with (
            caplog.at_level(logging.DEBUG, logger="lockgate.valkey"),  # each retry: debug
            pytest.raises(StoreUnavailable) as lost,
        ):
            store.submit_run(NAME, "r1", {})
        assert PASSWORD not in str(lost.value)
        assert "***" in str(lost.value)
        assert caplog.records, "the retry was logged"
        assert all(PASSWORD not in record.getMessage() for record in caplog.records)
        assert PASSWORD not in repr(store)
        store.close()
    finally:
        server.close()


def test_an_unreadable_eviction_policy_is_a_configuration_error(guarded: ValkeyServer) -> None:
    admin = redis.Redis.from_url(guarded.url)
    try:
        admin.execute_command(
            "ACL", "SETUSER", "limited", "on", ">limited-pw", "~*", "&*", "+@all", "-config"
        )
    finally:
        admin.close()
    url = f"redis://limited:limited-pw@127.0.0.1:{guarded.port}/0"
    with pytest.raises(ConfigurationError) as refused:
        ValkeyStore(url, namespace=f"a{uuid.uuid4().hex[:8]}")
    message = str(refused.value)
    assert "maxmemory-policy" in message
    assert "eviction_policy_check=False" in message
    assert "limited-pw" not in message
    assert not isinstance(refused.value.__cause__, redis.RedisError)
    # Known to be noeviction: the check can be left out, and the store works.
    store = ValkeyStore(url, namespace=f"a{uuid.uuid4().hex[:8]}", eviction_policy_check=False)
    try:
        store.submit_run(NAME, "r1", {})
        assert store.get_run(NAME, "r1") is not None
    finally:
        store.close()
