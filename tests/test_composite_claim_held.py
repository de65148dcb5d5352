"""A run the composite copied itself (a bound run its topic's consumer submitted in the
worker's own process) is claimed with its journal answered from the log's memory: the claim's
outbox is not read back. Where another process wrote on since, the claim still gets the whole
journal, read and copied as any run is."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from composite_pair import Make, composites_made, counted_requests, lifecycle_of
from lockgate import EventKind, RunEvent

NAME = "cheld_flow"


@pytest.fixture
def composites(kafka_bootstrap: str) -> Iterator[Make]:
    yield from composites_made(kafka_bootstrap, shard_count=4)


def test_a_run_submitted_here_is_claimed_without_reading_its_outbox_back(
    composites: Make,
) -> None:
    store = composites()
    store.submit_run(NAME, "r-1", {"n": 1})
    asked = counted_requests(lifecycle_of(store))
    [claimed] = list(store.claim_next_runs_loaded(NAME, ["lease-1"]))
    assert claimed.run_id == "r-1"
    assert "read_page" not in asked  # the claim's own outbox was enough
    outbox = lifecycle_of(store).events_after(NAME, "r-1", 0)
    assert claimed.events == outbox
    assert [e.kind for e in outbox] == [EventKind.RUN_INIT]
    # The log holds it as the claim answered it: a process that knows nothing reads the same.
    assert composites().load_run(NAME, "r-1") == outbox


def test_a_run_written_on_elsewhere_since_is_claimed_with_its_whole_journal(
    composites: Make,
) -> None:
    """The submitter copied run:init only; another process claimed the run, journaled a step
    and released it. The submitter's claim must not answer its memory's shorter journal."""
    submitter, other = composites(), composites()
    submitter.submit_run(NAME, "r-2", {"n": 2})
    [taken] = list(other.claim_next_runs_loaded(NAME, ["lease-a"]))
    assert taken.run_id == "r-2"
    pending = RunEvent(EventKind.STEP_PENDING, {"call_index": 0, "step_id": "s"}, "r-2")
    other.append_events(NAME, "r-2", [pending], fence="lease-a")
    other.release_run(NAME, "r-2", "lease-a")
    [claimed] = list(submitter.claim_next_runs_loaded(NAME, ["lease-b"]))
    assert claimed.run_id == "r-2"
    outbox = lifecycle_of(submitter).events_after(NAME, "r-2", 0)
    assert [e.kind for e in outbox][:2] == [EventKind.RUN_INIT, EventKind.STEP_PENDING]
    assert claimed.events == outbox
    assert composites().load_run(NAME, "r-2") == outbox
