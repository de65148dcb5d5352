"""A trigger topic's records read into events, or refused with the dead-letter reason, and the
windows of one partition (``lockgate.streams.triggers._records``, ``_windows``): no broker
needed."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lockgate import Collect, Debounce, WorkflowContext, workflow
from lockgate.stores import TriggerPolicy
from lockgate.streams.triggers._records import (
    NO_KEY,
    NOT_AN_OBJECT,
    NOT_JSON,
    OVER_CAP,
    Event,
    Refused,
    read_record,
)
from lockgate.streams.triggers._windows import PartitionWindows
from lockgate.workflow._spec import spec_of


@workflow(name="tr_digest", trigger=Collect(key="user", max_events=3, window_seconds=5))
async def tr_digest(ctx: WorkflowContext, key: str, events: list[Any], count: int) -> None:
    return None


@workflow(
    name="tr_capped",
    trigger=Debounce(key=lambda e: f"{e['org']}/{e['user']}", window_seconds=1),
    max_event_payload_bytes=100,
)
async def tr_capped(ctx: WorkflowContext, key: str, events: list[Any], count: int) -> None:
    return None


DIGEST = spec_of(tr_digest)
CAPPED = spec_of(tr_capped)


def reason(spec: Any, value: bytes | None, key: bytes | None = None) -> str:
    read = read_record(spec, value, key)
    assert isinstance(read, Refused), read
    return read.reason


def test_an_event_takes_the_record_key_else_the_declared_one() -> None:
    assert read_record(DIGEST, b'{"user": "u1", "n": 1}', None) == Event(
        "u1", {"user": "u1", "n": 1}
    )
    assert read_record(DIGEST, b'{"n": 1}', b"given") == Event("given", {"n": 1})
    assert read_record(CAPPED, b'{"org": "o", "user": "u"}', None) == Event(
        "o/u", {"org": "o", "user": "u"}
    )


@pytest.mark.parametrize(
    ("value", "why"),
    [
        (b"not json {", NOT_JSON),
        (b"", NOT_JSON),
        (None, NOT_JSON),
        (b"\xff\xfe", NOT_JSON),
        (b'{"user": NaN}', NOT_JSON),
        (b'{"user": "u", "x": 1e400}', NOT_JSON),  # infinity, once read
        (b'{"user": "\\ud800"}', NOT_JSON),  # a lone surrogate: no UTF-8 for it
        (b"[" * 100_000 + b"]" * 100_000, NOT_JSON),  # too deep for the parser
        (b"[1, 2]", NOT_AN_OBJECT),
        (b'"a string"', NOT_AN_OBJECT),
        (b"null", NOT_AN_OBJECT),
        (b'{"n": 1}', NO_KEY),  # no "user", and no record key
        (b'{"user": null}', NO_KEY),
    ],
)
def test_a_record_that_is_no_event_is_refused_with_its_reason(
    value: bytes | None, why: str
) -> None:
    assert reason(DIGEST, value) == why


def test_a_record_key_that_is_not_utf8_and_a_failing_key_function_are_no_key() -> None:
    assert reason(DIGEST, b'{"user": "u"}', b"\xff") == NO_KEY
    assert reason(CAPPED, b'{"org": "o"}') == NO_KEY  # the lambda raises KeyError


def test_the_cap_counts_the_event_as_compact_json_whatever_the_record_spells() -> None:
    assert reason(CAPPED, b'{"org": "o", "user": "' + b"x" * 100 + b'"}') == OVER_CAP
    # 1e15 is four bytes in the record and eighteen once written out as JSON again.
    grows = b'{"org":"o","user":"u","n":[' + b",".join([b"1e15"] * 5) + b"]}"
    assert len(grows) < 100
    assert reason(CAPPED, grows) == OVER_CAP
    spaced = b'{ "org" :  "o" ,  "user" :  "u" ' + b" " * 200 + b"}"
    assert isinstance(read_record(CAPPED, spaced, None), Event)  # its whitespace does not count


POLICY = TriggerPolicy("collect", window_seconds=5, max_events=3)


def windows(most_bytes: int | None = None) -> PartitionWindows:
    made = PartitionWindows(0, lambda key: POLICY, most_bytes)
    made.know(["a", "b"], {})
    return made


def test_a_window_fires_full_and_holds_the_commit_at_its_oldest_record() -> None:
    w = windows()
    assert w.add(10, "a", {"n": 1}, now=0.0) == []
    assert w.add(11, "b", {"n": 2}, now=0.0) == []
    assert w.add(12, "a", {"n": 3}, now=0.0) == []
    assert w.committable() == 10
    [full] = w.add(13, "a", {"n": 4}, now=0.0)
    assert (full.key, full.offsets) == ("a", (10, 12, 13))
    assert w.committable() == 10  # fired, but not yet known to the store
    assert w.fired(full, 13) is None
    assert w.committable() == 11  # b's window holds it now
    [due] = w.due(5.0)
    assert due.key == "b"
    w.fired(due, 11)
    assert w.committable() == 14


def test_a_window_fires_early_rather_than_pass_its_byte_budget() -> None:
    w = windows(most_bytes=100)
    assert w.add(0, "a", {"n": 0}, now=0.0, size=60) == []
    [early] = w.add(1, "a", {"n": 1}, now=0.0, size=60)
    assert early.offsets == (0,)
    assert w.windows["a"].offsets == [1]


def test_records_a_mark_covers_are_skipped_and_a_stale_fire_keeps_only_the_rest() -> None:
    w = PartitionWindows(0, lambda key: POLICY)
    w.know(["a"], {"a": 11})
    assert w.add(10, "a", {"n": 0}, now=0.0) == []
    assert w.add(11, "a", {"n": 1}, now=0.0) == []
    assert w.committable() == 12  # both were in a run already
    w.add(12, "a", {"n": 2}, now=0.0)
    w.add(13, "a", {"n": 3}, now=0.0)
    [batch] = w.add(14, "a", {"n": 4}, now=0.0)
    rest = w.fired(batch, 12)  # another owner fired up to 12 meanwhile
    assert rest is not None
    assert rest.offsets == (13, 14)
    assert w.committable() == 13


@given(st.lists(st.tuples(st.sampled_from("abc"), st.floats(0, 3)), max_size=40))
def test_every_record_is_in_exactly_one_batch_once_all_is_due(
    records: list[tuple[str, float]],
) -> None:
    w = PartitionWindows(0, lambda key: POLICY)
    w.know(list("abc"), {})
    batches = []
    now = 0.0
    for offset, (key, gap) in enumerate(records):
        now += gap
        batches.extend(w.add(offset, key, {"o": offset}, now))
        batches.extend(w.due(now))
    batches.extend(w.due(now + 10))
    for batch in batches:
        assert w.fired(batch, batch.last) is None
    assert sorted(o for b in batches for o in b.offsets) == list(range(len(records)))
    for batch in batches:
        assert len(batch.offsets) <= 3
        assert all(records[o][0] == batch.key for o in batch.offsets)
    assert w.committable() == (len(records) if records else None)
