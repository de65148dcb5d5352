"""Journal events appended per second through KafkaEventLogStore, against raw produce.

From one run, on one broker (see ``_broker.py``), into one topic of one partition each:

- through the store, as a worker drives it: RUNS runs, IN_FLIGHT of them at a time on one
  event loop (a worker's composite calls the store natively there, ``coroutine_for``), each
  appending its journal one event at a time with ``append_copies`` and awaiting the
  acknowledgement before the next;
- raw: a confluent-kafka Producer with the store's producer settings (idempotent,
  ``acks=all``, the same ``linger.ms``) producing the same records (the same Avro values, keys
  and headers, so the same sizes) in one loop, then one ``flush``.

Once more, after those, the least any Python append that waits for its own acknowledgement
can cost, with no store at all: the same 512 coroutines, each encoding a record, producing it
with a delivery callback that resolves the record's own future (the loop woken once per batch
of reports), and awaiting it before the next. Its ratio to raw produce bounds the store's.

The events are the journal of a real one-step run (``_one_step.py`` on MemoryStore), renamed
per run. The raw figure is measured just before and just after the store's, and the ratio is
taken against their mean, as the other benchmarks do; REPEATS times, the median ratio is the
figure.

Not a test; record the output in docs/performance.md with the command:

    .venv/bin/python bench/kafka_appends.py
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from lockgate import MemoryStore, WorkflowClient
from lockgate.journal._events import RunEvent
from lockgate.stores.kafka import KafkaEventLogStore
from lockgate.stores.kafka._codec import encode, record_headers
from lockgate.stores.kafka._producer import producer_config
from lockgate.worker import WorkflowWorker

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _bracket import bracketed  # noqa: E402
from _broker import kafka_bootstrap  # noqa: E402
from _one_step import one_step  # noqa: E402

RUNS = 4000
IN_FLIGHT = 512
REPEATS = 3
NAME = "bench_one_step"


def one_step_journal() -> list[RunEvent]:
    """The journal a worker leaves for one one-step run."""
    store = MemoryStore()

    async def run_one() -> str:
        handle = await WorkflowClient(store).submit(NAME, {"n": 1})
        await WorkflowWorker(workflows=[one_step], store=store).run_until_idle()
        return handle.run_id

    run_id = asyncio.run(run_one())
    return store.load_run(NAME, run_id)


def journal_of(template: list[RunEvent], run_id: str) -> list[RunEvent]:
    return [
        RunEvent(e.kind, e.payload, run_id, e.schema_version, e.run_seq, e.headers)
        for e in template
    ]


def store_appends_per_second(bootstrap: str, template: list[RunEvent]) -> float:
    store = KafkaEventLogStore(bootstrap, topic_prefix=f"bench{uuid.uuid4().hex[:8]}")
    journals = [journal_of(template, uuid.uuid4().hex) for _ in range(RUNS)]
    store.append_copies(NAME, "warm-up", journal_of(template, "warm-up")[:1])
    append = store.coroutine_for(store.append_copies)
    assert append is not None

    async def serve(share: list[list[RunEvent]]) -> None:
        for journal in share:
            for event in journal:
                await append(NAME, event.run_id, [event])

    async def serve_all() -> float:
        started = time.perf_counter()
        await asyncio.gather(*(serve(journals[i::IN_FLIGHT]) for i in range(IN_FLIGHT)))
        return time.perf_counter() - started

    took = asyncio.run(serve_all())
    store.close()
    return RUNS * len(template) / took


def raw_produce_per_second(bootstrap: str, template: list[RunEvent]) -> float:
    """The same records produced by a bare Producer with the store's settings, then flushed."""
    producer = Producer(producer_config({"bootstrap.servers": bootstrap}, 30.0))
    store = KafkaEventLogStore(bootstrap, topic_prefix=f"raw{uuid.uuid4().hex[:8]}")
    topic = store.topic
    store.close()
    records = []
    for _ in range(RUNS):
        run_id = uuid.uuid4().hex
        for event in journal_of(template, run_id):
            records.append((encode(event), run_id.encode(), record_headers(NAME, event)))
    producer.produce(topic, b"warm-up", partition=0)
    producer.flush(30)
    started = time.perf_counter()
    for value, key, headers in records:
        while True:
            try:
                producer.produce(topic, value=value, key=key, partition=0, headers=headers)
                break
            except BufferError:
                producer.poll(0.01)
    left = producer.flush(60)
    took = time.perf_counter() - started
    if left:
        raise RuntimeError(f"{left} raw records were not acknowledged")
    return len(records) / took


def acknowledged_produce_per_second(bootstrap: str, template: list[RunEvent]) -> float:
    """Encode, produce and await each record's own acknowledgement, IN_FLIGHT coroutines at a
    time, with nothing else: the floor under any acknowledged append written in Python."""
    producer = Producer(producer_config({"bootstrap.servers": bootstrap}, 30.0))
    store = KafkaEventLogStore(bootstrap, topic_prefix=f"ack{uuid.uuid4().hex[:8]}")
    topic = store.topic
    store.close()
    producer.produce(topic, b"warm-up", partition=0)
    producer.flush(30)
    journals = [journal_of(template, uuid.uuid4().hex) for _ in range(RUNS)]

    async def serve_all() -> float:
        loop = asyncio.get_running_loop()
        reported: list[asyncio.Future[None]] = []
        lock = threading.Lock()
        serving = True

        def wake() -> None:
            with lock:
                batch = reported[:]
                reported.clear()
            for future in batch:
                future.set_result(None)

        def reporter(future: asyncio.Future[None]) -> Callable[[Any, Any], None]:
            def report(err: Any, msg: Any) -> None:
                with lock:
                    first = not reported
                    reported.append(future)
                if first:
                    loop.call_soon_threadsafe(wake)

            return report

        def poll() -> None:
            while serving:
                producer.poll(0.05)

        async def serve(share: list[list[RunEvent]]) -> None:
            for journal in share:
                for event in journal:
                    future = loop.create_future()
                    producer.produce(
                        topic,
                        value=encode(event),
                        key=event.run_id.encode(),
                        partition=0,
                        headers=record_headers(NAME, event),
                        on_delivery=reporter(future),
                    )
                    await future

        poller = threading.Thread(target=poll, daemon=True)
        poller.start()
        started = time.perf_counter()
        await asyncio.gather(*(serve(journals[i::IN_FLIGHT]) for i in range(IN_FLIGHT)))
        took = time.perf_counter() - started
        serving = False
        poller.join()
        return took

    return RUNS * len(template) / asyncio.run(serve_all())


def main() -> None:
    template = one_step_journal()
    sizes = [len(encode(e)) for e in template]
    print(
        f"events per run: {len(template)} ({', '.join(e.kind for e in template)}); Avro values "
        f"of {min(sizes)}-{max(sizes)} bytes, mean {statistics.mean(sizes):.0f}"
    )

    def report(rate: float, raw: float, after: float) -> None:
        baseline = (raw + after) / 2
        print(
            f"journal events appended: {rate:,.0f} events/s through KafkaEventLogStore "
            f"({IN_FLIGHT} runs at a time, one event per append_copies, each acknowledged); "
            f"raw idempotent acks=all produce + flush {raw:,.0f} before and {after:,.0f} "
            f"after, mean {baseline:,.0f} records/s; ratio {rate / baseline:.4f}"
        )

    with kafka_bootstrap() as bootstrap:
        ratio = bracketed(
            lambda: store_appends_per_second(bootstrap, template),
            lambda: raw_produce_per_second(bootstrap, template),
            REPEATS,
            report,
        )
        print(f"journal appends: median ratio {ratio:.4f} of {REPEATS}")
        floor = acknowledged_produce_per_second(bootstrap, template)
        raw = raw_produce_per_second(bootstrap, template)
        print(
            f"the floor, no store: {floor:,.0f} records/s each encoded, produced and its own "
            f"acknowledgement awaited ({IN_FLIGHT} at a time); raw produce + flush {raw:,.0f} "
            f"just after; ratio {floor / raw:.4f}"
        )


if __name__ == "__main__":
    main()
