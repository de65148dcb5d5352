"""lockgate's side: one ``lockgate worker`` process on the streaming deployment's store,
``open_store(valkey, journal="kafka://...")`` with 4 shards, a fresh namespace and journal
prefix each repeat."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

from _timing import exactly_once, span_rate, wait_completion
from _work import (
    BOUND_PARTITIONS,
    MADE,
    WINDOW,
    Outcome,
    Scale,
    create_topic,
    fresh_name,
    produce_events,
    produce_records,
)
from lockgate_app import IN_FLIGHT, peers_collect

from _servers import ended_runs
from lockgate import CompositeStore, RunInfo, RunStatus, ValkeyStore, open_store
from lockgate.stores.kafka import KafkaEventLogStore
from lockgate.streams._topics import trigger_topic
from lockgate.streams.triggers._produce import prepare_trigger_topics
from lockgate.workflow._spec import spec_of

HERE = Path(__file__).resolve().parent
SHARDS = 4

DURABILITY = (
    "each step's journal record acks=all on the one-broker topic (Kafka's default flush: "
    "the page cache, no fsync per write); Valkey as bench/_servers.py starts it, no AOF "
    "and no snapshots (memory only)"
)


def _store(url: str, bootstrap: str) -> tuple[str, str, CompositeStore]:
    target = f"{url}?namespace=peers{uuid.uuid4().hex[:8]}&shard_count={SHARDS}"
    prefix = f"peers{uuid.uuid4().hex[:8]}"
    MADE.add(prefix)
    journal = f"kafka://{bootstrap}?topic_prefix={prefix}"
    store = open_store(target, journal=journal)
    assert isinstance(store, CompositeStore)
    return target, journal, store


def _lifecycle(store: CompositeStore) -> ValkeyStore:
    assert isinstance(store.lifecycle, ValkeyStore)
    return store.lifecycle


def _worker(served: str, target: str, journal: str, topic: str) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "lockgate", "worker", f"lockgate_app:{served}"]
    command += ["--store", target, "--journal", journal, "--concurrency", str(IN_FLIGHT)]
    env = {**os.environ, "LOCKGATE_BENCH_TOPIC": topic}
    return subprocess.Popen(command, cwd=HERE, env=env)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _runs(store: CompositeStore, name: str) -> Iterator[RunInfo]:
    cursor = None
    while True:
        page, cursor = store.list_runs(name, limit=1000, cursor=cursor)
        yield from page
        if not cursor:
            return


def _ended(runs: list[RunInfo]) -> list[float]:
    return [info.ended_at for info in runs if info.ended_at is not None]


def bound(url: str, bootstrap: str, scale: Scale) -> Outcome:
    topic = fresh_name("bound")
    create_topic(bootstrap, topic, BOUND_PARTITIONS)
    produce_records(bootstrap, topic, scale)
    target, journal, store = _store(url, bootstrap)
    proc = _worker("bound", target, journal, topic)
    per = 1
    try:
        lifecycle = _lifecycle(store)
        polled = wait_completion(
            lambda: ended_runs(lifecycle), scale.records, lambda: proc.poll() is None
        )
        runs = list(_runs(store, "peers_bound"))
        line, exact = exactly_once(
            (int(info.params["value"]["n"]) for info in runs if info.status == RunStatus.COMPLETE),
            scale.records,
            "records",
            "completed run",
        )
        unfinished = sum(1 for info in runs if info.status != RunStatus.COMPLETE)
        if unfinished:
            line, exact = f"{line}; {unfinished} runs not completed", False
        return Outcome(span_rate(_ended(runs), per), polled, line, exact)
    finally:
        _stop(proc)
        store.close()


def collect(url: str, bootstrap: str, scale: Scale) -> Outcome:
    target, journal, store = _store(url, bootstrap)
    events = store.events
    assert isinstance(events, KafkaEventLogStore)
    topic = trigger_topic(events.topic_prefix, spec_of(peers_collect))
    prepare_trigger_topics(events, topic)
    produce_events(bootstrap, topic, scale)
    proc = _worker("collect", target, journal, "unused")
    per = WINDOW
    try:
        lifecycle = _lifecycle(store)
        polled = wait_completion(
            lambda: ended_runs(lifecycle) * WINDOW, scale.events, lambda: proc.poll() is None
        )
        runs = list(_runs(store, "peers_collect"))
        done = [info for info in runs if info.status == RunStatus.COMPLETE]
        line, exact = exactly_once(
            (int(event["n"]) for info in done for event in info.params["events"]),
            scale.events,
            "events",
            "completed Collect run",
        )
        if len(done) != len(runs):
            line, exact = f"{line}; {len(runs) - len(done)} runs not completed", False
        return Outcome(span_rate(_ended(runs), per), polled, line, exact)
    finally:
        _stop(proc)
        store.close()
