"""A store that lost its data, as a worker, a rebuild and a Valkey namespace meet it.

In one process: a worker on an SQLite file whose rows are deleted under it (its marker row
with them) says so once, answers 503 on ``/readyz``, claims nothing and fires no timer, ends
the attempt whose run went with the data quietly, and goes on once the marker is back; a
Valkey namespace emptied and written again by a store connected before the loss still opens;
``store rebuild`` writes the marker back. The process test with a Valkey restarted empty
under ``lockgate worker`` processes is ``test_store_marker_processes.py``.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
import uuid
from pathlib import Path

import pytest

from lockgate import (
    ConfigurationError,
    ManualClock,
    RunStatus,
    SQLiteStore,
    WorkflowContext,
    step,
    workflow,
)
from lockgate.stores import (
    CompositeStore,
    KafkaEventLogStore,
    ValkeyLifecycleStore,
    ValkeyStore,
    rebuild_lifecycle,
)
from lockgate.worker import WorkflowWorker
from test_worker import WAIT_S, http_get, options, serving, wait_until
from valkey_server import shared_url

#: Set by the test to let the held step end.
RELEASE: dict[str, asyncio.Event] = {}


@step
async def held(tag: str) -> str:
    await RELEASE[tag].wait()
    return tag


@workflow(name="marker_held")
async def marker_held(ctx: WorkflowContext, tag: str) -> str:
    return str(await held(tag))


@workflow(name="marker_quick")
async def marker_quick(ctx: WorkflowContext, n: int) -> int:
    return n + 1


def empty_in_place(path: Path) -> None:
    """Delete every row of the store's file but its format generation: the file is the same
    one (no StoreFileGone), its data and its marker are gone."""
    conn = sqlite3.connect(path)
    try:
        tables = [
            row[0]
            for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            if row[0].startswith("lg_")
        ]
        for table in tables:
            conn.execute(f"DELETE FROM {table}")  # names from the file itself
        conn.execute("INSERT INTO lg_meta (key, value) VALUES ('format_generation', '3')")
        conn.commit()
    finally:
        conn.close()


def status_of(store: SQLiteStore, name: str, run_id: str) -> RunStatus | None:
    info = store.get_run(name, run_id)
    return info.status if info is not None else None


async def stays(what: str, check: object, seconds: float) -> None:
    """``check()`` holds throughout ``seconds`` (asked every 10 ms)."""
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        assert check(), f"no longer true: {what}"  # type: ignore[operator]
        await asyncio.sleep(0.01)


async def test_a_worker_whose_store_lost_its_data_says_so_once_and_waits_for_its_marker(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="lockgate")
    path = tmp_path / "store.db"
    store = SQLiteStore(path, lock_ttl=5.0, heartbeat_interval=0.05)
    tag = uuid.uuid4().hex
    RELEASE[tag] = asyncio.Event()
    worker = WorkflowWorker(
        workflows=[marker_held, marker_quick],
        store=store,
        worker_id="w-lost",
        options=options(health_port=0),
    )
    async with serving(worker):
        await wait_until("the endpoint listens", lambda: worker.health_address is not None)
        address = worker.health_address
        assert address is not None
        first = await worker.client.submit("marker_quick", {"n": 1})
        assert await first.result(timeout=WAIT_S) == 2
        marker = store.read_marker()
        assert marker is not None  # the worker marked the new store at its start
        in_flight = await worker.client.submit("marker_held", {"tag": tag})
        await wait_until("the held step runs", lambda: worker.running_attempts == 1)

        empty_in_place(path)
        deadline = time.monotonic() + WAIT_S
        while (answer := await http_get(address, "/readyz"))[0] == 200:
            assert time.monotonic() < deadline, "/readyz kept answering 200"
            await asyncio.sleep(0.01)
        code, body = answer
        assert (code, body["status"]) == (503, "store_lost"), body
        assert "lost its data" in body["error"]
        RELEASE[tag].set()  # its step:done finds the run gone: the attempt ends quietly
        await wait_until("the attempt ended", lambda: worker.running_attempts == 0)

        # Queued, and due on a timer, while the marker is gone: neither is touched.
        queued = await worker.client.submit("marker_quick", {"n": 2})
        delayed = await worker.client.submit("marker_quick", {"n": 3}, delay=0.05)
        await stays(
            "nothing is claimed or woken",
            lambda: (
                status_of(store, "marker_quick", queued.run_id) == RunStatus.PENDING
                and status_of(store, "marker_quick", delayed.run_id) == RunStatus.SLEEPING
            ),
            1.0,
        )
        assert store.get_workflow_policy("marker_quick") is None  # gone with the data

        assert store.ensure_marker() is True  # what `lockgate store init` does
        assert await queued.result(timeout=WAIT_S) == 3
        assert await delayed.result(timeout=WAIT_S) == 4
        assert (await http_get(address, "/readyz"))[0] == 200
        assert store.get_workflow_policy("marker_quick") is not None  # recorded again
        assert status_of(store, "marker_held", in_flight.run_id) is None
    store.close()
    records = [r for r in caplog.records if r.name.startswith("lockgate")]
    loud = [r for r in records if r.levelno >= logging.WARNING]
    assert len(loud) == 1, [r.getMessage() for r in loud]  # said once, nothing per run
    (lost,) = loud
    assert lost.levelno == logging.ERROR
    assert lost.name == "lockgate.worker.status"
    assert "lost its data" in lost.getMessage()
    assert "`lockgate store init`" in lost.getMessage()
    assert not any(r.exc_info for r in records), "a traceback was logged"
    assert any("carries its marker again" in r.getMessage() for r in records)


def test_a_valkey_namespace_written_again_after_losing_its_data_still_opens() -> None:
    """A store connected before the loss queues a run into the emptied namespace (its queue
    counter comes back, its layout record does not): a store opened afterwards reads it as
    this layout, not an older lockgate's."""
    namespace = f"m{uuid.uuid4().hex[:12]}"
    before = ValkeyStore(shared_url(), namespace=namespace, retry_attempts=0)
    try:
        before.ensure_marker()
        doomed = list(before._redis.scan_iter(match=f"lg:{{{namespace}}}:*"))
        before._redis.delete(*doomed)
        before.submit_run("w", "after-the-loss", {})
        assert before._redis.get(f"lg:{{{namespace}}}:layout") is None
        after = ValkeyStore(shared_url(), namespace=namespace, retry_attempts=0)
        try:
            assert after.get_run("w", "after-the-loss") is not None
            assert after.read_marker() is None  # still lost: only init or a rebuild marks it
        finally:
            after.close()
    finally:
        before.close()


def test_a_namespace_of_layout_1_is_still_refused_when_it_has_a_layout_2_lookalike() -> None:
    namespace = f"m{uuid.uuid4().hex[:12]}"
    probe = ValkeyStore(shared_url(), namespace=f"{namespace}-probe", retry_attempts=0)
    try:
        probe._redis.set(f"lg:{{{namespace}}}:qseq", "7")
        probe._redis.set(f"lg:{{{namespace}}}:r:1#w:1#r", "x")  # one key that reads as layout 2
        probe._redis.set(f"lg:{{{namespace}}}:r:billing:eu:42", "x")  # and one that does not
        with pytest.raises(ConfigurationError, match="older lockgate"):
            ValkeyStore(shared_url(), namespace=namespace, retry_attempts=0)
    finally:
        probe.close()


async def test_a_rebuild_marks_the_store_it_restored(
    kafka_bootstrap: str, clock: ManualClock
) -> None:
    lifecycle = ValkeyLifecycleStore(
        shared_url(), namespace=f"m{uuid.uuid4().hex[:12]}", clock=clock, retry_attempts=0
    )
    events = KafkaEventLogStore(kafka_bootstrap, topic_prefix=f"lgm{uuid.uuid4().hex[:12]}")
    store = CompositeStore(lifecycle=lifecycle, events=events)
    try:
        store.ensure_marker()
        store.submit_run("w", "r1", {})
        doomed = list(lifecycle._redis.scan_iter(match=f"lg:{{{lifecycle.namespace}}}:*"))
        lifecycle._redis.delete(*doomed)
        assert store.read_marker() is None
        report = rebuild_lifecycle(store)
        assert report.restored_total == 1
        assert store.read_marker() is not None
        assert store.get_run("w", "r1") is not None
    finally:
        store.close()


def test_store_init_marks_a_valkey_namespace_once(capsys: pytest.CaptureFixture[str]) -> None:
    from lockgate.cli._main import main

    namespace = f"m{uuid.uuid4().hex[:12]}"
    url = ["--store", f"{shared_url()}?namespace={namespace}"]
    assert main(["store", "init", *url]) == 0
    assert "marked ValkeyStore(" in capsys.readouterr().out
    store = ValkeyStore(shared_url(), namespace=namespace)
    try:
        marker = store.read_marker()
        assert marker is not None
        assert main(["store", "init", *url]) == 0
        assert "is already a store; nothing to do" in capsys.readouterr().out
        assert store.read_marker() == marker
    finally:
        store.close()


async def test_a_marker_written_anew_before_the_worker_looked_is_said_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Another worker (or `store init`) marked the emptied store before this one read the
    marker: the attempt that finds its run gone finds a marker of another id, says so once,
    ends quietly, and the worker goes on."""
    caplog.set_level(logging.INFO, logger="lockgate")
    path = tmp_path / "store.db"
    # A heartbeat cadence far beyond the test: only the attempt's own finding reads the marker.
    store = SQLiteStore(path, lock_ttl=7200.0, heartbeat_interval=3600.0)
    tag = uuid.uuid4().hex
    RELEASE[tag] = asyncio.Event()
    worker = WorkflowWorker(workflows=[marker_held, marker_quick], store=store, options=options())
    async with serving(worker):
        first = await worker.client.submit("marker_quick", {"n": 1})
        assert await first.result(timeout=WAIT_S) == 2
        await worker.client.submit("marker_held", {"tag": tag})
        await wait_until("the held step runs", lambda: worker.running_attempts == 1)
        before = store.read_marker()
        empty_in_place(path)
        assert store.ensure_marker() is True
        RELEASE[tag].set()
        await wait_until("the attempt ended", lambda: worker.running_attempts == 0)
        after = await worker.client.submit("marker_quick", {"n": 5})
        assert await after.result(timeout=WAIT_S) == 6  # the worker went on
    store.close()
    assert before is not None
    loud = [r for r in caplog.records if r.name.startswith("lockgate") and r.levelno >= 30]
    assert len(loud) == 1, [r.getMessage() for r in loud]
    assert "lost its data and was marked anew" in loud[0].getMessage()
    assert not any(r.exc_info for r in caplog.records)
