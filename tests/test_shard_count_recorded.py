"""A namespace's shard count, written once: the namespace records it when it is made, a store
given none takes the recorded one, and only one given another count is refused.

Every path a store is opened by is tried on a namespace made with four shards: ``ValkeyStore``
and ``ValkeyLifecycleStore`` in Python, ``open_store`` URLs, a composite with its Kafka journal
topic (made with the recorded count), and ``python -m lockgate`` as a user runs it (``runs
list``, ``submit``, ``worker``, ``serve`` with its console). A run submitted through one store
is seen and claimed through the other, both ways.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from confluent_kafka.admin import AdminClient

from http_support import ServeProcess
from lockgate import (
    ConfigurationError,
    JournalTopicMismatch,
    RunEvent,
    RunStatus,
    ShardCountMismatch,
    open_store,
)
from lockgate.stores import CompositeStore, KafkaEventLogStore, ValkeyLifecycleStore, ValkeyStore
from lockgate.stores._shards import shard_for
from test_cli import ENV, lockgate
from valkey_server import shared_url

SHARDS = 4
NAME = "sc_echo"
#: Seconds any one state may take to come about on a loaded machine.
DEADLINE = 60.0

WORKFLOWS = textwrap.dedent(
    """
    from lockgate import workflow

    @workflow(name="sc_echo")
    async def echo(ctx, n: int) -> int:
        return n
    """
)


@pytest.fixture
def namespace() -> str:
    return f"sc{uuid.uuid4().hex[:12]}"


@pytest.fixture
def made(namespace: str) -> Iterator[ValkeyStore]:
    """The store that made the namespace, with four shards."""
    store = ValkeyStore(shared_url(), namespace=namespace, shard_count=SHARDS)
    yield store
    store.close()


def one_id_per_shard(prefix: str) -> list[str]:
    """Run ids, one hashing to each of the four shards."""
    return [
        next(f"{prefix}{n}" for n in range(1000) if shard_for(f"{prefix}{n}", SHARDS) == shard)
        for shard in range(SHARDS)
    ]


def drained(store: ValkeyStore | CompositeStore, lease: str) -> set[str]:
    """Every run of :data:`NAME` ``store`` can claim now."""
    taken: set[str] = set()
    while (run_id := store.claim_next_run(NAME, f"{lease}-{len(taken)}")) is not None:
        taken.add(run_id)
    return taken


def until(what: str, check: Callable[[], object], log: Path | None = None) -> None:
    deadline = time.monotonic() + DEADLINE
    while not check():
        if time.monotonic() > deadline:
            text = log.read_text(errors="replace") if log is not None else ""
            raise AssertionError(f"timed out waiting until {what}\n{text}")
        time.sleep(0.05)


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    assert lines[0].startswith("lockgate: error: "), err
    return lines[0]


# -- in Python -----------------------------------------------------------------------------------


def test_a_store_given_no_shard_count_takes_the_namespaces_and_shares_its_runs(
    made: ValkeyStore, namespace: str
) -> None:
    plain = ValkeyStore(shared_url(), namespace=namespace)
    lifecycle = ValkeyLifecycleStore(shared_url(), namespace=namespace)
    try:
        assert (plain.shard_count, lifecycle.shard_count) == (SHARDS, SHARDS)
        assert "shard_count=4" in repr(plain)
        # Submitted through the store given no count, in every shard: the maker sees each run
        # where it hashes and claims them all.
        ours = one_id_per_shard("p")
        for run_id in ours:
            plain.submit_run(NAME, run_id, {})
        assert [made.shard_of(NAME, r) for r in ours] == list(range(SHARDS))
        assert drained(made, "maker") == set(ours)
        # And the other way round.
        theirs = one_id_per_shard("m")
        for run_id in theirs:
            made.submit_run(NAME, run_id, {})
        assert {plain.get_run(NAME, r).status for r in theirs} == {RunStatus.PENDING}  # type: ignore[union-attr]
        assert drained(plain, "plain") == set(theirs)
        # What it writes as the marker is the namespace's count too.
        plain.ensure_marker()
        marker = plain.read_marker()
        assert marker is not None
        assert marker.shard_count == SHARDS
    finally:
        plain.close()
        lifecycle.close()


def test_a_store_given_another_count_is_refused_naming_both(
    made: ValkeyStore, namespace: str
) -> None:
    for kind in (ValkeyStore, ValkeyLifecycleStore):
        with pytest.raises(ShardCountMismatch) as refused:
            kind(shared_url(), namespace=namespace, shard_count=8)
        assert (refused.value.namespace, refused.value.recorded, refused.value.given) == (
            namespace,
            SHARDS,
            8,
        )
        assert refused.value.code == "configuration"
        assert "shard_count=4, not 8" in str(refused.value)
    # The same count named again is fine.
    ValkeyStore(shared_url(), namespace=namespace, shard_count=SHARDS).close()


def test_a_new_namespace_opened_without_a_count_records_one_shard(namespace: str) -> None:
    first = ValkeyStore(shared_url(), namespace=namespace)
    try:
        assert first.shard_count == 1
        with pytest.raises(ShardCountMismatch, match="shard_count=1, not 2"):
            ValkeyStore(shared_url(), namespace=namespace, shard_count=2)
    finally:
        first.close()


def test_a_url_without_shard_count_takes_the_recorded_one(
    made: ValkeyStore, namespace: str
) -> None:
    url = f"{shared_url()}?namespace={namespace}"
    store = open_store(url)
    try:
        assert isinstance(store, ValkeyStore)
        assert store.shard_count == SHARDS
        store.submit_run(NAME, "u1", {})
        assert drained(made, "maker") == {"u1"}
    finally:
        store.close()
    with pytest.raises(ShardCountMismatch, match="shard_count=4, not 8"):
        open_store(f"{url}&shard_count=8")


# -- a composite and its Kafka journal topic -------------------------------------------------------


def _partitions(bootstrap: str, topic: str) -> int:
    listed = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics
    return len(listed[topic].partitions)


def lifecycle_position(store: CompositeStore, run_id: str) -> tuple[int, int] | None:
    """Where the lifecycle keeps the run's journal starting: (partition, offset)."""
    assert isinstance(store.lifecycle, ValkeyLifecycleStore)
    return store.lifecycle.journal_position(NAME, run_id)


def test_a_composite_built_without_a_count_makes_its_topic_with_the_recorded_one(
    made: ValkeyStore, namespace: str, kafka_bootstrap: str
) -> None:
    prefix = f"sc{uuid.uuid4().hex[:10]}"
    composite = CompositeStore(
        lifecycle=ValkeyLifecycleStore(shared_url(), namespace=namespace),
        events=KafkaEventLogStore(kafka_bootstrap, topic_prefix=prefix),
    )
    try:
        assert composite.shard_count == SHARDS
        assert _partitions(kafka_bootstrap, f"{prefix}.journal") == SHARDS
        ours = one_id_per_shard("k")
        for run_id in ours:
            composite.submit_run(NAME, run_id, {})
    finally:
        composite.close()
    # The URL spelling, without the count, takes it too; the topic it finds agrees.
    journal = f"kafka://{kafka_bootstrap}?topic_prefix={prefix}"
    opened = open_store(f"{shared_url()}?namespace={namespace}", journal=journal)
    try:
        assert isinstance(opened, CompositeStore)
        assert opened.shard_count == SHARDS
        assert isinstance(opened.events, KafkaEventLogStore)
        assert opened.events.shard_count == SHARDS
        assert drained(opened, "opened") == set(ours)
        # Each run's journal is on its shard's partition.
        for shard, run_id in enumerate(ours):
            assert opened.events.load_run(NAME, run_id)[0].kind == "run:init"
            position = lifecycle_position(opened, run_id)
            assert position is not None
            assert position[0] == shard
    finally:
        opened.close()
    # A journal reader on its own, given no count, takes the topic's.
    alone = KafkaEventLogStore(kafka_bootstrap, topic_prefix=prefix)
    try:
        assert alone.shard_count == SHARDS
    finally:
        alone.close()
    with pytest.raises(ShardCountMismatch, match="not 8"):
        open_store(f"{shared_url()}?namespace={namespace}&shard_count=8", journal=journal)


# -- the command line ------------------------------------------------------------------------------


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / "sc_wf.py").write_text(WORKFLOWS)
    return tmp_path


def test_the_cli_without_shard_count_lists_submits_and_works_a_four_shard_namespace(
    made: ValkeyStore, namespace: str, home: Path
) -> None:
    url = f"{shared_url()}?namespace={namespace}"
    made.submit_run(NAME, "listed-1", {"n": 1})
    listed = lockgate(home, "runs", "list", NAME, "--store", url)
    assert listed.returncode == 0, listed.stderr
    assert "listed-1" in listed.stdout
    made.claim_run(NAME, "listed-1", "lease-x")  # out of the worker's way
    submitted = lockgate(
        home, "submit", NAME, "--params", '{"n": 7}', "--app", "sc_wf", "--store", url
    )
    assert submitted.returncode == 0, submitted.stderr
    run_id = submitted.stdout.strip().splitlines()[-1].split()[-1]
    info = made.get_run(NAME, run_id)
    assert info is not None
    assert info.status == RunStatus.PENDING
    log = home / "worker.log"
    with log.open("wb") as sink:
        worker = subprocess.Popen(
            [sys.executable, "-m", "lockgate", "worker", "sc_wf", "--store", url],
            cwd=home,
            env=ENV,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    try:

        def complete() -> bool:
            found = made.get_run(NAME, run_id)
            return found is not None and found.status == RunStatus.COMPLETE

        until("the worker completes the run the CLI submitted", complete, log)
    finally:
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=DEADLINE) == 0, log.read_text()


@pytest.mark.parametrize(
    "argv",
    [
        ["runs", "list", NAME],
        ["submit", NAME, "--params", '{"n": 1}', "--app", "sc_wf"],
        ["worker", "sc_wf"],
        ["serve", "sc_wf:echo", "--port", "0"],
    ],
    ids=["runs-list", "submit", "worker", "serve"],
)
def test_the_cli_given_another_count_exits_2_with_one_line(
    made: ValkeyStore, namespace: str, home: Path, argv: list[str]
) -> None:
    url = f"{shared_url()}?namespace={namespace}&shard_count=8"
    done = lockgate(home, *argv, "--store", url)
    assert done.returncode == 2, done.stderr
    line = one_error_line(done.stderr)
    assert f"namespace {namespace!r} was made with shard_count=4, not 8" in line, line


def test_serve_and_its_console_without_shard_count_show_the_namespaces_runs(
    made: ValkeyStore, namespace: str, tmp_path: Path
) -> None:
    ids = one_id_per_shard("h")
    for run_id in ids:
        made.submit_run("http_small", run_id, {"n": 1})
    serve = ServeProcess(
        [
            "http_workflows:WORKFLOWS",
            "--store",
            f"{shared_url()}?namespace={namespace}",
        ],
        tmp_path / "serve.log",
    )
    try:
        for run_id in ids:
            answer = httpx.get(f"{serve.url}/http_small/runs/{run_id}", timeout=10)
            assert answer.status_code == 200, answer.text
            assert answer.json()["run"]["run_id"] == run_id
            page = httpx.get(f"{serve.url}/console/runs/http_small/{run_id}", timeout=10)
            assert page.status_code == 200, page.text
            assert run_id in page.text
    finally:
        assert serve.stop() == 0


def test_a_journal_store_on_its_own_given_no_count_makes_its_topic_at_first_use(
    kafka_bootstrap: str,
) -> None:
    prefix = f"sc{uuid.uuid4().hex[:10]}"
    topic = f"{prefix}.journal"
    alone = KafkaEventLogStore(kafka_bootstrap, topic_prefix=prefix)
    try:
        # Not yet: a composite binding a lifecycle next would make it with its shard count.
        listed = AdminClient({"bootstrap.servers": kafka_bootstrap}).list_topics(timeout=10)
        assert topic not in listed.topics
        alone.append_events(NAME, "a1", [RunEvent("run:init", {"params": {}}, "a1")])
        assert _partitions(kafka_bootstrap, topic) == 1
        assert [e.kind for e in alone.load_run(NAME, "a1")] == ["run:init"]
    finally:
        alone.close()


def test_a_namespace_made_through_a_journal_url_takes_the_topics_count(
    namespace: str, kafka_bootstrap: str
) -> None:
    # A topic already there with four partitions and a namespace with nothing in it: Valkey
    # lost everything, say, and `lockgate store rebuild` opens the pair from their URLs.
    prefix = f"sc{uuid.uuid4().hex[:10]}"
    KafkaEventLogStore(kafka_bootstrap, topic_prefix=prefix, shard_count=SHARDS).close()
    journal = f"kafka://{kafka_bootstrap}?topic_prefix={prefix}"
    opened = open_store(f"{shared_url()}?namespace={namespace}", journal=journal)
    try:
        assert opened.shard_count == SHARDS  # type: ignore[attr-defined]
    finally:
        opened.close()
    later = ValkeyStore(shared_url(), namespace=namespace)
    try:
        assert later.shard_count == SHARDS  # the namespace recorded the topic's count
    finally:
        later.close()


def test_a_topic_that_disagrees_with_the_namespace_is_the_topics_mismatch(
    made: ValkeyStore, namespace: str, kafka_bootstrap: str
) -> None:
    prefix = f"sc{uuid.uuid4().hex[:10]}"
    KafkaEventLogStore(kafka_bootstrap, topic_prefix=prefix, shard_count=3).close()
    journal = f"kafka://{kafka_bootstrap}?topic_prefix={prefix}"
    with pytest.raises(JournalTopicMismatch) as refused:
        open_store(f"{shared_url()}?namespace={namespace}", journal=journal)
    assert (refused.value.partitions, refused.value.expected) == (3, SHARDS)
    with pytest.raises(ConfigurationError, match="give it in the store URL"):
        open_store(f"{shared_url()}?namespace={namespace}", journal=f"{journal}&shard_count=4")
