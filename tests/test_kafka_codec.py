"""The Kafka journal's record format and partitioning, without a broker: Avro values against
schemas/run_event.avsc, the record headers, and a run's partition being its Valkey shard."""

from __future__ import annotations

import io
import json
from pathlib import Path

import fastavro
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lockgate import SchemaVersionMismatch
from lockgate.journal._events import EPOCH_HEADER, RunEvent
from lockgate.stores._records import Submit
from lockgate.stores._shards import shard_for
from lockgate.stores.kafka import _codec
from lockgate.stores.kafka._partition import gate_key

SCHEMAS = Path(__file__).parents[1] / "schemas"


def _init(run_id: str, gates: dict[str, object]) -> RunEvent:
    return RunEvent("run:init", {"name": "wf", "params": {}, "gates": gates}, run_id, run_seq=1)


def test_the_packaged_schema_is_the_one_in_schemas() -> None:
    packaged = Path(_codec.__file__).with_name("run_event.avsc")
    assert json.loads(packaged.read_text()) == json.loads((SCHEMAS / "run_event.avsc").read_text())


def test_an_event_round_trips_through_its_avro_value() -> None:
    event = RunEvent(
        "step:done",
        {"call_index": 2, "result": {"n": [1, 2.5, None, "é"]}},
        "r-1",
        run_seq=7,
        headers={EPOCH_HEADER: "3", "lg-requires": "epochs"},
    )
    assert _codec.decode(_codec.encode(event)) == event


def test_the_value_is_plain_avro_any_reader_of_the_schema_reads() -> None:
    event = RunEvent("run:init", {"a": 1}, "r-2", run_seq=1)
    schema = fastavro.parse_schema(json.loads((SCHEMAS / "run_event.avsc").read_text()))
    record = fastavro.schemaless_reader(io.BytesIO(_codec.encode(event)), schema, None)
    assert record == {
        "kind": "run:init",
        "payload": '{"a":1}',
        "run_id": "r-2",
        "schema_version": "1",
        "run_seq": 1,
        "headers": {},
    }


_text = st.text(max_size=80)
_events = st.builds(
    RunEvent,
    kind=_text,
    payload=st.dictionaries(_text, st.integers() | _text | st.none(), max_size=4),
    run_id=_text,
    schema_version=st.sampled_from(["1", "1.2"]) | _text,
    run_seq=st.none() | st.integers(min_value=-(2**63), max_value=2**63 - 1),
    headers=st.dictionaries(_text, _text, max_size=70),
)


@settings(max_examples=300, deadline=None)
@given(event=_events)
def test_the_value_is_byte_for_byte_what_fastavro_writes(event: RunEvent) -> None:
    # encode() writes the Avro binary by hand (the append hot path); fastavro is the reference.
    out = io.BytesIO()
    fastavro.schemaless_writer(
        out,
        _codec.schema(),
        {
            **event.to_dict(),
            "payload": json.dumps(event.payload, separators=(",", ":"), sort_keys=True),
        },
    )
    assert _codec.encode(event) == out.getvalue()
    assert _codec.decode(_codec.encode(event)) == event


def test_a_value_that_is_not_a_run_event_is_refused() -> None:
    # A reader turns it into JournalRecordUndecodable, saying where (tests/test_kafka_faults.py).
    with pytest.raises(_codec.NotARunEvent):
        _codec.decode(b"\x02")


def test_record_headers_carry_workflow_run_seq_epoch_and_schema_version() -> None:
    event = RunEvent("step:done", {}, "r-3", run_seq=4, headers={EPOCH_HEADER: "2"})
    headers = _codec.header_map(_codec.record_headers("orders", event))
    assert headers == {
        "lg-workflow": "orders",
        "lg-run-id": "r-3",
        "lg-run-seq": "4",
        "lg-epoch": "2",
        "lg-schema": "1",
    }
    unfenced = RunEvent("run:init", {}, "r-3", run_seq=1)
    assert "lg-epoch" not in _codec.header_map(_codec.record_headers("orders", unfenced))


def test_the_gate_key_is_the_limit_key_else_the_rate_key_else_the_run_id() -> None:
    limit = {"key": "acct-1", "max": 2}
    rate = {"key": "api", "per_second": 1.0, "burst": 1}
    assert gate_key(_init("r", {"concurrency": limit, "rate": rate})) == "acct-1"
    assert gate_key(_init("r", {"rate": rate})) == "api"
    assert gate_key(_init("r", {})) == "r"
    assert gate_key(_init("r", {"unknown": True})) == "r"


def test_a_submitted_runs_gate_key_is_read_back_from_its_run_init() -> None:
    submit = Submit(
        name="wf",
        params={},
        metadata=None,
        owner=None,
        version="v1",
        version_behavior="pinned",
        concurrency_key="k-9",
        concurrency_max=1,
        rate_key="api",
        rate_per_second=1.0,
        rate_burst=1,
        provenance=None,
        start_at=None,
    )
    event = RunEvent("run:init", submit.init_payload(0.0), "r-9", run_seq=1)
    assert gate_key(event) == "k-9"


@pytest.mark.parametrize("partitions", [1, 2, 7, 16])
def test_the_partition_is_the_valkey_shard_of_the_same_key(partitions: int) -> None:
    keys = [f"key-{i}" for i in range(200)]
    assert {shard_for(k, partitions) for k in keys} == set(range(partitions))
    # Spelled out, not Python's salted hash: the first 8 bytes of SHA-1, big-endian, mod n.
    assert shard_for("acct-1", 16) == 0x6F795E0E61DE4F75 % 16


def test_a_record_of_a_newer_schema_major_is_refused_not_guessed() -> None:
    value = _codec.encode(_init("r-3", {}))
    assert _codec.decode(value, "1.4") == _codec.decode(value)  # a minor reads as its major
    with pytest.raises(SchemaVersionMismatch, match=r"schema version 2\.0") as refused:
        _codec.decode(value, "2.0")
    assert refused.value.missing == ("schema_version 2.0",)
    with pytest.raises(_codec.NotARunEvent, match="not a schema version"):
        _codec.decode(value, "v-one")
