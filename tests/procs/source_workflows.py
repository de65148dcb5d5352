"""Workflows that consume streams, for worker processes started by ``test_sources_processes``.

Each batch handler appends one line per record it handles to the file ``LOCKGATE_TEST_RECORD``
names, all of a batch's lines in one ``O_APPEND`` write::

    <stream> <partition> <offset> <pid>

so the test can tell which process handled which record, and how often.
"""

from __future__ import annotations

import os
import time
from typing import Any

from lockgate import Batch, InMemorySource, KafkaSource, WorkflowContext, workflow
from lockgate.workflow._record import KafkaRecord

RECORD_ENV = "LOCKGATE_TEST_RECORD"


def record_batch(stream: str, places: list[tuple[int, int]], pause: float) -> None:
    """Note ``places`` (partition, offset) as handled by this process, then take ``pause``
    seconds, so a test can kill a worker in the middle of a stream."""
    pid = os.getpid()
    text = "".join(f"{stream} {partition} {offset} {pid}\n" for partition, offset in places)
    fd = os.open(os.environ[RECORD_ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)
    time.sleep(pause)


@workflow(name="proc_stream_memory", version="1")
async def proc_stream_memory(
    ctx: WorkflowContext, records: int = 100, batch_size: int = 7, pause: float = 0.05
) -> list[int]:
    # A fresh source per attempt, as a process that restarted has: nothing committed, so only
    # the journal says where the stream stands.
    source = InMemorySource(source_id="memory", records=list(range(records)), batch_size=batch_size)

    def handle(batch: Batch[int]) -> int:
        places = [(batch.partition, batch.offset + i) for i in range(len(batch.records))]
        assert [offset for _, offset in places] == batch.records
        record_batch("memory", places, pause)
        return sum(batch.records)

    progress = await ctx.consume(source, handle, poll_timeout=0.1)
    return [progress.batches, progress.records]


@workflow(name="proc_stream_kafka", version="1")
async def proc_stream_kafka(
    ctx: WorkflowContext, topic: str, bootstrap: str, expect: int, pause: float = 0.05
) -> dict[str, Any]:
    def handle(batch: Batch[KafkaRecord[Any]]) -> int:
        places = [(r.partition, r.offset) for r in batch.records]
        assert all(r.value["n"] >= 0 for r in batch.records)
        record_batch(topic, places, pause)
        return len(places)

    handled = batches = 0
    with KafkaSource(topic, bootstrap_servers=bootstrap, batch_size=25) as source:
        # Each call ends on a poll that found nothing; the loop goes on until every record
        # the test sent was handled, however slowly a restarted consumer starts.
        while handled < expect:
            progress = await ctx.consume(source, handle, poll_timeout=2.0)
            handled += progress.records
            batches += progress.batches
    return {"records": handled, "batches": batches}


WORKFLOWS = [proc_stream_memory, proc_stream_kafka]
