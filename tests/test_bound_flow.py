"""One bound-topic partition's bookkeeping (``streams/bound/_flow.py``), no broker: what may be
submitted, and the offset the partition may be committed at, never past a record whose run is
not durably submitted (not finished, when ordered). A hypothesis state machine drives it with
reads, submits that land or fail, and runs that finish or park, in any order."""

from __future__ import annotations

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from lockgate.streams.bound._flow import AskPace, PartitionFlow, Pending


def pending(offset: int) -> Pending:
    return Pending(offset, f"t:0:{offset}", {"n": offset}, {})


def test_open_runs_are_asked_about_after_the_floor_or_twice_what_own_runs_take() -> None:
    pace = AskPace(0.25, 2.0)
    assert pace.after == 0.25  # nothing learned yet: the floor
    for _ in range(100):
        pace.took(0.05)  # own runs end quickly: still the floor
    assert pace.after == 0.25
    for _ in range(100):
        pace.took(1.0)  # a busy worker: its runs wait a second in its queue
    assert 1.9 < pace.after <= 2.0
    for _ in range(100):
        pace.took(0.1)  # the queue drains: back towards the floor
    assert pace.after < 0.3
    pace.took(-1.0)  # a clock that went back counts as no time
    assert pace.mean >= 0.0
    for _ in range(200):
        pace.took(60.0)  # long runs: a run another worker ran is still noticed within 2 s
    assert 1.99 < pace.after <= 2.0


def test_one_run_that_waited_long_does_not_hold_the_pace_for_the_quick_runs_after_it() -> None:
    pace = AskPace(0.25, 2.0)
    for _ in range(100):
        pace.took(0.05)
    pace.took(60.0)  # a run that slept a minute: counts as no more than ceiling / slack
    assert pace.mean <= 0.05 + 0.1 * 1.0 + 1e-9
    assert pace.after < 0.5
    for _ in range(10):
        pace.took(0.05)
    assert pace.after == 0.25


def test_unordered_records_are_submitted_together_and_committed_behind_the_oldest_unsubmitted() -> (
    None
):
    flow = PartitionFlow(0, ordered=False)
    for offset in range(5):
        flow.read(offset)
        flow.waiting.append(pending(offset))
    assert flow.committable() == 0
    taken = flow.ready(3)
    assert [p.offset for p in taken] == [0, 1, 2]
    assert flow.in_flight == 3
    flow.submitted(taken[1])
    flow.submitted(taken[2])
    assert flow.committable() == 0  # record 0's submit is still in flight
    flow.submitted(taken[0])
    assert flow.committable() == 3  # the waiting record 3 is next
    flow.finished(0)
    assert flow.in_flight == 2
    rest = flow.ready(10)
    for item in rest:
        flow.submitted(item)
    assert flow.committable() == 5  # everything read is submitted: the next one to read


def test_ordered_partitions_submit_one_run_at_a_time_and_commit_behind_it() -> None:
    flow = PartitionFlow(0, ordered=True)
    for offset in range(3):
        flow.read(offset)
        flow.waiting.append(pending(offset))
    [first] = flow.ready(10)
    assert flow.ready(10) == []  # the first is being submitted
    flow.submitted(first)
    assert flow.ready(10) == []  # ... and then open
    assert flow.committable() == 0  # not past a run that has not finished
    flow.finished(0)
    assert flow.committable() == 1
    [second] = flow.ready(10)
    assert second.offset == 1


def test_submits_put_back_wait_again_in_order() -> None:
    flow = PartitionFlow(0, ordered=False)
    for offset in range(4):
        flow.read(offset)
        flow.waiting.append(pending(offset))
    taken = flow.ready(4)
    flow.put_back([taken[2], taken[0]])
    flow.submitted(taken[1])
    flow.dropped(taken[3])  # dead-lettered
    assert [p.offset for p in flow.waiting] == [0, 2]
    assert flow.committable() == 0


def test_a_parked_run_holds_no_slot_but_an_ordered_partition_still_waits_for_it() -> None:
    flow = PartitionFlow(0, ordered=True)
    flow.read(0)
    flow.waiting.append(pending(0))
    flow.read(1)
    flow.waiting.append(pending(1))
    [first] = flow.ready(1)
    flow.submitted(first)
    flow.parked_now(0, True)
    assert flow.in_flight == 0
    assert not flow.can_start()
    assert flow.committable() == 0
    flow.parked_now(0, False)  # woken: running again
    assert flow.in_flight == 1


class FlowMachine(RuleBasedStateMachine):
    """Any interleaving of reads, submits, failures and ends: the commit never passes a record
    whose run is not in the store (not ended, when ordered), and never goes back."""

    def __init__(self) -> None:
        super().__init__()
        self.ordered = False
        self.flow = PartitionFlow(0, ordered=False)
        self.read_up_to = 0
        self.in_store: set[int] = set()
        self.ended: set[int] = set()
        self.dead: set[int] = set()
        self.sending: list[Pending] = []
        self.last_commit = 0

    @rule(ordered=st.booleans())
    @precondition(lambda self: self.read_up_to == 0)
    def choose(self, ordered: bool) -> None:
        self.ordered = ordered
        self.flow = PartitionFlow(0, ordered=ordered)

    @rule(dead=st.booleans())
    def read(self, dead: bool) -> None:
        offset = self.read_up_to
        self.read_up_to += 1
        self.flow.read(offset)
        if dead:
            self.dead.add(offset)  # dead-lettered at once: never waiting
        else:
            self.flow.waiting.append(pending(offset))

    @rule(room=st.integers(1, 4))
    def take(self, room: int) -> None:
        self.sending.extend(self.flow.ready(room))

    @rule(data=st.data())
    @precondition(lambda self: self.sending)
    def land(self, data: st.DataObject) -> None:
        item = self.sending.pop(data.draw(st.integers(0, len(self.sending) - 1)))
        self.flow.submitted(item)
        self.in_store.add(item.offset)

    @rule(data=st.data())
    @precondition(lambda self: self.sending)
    def fail(self, data: st.DataObject) -> None:
        item = self.sending.pop(data.draw(st.integers(0, len(self.sending) - 1)))
        self.flow.put_back([item])

    @rule(data=st.data())
    @precondition(lambda self: self.in_store - self.ended)
    def end(self, data: st.DataObject) -> None:
        offset = data.draw(st.sampled_from(sorted(self.in_store - self.ended)))
        self.flow.finished(offset)
        self.ended.add(offset)

    @invariant()
    def commit_is_behind_every_unsubmitted_record(self) -> None:
        at = self.flow.committable()
        if at is None:
            return
        for offset in range(at):
            assert offset in self.dead or offset in self.in_store, offset
            if self.ordered and offset not in self.dead:
                assert offset in self.ended, offset
        assert at >= self.last_commit
        self.last_commit = at

    @invariant()
    def an_ordered_partition_has_one_run_unfinished(self) -> None:
        if self.ordered:
            assert len(self.in_store - self.ended) + len(self.sending) <= 1


TestFlowMachine = FlowMachine.TestCase
