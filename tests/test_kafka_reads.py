"""Reads of a Kafka journal on the Valkey + Kafka composite: a worker answers the runs it holds
from memory, with no request to the broker, and a run another process moved on (or ended) is
read from the topic, never stale from memory."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterator

import pytest

from lockgate import EventKind, WorkflowClient, WorkflowContext, step, workflow
from lockgate.journal._events import RunEvent
from lockgate.stores import CompositeStore, KafkaEventLogStore, ValkeyLifecycleStore
from lockgate.worker import WorkerOptions, WorkflowWorker
from valkey_server import shared_url

Make = Callable[[], CompositeStore]


@pytest.fixture
def composites(kafka_bootstrap: str) -> Iterator[Make]:
    """Composites on one Valkey namespace and one topic, as separate processes would have."""
    namespace, prefix = f"kr{uuid.uuid4().hex[:10]}", f"kr{uuid.uuid4().hex[:10]}"
    made: list[CompositeStore] = []

    def make() -> CompositeStore:
        lifecycle = ValkeyLifecycleStore(shared_url(), namespace=namespace)
        events = KafkaEventLogStore(
            kafka_bootstrap, topic_prefix=prefix, shard_count=lifecycle.shard_count
        )
        made.append(CompositeStore(lifecycle=lifecycle, events=events))
        return made[-1]

    yield make
    for store in made:
        store.close()


def _log(store: CompositeStore) -> KafkaEventLogStore:
    assert isinstance(store.events, KafkaEventLogStore)
    return store.events


held = asyncio.Event()
go_on = asyncio.Event()


@step(name="kreads_add")
async def add(n: int) -> int:
    return n + 1


@step(name="kreads_hold")
async def hold(n: int) -> int:
    held.set()
    await go_on.wait()
    return n


@workflow(name="kreads_flow")
async def flow(ctx: WorkflowContext, n: int) -> int:
    n = await add(n)
    n = await add(n)
    n = await hold(n)
    return await add(n)


async def test_a_worker_reads_the_run_it_holds_from_memory_after_its_first_load(
    composites: Make,
) -> None:
    held.clear()
    go_on.clear()
    submitter, served = composites(), composites()
    handle = await WorkflowClient(submitter, poll_interval=0.01).submit("kreads_flow", {"n": 1})
    run = ("kreads_flow", handle.run_id)
    # The first load of a run submitted elsewhere: its outbox holds run:init alone, and the
    # position its submitter kept shows that event acknowledged, so even this needs no read.
    assert [e.kind for e in served.load_run(*run)] == [EventKind.RUN_INIT]
    first_load = _log(served).topic_reads
    worker = WorkflowWorker(
        workflows=[flow], store=served, options=WorkerOptions(claim_poll_interval=0.01)
    )
    task = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(held.wait(), 30)
        # Mid-attempt, the run held: every kind of journal read answers from memory.
        journal = await asyncio.to_thread(served.load_run, *run)
        assert [e.run_seq for e in journal] == list(range(1, len(journal) + 1))
        assert [e.kind for e in journal].count(EventKind.STEP_DONE) == 2
        assert await asyncio.to_thread(served.get_last_event, *run) == journal[-1]
        assert await asyncio.to_thread(served.read_events_from, *run, 2) == journal[2:]
        page = await asyncio.to_thread(served.replay_run, *run, cursor=1, count=2)
        assert page == (journal[1:3], 3)
        assert _log(served).topic_reads == first_load
        go_on.set()
        assert await handle.result(timeout=30) == 4
    finally:
        worker.stop()
        await task
    ended = await asyncio.to_thread(served.load_run, *run)
    assert ended[-1].kind == EventKind.RUN_COMPLETE
    assert [e.run_seq for e in ended] == list(range(1, len(ended) + 1))
    assert _log(served).topic_reads == first_load
    # The topic holds what memory answered: another process reads the same journal.
    assert composites().load_run(*run) == ended


def test_a_run_another_process_ended_is_read_from_the_topic_not_memory(composites: Make) -> None:
    mine, other = composites(), composites()
    run = ("kreads_flow", "r-1")
    mine.submit_run(*run, {"n": 1})
    lease = "worker-a/1"
    assert mine.claim_next_run("kreads_flow", lease) == "r-1"
    step_done = RunEvent("step:done", {"call_index": 0, "result": 2}, "r-1")
    mine.append_and_poll(*run, [step_done], fence=lease)
    held_journal = mine.load_run(*run)
    assert (held_journal[0].kind, held_journal[-1].kind) == (EventKind.RUN_INIT, "step:done")
    reads = _log(mine).topic_reads
    assert mine.load_run(*run) == held_journal  # held: from memory
    assert _log(mine).topic_reads == reads
    # Another process ends the run: it copies the terminal and drops the outbox. Its first
    # copy of the run reads the topic, as the outbox holds more than run:init.
    other.terminate_run(*run, reason="operator")
    assert _log(other).topic_reads > 0
    assert mine.lifecycle.events_after(*run, 0) == []  # type: ignore[attr-defined]
    journal = mine.load_run(*run)
    assert journal[: len(held_journal)] == held_journal
    assert journal[-1].is_terminal
    assert mine.get_last_event(*run) == journal[-1]
    assert _log(mine).topic_reads > reads
    assert mine.load_run(*run) == other.load_run(*run) == journal


def test_a_standalone_store_reads_the_topic_for_what_its_memory_lacks(
    kafka_bootstrap: str,
) -> None:
    prefix = f"ks{uuid.uuid4().hex[:10]}"
    writer = KafkaEventLogStore(kafka_bootstrap, topic_prefix=prefix)
    reader = KafkaEventLogStore(kafka_bootstrap, topic_prefix=prefix)
    init = RunEvent("run:init", {"name": "wf", "params": {}, "gates": {}}, "r-1", run_seq=1)
    steps = [RunEvent("step:done", {"call_index": i}, "r-1", run_seq=i + 2) for i in range(3)]
    writer.append_copies("wf", "r-1", [init, *steps[:2]])
    assert reader.load_run("wf", "r-1") == [init, *steps[:2]]
    reads = reader.topic_reads
    assert reader.journal_through("wf", "r-1", 3) == [init, *steps[:2]]
    assert reader.topic_reads == reads  # it holds 1..3: memory answers
    writer.append_copies("wf", "r-1", steps[2:])
    assert reader.journal_through("wf", "r-1", 4) == [init, *steps]
    assert reader.topic_reads > reads
    # On its own, with no one to vouch for the last event, every read asks the broker.
    reads = reader.topic_reads
    assert reader.load_run("wf", "r-1") == [init, *steps]
    assert reader.topic_reads > reads
    writer.close()
    reader.close()


def test_a_first_read_copies_what_a_crash_left_only_in_the_outbox(composites: Make) -> None:
    writer, reader = composites(), composites()
    run = ("kreads_flow", "r-2")
    writer.submit_run(*run, {"n": 1})
    # A process writes through the lifecycle and dies before it copies to Kafka.
    writer.lifecycle.request_cancel(*run, detail={"why": "crash test"})
    journal = reader.load_run(*run)  # its first read: the topic lacks run_seq 2
    assert [e.kind for e in journal] == [EventKind.RUN_INIT, EventKind.RUN_CANCEL]
    assert _log(reader).topic_reads > 0
    # The copy it made is in the topic: the topic alone (no outbox to copy) has it.
    log = _log(reader)
    alone = KafkaEventLogStore(
        log.bootstrap_servers, topic_prefix=log.topic.removesuffix(".journal")
    )
    assert alone.load_run(*run) == journal
    alone.close()


def test_a_run_another_process_copied_first_is_read_from_its_lowest_first_offset(
    composites: Make,
) -> None:
    """The submitter's copy of run:init lands after a worker's copies of the run's start: the
    submitter reads the run on from the lowest first offset the lifecycle keeps, not from its
    own copy, so the worker's events before it are not skipped."""
    submitter, worker = composites(), composites()
    init = RunEvent("run:init", {"name": "kreads_flow", "params": {"n": 1}}, "r-race", run_seq=1)
    pending = RunEvent("step:pending", {"call_index": 0}, "r-race", run_seq=2)
    done = RunEvent("step:done", {"call_index": 0, "result": 2}, "r-race", run_seq=3)
    submitter.lifecycle.submit_run("kreads_flow", "r-race", {"n": 1})  # no copy yet
    worker.events.append_copies("kreads_flow", "r-race", [init, pending])  # lands first
    submitter.events.append_copies("kreads_flow", "r-race", [init])
    worker.events.append_copies("kreads_flow", "r-race", [done])
    journal = submitter.events.load_run("kreads_flow", "r-race")
    assert [e.run_seq for e in journal] == [1, 2, 3]


def test_a_journal_read_with_a_gap_reads_again_from_the_lowest_first_offset(
    composites: Make,
) -> None:
    """A journal this process anchored past an event another copier put earlier (a position
    kept only after this process's read began) is read again from the kept position."""
    first, second = composites(), composites()
    log = _log(first)
    events = [
        RunEvent("run:init", {"name": "kreads_flow", "params": {}}, "r-gap", run_seq=1),
        RunEvent("step:pending", {"call_index": 0}, "r-gap", run_seq=2),
        RunEvent("step:done", {"call_index": 0, "result": 1}, "r-gap", run_seq=3),
    ]
    first.lifecycle.submit_run("kreads_flow", "r-gap", {})
    second.events.append_copies("kreads_flow", "r-gap", events[:2])
    log._keep_position = None  # this copy does not learn the kept position: anchored on itself
    log.append_copies("kreads_flow", "r-gap", events[:1])
    second.events.append_copies("kreads_flow", "r-gap", events[2:])
    assert [e.run_seq for e in log.load_run("kreads_flow", "r-gap")] == [1, 2, 3]


def test_a_journal_anchored_above_another_copiers_start_finds_the_tail_it_missed(
    composites: Make,
) -> None:
    """A process whose copy of run:init landed (and was kept) above a worker's whole run, the
    worker's own position kept only afterwards: its reads start from the lowest kept position
    too, so the worker's events and terminal are found though no gap shows in memory."""
    submitter, worker = composites(), composites()
    worker_log = _log(worker)
    run = ("kreads_flow", "r-tail")
    init = RunEvent("run:init", {"name": run[0], "params": {}}, run[1], run_seq=1)
    done = RunEvent("step:done", {"call_index": 0, "result": 1}, run[1], run_seq=2)
    end = RunEvent("run:complete", {"result": 1}, run[1], run_seq=3)
    submitter.lifecycle.submit_run(*run, {})
    keep = worker_log._keep_position
    worker_log._keep_position = None  # its position reaches Valkey last, below
    worker_log.append_copies(*run, [init, done, end])
    submitter.events.append_copies(*run, [init])  # kept: its own offset, the higher one
    assert keep is not None
    first_worker_record = worker_log._journals[run].first
    assert first_worker_record is not None
    keep(*run, 0, first_worker_record)
    assert [e.run_seq for e in submitter.events.load_run(*run)] == [1, 2, 3]


def test_an_outbox_left_after_its_terminal_was_copied_is_dropped_by_the_next_read(
    composites: Make,
) -> None:
    store = composites()
    lifecycle = store.lifecycle
    assert isinstance(lifecycle, ValkeyLifecycleStore)
    handle = asyncio.run(WorkflowClient(store).submit("kreads_flow", {"n": 1}))
    run = ("kreads_flow", handle.run_id)
    [claimed] = list(store.claim_next_runs_loaded(run[0], ["lease-1"]))
    end = RunEvent("run:complete", {"result": 1}, run[1])
    lifecycle.append_events(*run, [end], fence="lease-1")  # Valkey only: no copy yet
    terminal = lifecycle.events_after(*run, 1)
    store.events.append_copies(*run, terminal)  # the copy made, the drop cut short
    assert lifecycle.events_after(*run, 0)  # the outbox is still there
    reader = composites()  # finds the terminal in Kafka already, so nothing left to copy
    assert [e.kind for e in reader.load_run(*run)][-1] == EventKind.RUN_COMPLETE
    assert lifecycle.events_after(*run, 0) == []
    assert claimed.run_id == run[1]
