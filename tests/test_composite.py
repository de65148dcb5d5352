"""CompositeStore: Valkey coordinates, an SQLite file keeps the journals. The conformance suite
runs on it too (tests/stores); these tests show where each half keeps what."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lockgate import (
    ConfigurationError,
    EventKind,
    MemoryStore,
    WorkflowClient,
    WorkflowContext,
    step,
    workflow,
)
from lockgate.journal._events import as_stored
from lockgate.stores import CompositeStore, SQLiteStore, ValkeyLifecycleStore
from lockgate.worker import WorkerOptions, WorkflowWorker
from valkey_server import shared_url


@pytest.fixture
def halves(tmp_path: Path) -> Iterator[tuple[ValkeyLifecycleStore, SQLiteStore]]:
    lifecycle = ValkeyLifecycleStore(shared_url(), namespace=f"c{uuid.uuid4().hex[:10]}")
    events = SQLiteStore(tmp_path / "journal.db")
    yield lifecycle, events
    lifecycle.close()
    events.close()


def test_each_half_must_be_able_to_play_its_part(tmp_path: Path) -> None:
    events = SQLiteStore(tmp_path / "journal.db")
    with pytest.raises(ConfigurationError, match="outbox"):
        CompositeStore(lifecycle=MemoryStore(), events=events)
    lifecycle = ValkeyLifecycleStore(shared_url(), namespace=f"c{uuid.uuid4().hex[:10]}")
    with pytest.raises(ConfigurationError, match="append_copies"):
        CompositeStore(lifecycle=lifecycle, events=MemoryStore())
    events.close()
    lifecycle.close()


@step(name="composite_double")
async def double(n: int) -> int:
    return n * 2


@workflow(name="composite_flow")
async def composite_flow(ctx: WorkflowContext, n: int) -> int:
    await ctx.sleep(0)
    return await double(n)


async def test_a_worker_on_a_composite_leaves_the_journal_in_the_event_log(
    halves: tuple[ValkeyLifecycleStore, SQLiteStore],
) -> None:
    lifecycle, events = halves
    store = CompositeStore(lifecycle=lifecycle, events=events)
    client = WorkflowClient(store, poll_interval=0.01)
    handles = [await client.submit("composite_flow", {"n": n}) for n in range(5)]
    worker = WorkflowWorker(
        workflows=[composite_flow], store=store, options=WorkerOptions(claim_poll_interval=0.01)
    )
    await worker.run_until_idle()
    assert [await handle.result(timeout=5) for handle in handles] == [0, 2, 4, 6, 8]
    for handle in handles:
        journal = events.load_run("composite_flow", handle.run_id)  # the log alone
        assert [e.kind for e in journal][-1] == EventKind.RUN_COMPLETE
        assert [e.run_seq for e in journal] == list(range(1, len(journal) + 1))
        done = [e for e in journal if e.kind == EventKind.STEP_DONE]
        assert done[0].headers["lg-epoch"] == "1"  # fenced by the claim that wrote it
        # The run ended, so Valkey no longer keeps its events.
        assert lifecycle.events_after("composite_flow", handle.run_id, 0) == []
    assert store.read_events_from("composite_flow", handles[0].run_id, 1)[0].run_seq == 2


def test_a_copy_lost_to_a_crash_is_made_by_the_next_read(
    halves: tuple[ValkeyLifecycleStore, SQLiteStore],
) -> None:
    lifecycle, events = halves
    store = CompositeStore(lifecycle=lifecycle, events=events)
    store.submit_run("composite_flow", "r1", {"n": 1})
    assert store.claim_next_run("composite_flow", "lease-a") == "r1"
    # A process appends through the lifecycle and dies before it copies.
    lifecycle.request_cancel("composite_flow", "r1", detail={"why": "crash test"})
    assert [e.kind for e in events.load_run("composite_flow", "r1")] == [EventKind.RUN_INIT]
    journal = store.load_run("composite_flow", "r1")
    assert [e.kind for e in journal] == [EventKind.RUN_INIT, EventKind.RUN_CANCEL]
    assert [e.kind for e in events.load_run("composite_flow", "r1")] == [
        EventKind.RUN_INIT,
        EventKind.RUN_CANCEL,
    ]
    # Copying again changes nothing.
    assert store.load_run("composite_flow", "r1") == journal


_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
_data = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=8) | st.integers() | st.booleans(), inner, max_size=4)
    ),
    max_leaves=20,
)


@given(payload=st.dictionaries(st.text(max_size=8), _data, max_size=5))
def test_a_copy_built_from_the_written_events_is_what_the_outbox_gives_back(
    payload: dict[str, object],
) -> None:
    # The composite builds a write's copies from the events written, not from the outbox
    # read back: each payload must come out as the store's JSON gives it back, and be a copy.
    kept = as_stored(payload)
    assert kept == json.loads(json.dumps(payload, allow_nan=False))
    assert json.dumps(kept) == json.dumps(json.loads(json.dumps(payload)))
    if payload:
        assert kept is not payload
