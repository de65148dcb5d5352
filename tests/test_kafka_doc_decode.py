"""The ``decode.py`` of docs/kafka.md ("Reading the topic with kcat"), run as a reader would
run it: copied out of the page into a folder of its own, fed the journal records of a real run
on the suite's broker framed as kcat's ``-f '%R%s'`` frames them, with its working directory
anywhere but the checkout."""

from __future__ import annotations

import asyncio
import json
import re
import struct
import subprocess
import sys
import uuid
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

from lockgate import InlineWorkflowRunner, WorkflowContext, workflow
from lockgate.stores import CompositeStore, KafkaEventLogStore, ValkeyLifecycleStore
from valkey_server import shared_url

DOCS = Path(__file__).resolve().parents[1] / "docs" / "kafka.md"
SHARDS = 1


@workflow(name="dd_greet")
async def dd_greet(ctx: WorkflowContext, who: str) -> str:
    return await ctx.step(str.upper, who, name="shout")


def decode_script() -> str:
    """The Python block of docs/kafka.md that opens with ``# decode.py``."""
    blocks = re.findall(r"```python\n(.*?)```", DOCS.read_text(), re.DOTALL)
    [script] = [block for block in blocks if block.startswith("# decode.py")]
    return script


def kcat_frames(bootstrap: str, topic: str) -> bytes:
    """Every value of ``topic``'s partition 0 as ``kcat -e -f '%R%s'`` writes it: each value's
    length as four big-endian bytes, then the value."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex, "enable.auto.commit": False}
    )
    try:
        end = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)[1]
        consumer.assign([TopicPartition(topic, 0, 0)])
        frames = b""
        read = 0
        while read < end:
            message = consumer.poll(30)
            assert message is not None, f"read {read} of {end} records of {topic}"
            assert message.error() is None, message.error()
            value = message.value() or b""
            frames += struct.pack(">i", len(value)) + value
            read += 1
        return frames
    finally:
        consumer.close()


def test_decode_py_from_the_docs_decodes_a_real_journal_from_any_folder(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    prefix = f"dd{uuid.uuid4().hex[:10]}"
    store = CompositeStore(
        lifecycle=ValkeyLifecycleStore(
            shared_url(), namespace=f"dd{uuid.uuid4().hex[:10]}", shard_count=SHARDS
        ),
        events=KafkaEventLogStore(kafka_bootstrap, topic_prefix=prefix, shard_count=SHARDS),
    )

    async def drive() -> str:
        runner = InlineWorkflowRunner(store=store)
        await runner.start()
        try:
            handle = await runner.client.submit("dd_greet", {"who": "ada"})
            await runner.run("dd_greet", handle.run_id)
            assert await handle.result(timeout=30) == "ADA"
            return handle.run_id
        finally:
            await runner.aclose()

    try:
        run_id = asyncio.run(drive())
        journal = store.load_run("dd_greet", run_id)
    finally:
        store.close()
    elsewhere = tmp_path / "elsewhere"  # no schemas/ folder here, nor above it
    elsewhere.mkdir()
    (elsewhere / "decode.py").write_text(decode_script())
    done = subprocess.run(
        [sys.executable, "decode.py"],
        cwd=elsewhere,
        input=kcat_frames(kafka_bootstrap, f"{prefix}.journal"),
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr.decode()
    decoded = [json.loads(line) for line in done.stdout.decode().splitlines()]
    assert [(d["run_id"], d["run_seq"], d["kind"]) for d in decoded] == [
        (run_id, event.run_seq, str(event.kind)) for event in journal
    ]
    assert json.loads(decoded[0]["payload"])["params"] == {"who": "ada"}
