"""Rebuilding the Valkey tier of a Valkey + Kafka :class:`CompositeStore` from the journal topic,
after Valkey lost it (``lockgate store rebuild``).

The topic is read whole, every partition from its low to its high watermark (:func:`_read_topic`,
the one place that reads Kafka). Records are grouped by run (the ``lg-workflow`` and
``lg-run-id`` headers) and folded by ``run_seq``, the first copy staying, as every journal read
folds them. Each run's journal is then folded with :func:`reconstruct_state`, as a replaying
attempt folds it, and told to the lifecycle store as a :class:`JournaledRun`, which
``ValkeyLifecycleStore.restore_run`` writes in one script, or leaves alone when the run exists.

One bad record never stops a rebuild: a record with a run's headers that does not decode (or,
with a journal key, fails its MAC) is skipped and named in the report, and a run is restored
only when its journal starts with its ``run:init`` at ``run_seq`` 1 and misses no ``run_seq``
after it (else it is named as not restored); everything else is restored.

Memory: a finished run is summarised as soon as its terminal is read (a terminal's first copy
lands after the first copy of every earlier ``run_seq``: each copy is a run's suffix, produced in
order), and its events are let go; only live runs' journals are held until the end, since each
becomes that run's outbox again.
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from lockgate._errors import (
    ConfigurationError,
    LockgateError,
)
from lockgate.journal._events import (
    EPOCH_HEADER,
    EventKind,
    RunEvent,
    RunStatus,
    terminal_status,
)
from lockgate.journal._replay import ReplayState, reconstruct_state
from lockgate.stores._chains import chain_link
from lockgate.stores._poison import crashes_in
from lockgate.stores._records import PROGRESS_KINDS, WAIT_STATUS, Submit
from lockgate.stores._types import WaitSpec, interrupt_signal
from lockgate.stores.composite._store import CompositeStore
from lockgate.stores.kafka._codec import (
    RUN_ID_HEADER,
    RUN_SEQ_HEADER,
    SCHEMA_HEADER,
    WORKFLOW_HEADER,
    NotARunEvent,
    decode,
    header_map,
    mac_problem,
    undecodable_header,
)
from lockgate.stores.kafka._store import KafkaEventLogStore
from lockgate.stores.valkey._lifecycle import (
    IDEMPOTENCY_HASH_HEADER,
    IDEMPOTENCY_KEY_HEADER,
    IDEMPOTENCY_UNTIL_HEADER,
)
from lockgate.stores.valkey._lifecycle_store import ValkeyLifecycleStore
from lockgate.stores.valkey._restore import JournaledRun

with contextlib.suppress(ImportError):  # without the extra, KafkaEventLogStore says so
    pass

Run = tuple[str, str]
#: ``progress(records read, records in the topic)``, called as the topic is read.
Progress = Callable[[int, int], None]

#: What Valkey kept that no journal holds, so a rebuild cannot bring back.
NOT_JOURNALED = (
    "Collect/Debounce buffers kept in the store (events on a trigger topic are read again from it)",
    "Rate token buckets (they start full)",
    "signals sent but not yet received by their run, and signals' send keys",
    "updates not yet received by their run, and update outcomes",
    "cancels and pauses held for run ids not submitted yet",
    "recorded workflow policies and versions (each worker records them again as it starts)",
)


class _Record(NamedTuple):
    """One journal record as the topic holds it."""

    partition: int
    offset: int
    timestamp: float | None  # the record's time (epoch seconds), when Kafka gives one
    workflow: str
    run_id: str
    event: RunEvent


class _Skipped(NamedTuple):
    """A record carrying a run's headers that the rebuild does not believe, and why."""

    partition: int
    offset: int
    reason: str


def _read_topic(
    log: KafkaEventLogStore, progress: Progress | None = None
) -> Iterator[_Record | _Skipped]:
    """Every lockgate record of the journal topic, each partition from its low watermark to
    the high watermark it had when the read began, in offset order
    (:meth:`KafkaEventLogStore.read_whole_topic`); a record that carries a run's headers but
    does not decode (or, with a journal key, whose MAC does not verify) comes as a
    :class:`_Skipped` naming where it is and why."""
    for partition, msg in log.read_whole_topic(progress):
        record = _record(log, partition, msg)
        if record is not None:
            yield record


def _record(log: KafkaEventLogStore, partition: int, msg: Any) -> _Record | _Skipped | None:
    headers = header_map(msg.headers())
    workflow, run_id = headers.get(WORKFLOW_HEADER), headers.get(RUN_ID_HEADER)
    value = msg.value()
    if workflow is None or run_id is None:
        return None  # not a lockgate record: nothing of a run
    offset = msg.offset() or 0
    bad = undecodable_header(msg.headers())
    if bad is not None:
        return _Skipped(partition, offset, f"its {bad} header is not UTF-8")
    if log.journal_secret is not None:
        problem = mac_problem(log.journal_secret, msg)
        if problem is not None:
            return _Skipped(partition, offset, problem)
    if value is None:
        return _Skipped(partition, offset, "it has no value")
    try:
        event = decode(value, headers.get(SCHEMA_HEADER))
    except NotARunEvent as exc:
        return _Skipped(partition, offset, f"its value: {exc}")
    if event.run_id != run_id or str(event.run_seq) != headers.get(RUN_SEQ_HEADER):
        return _Skipped(
            partition,
            offset,
            f"its headers name run {run_id!r} #{headers.get(RUN_SEQ_HEADER)} but its value "
            f"run {event.run_id!r} #{event.run_seq}",
        )
    kind, stamp = msg.timestamp()
    return _Record(
        partition, msg.offset() or 0, stamp / 1000 if kind else None, *(workflow, run_id), event
    )


class _Unrestorable(Exception):
    """Why a run's journal cannot be restored."""


@dataclass
class _Live:
    """A run's records read so far: by ``run_seq``, the first copy of each."""

    partition: int
    first: int
    events: dict[int, RunEvent] = field(default_factory=dict)
    max_epoch: int = 0


class _Collector:
    """Runs grouped from the records, a finished one summarised as soon as its terminal is in."""

    def __init__(self) -> None:
        self.live: dict[Run, _Live] = {}
        self.done: dict[Run, JournaledRun] = {}
        self.failed: dict[Run, str] = {}
        self.records = 0

    def take(self, record: _Record) -> None:
        self.records += 1
        run = (record.workflow, record.run_id)
        seq = record.event.run_seq
        if run in self.done or run in self.failed or seq is None:
            return
        entry = self.live.get(run)
        if entry is None:
            entry = self.live[run] = _Live(record.partition, record.offset)
        entry.first = min(entry.first, record.offset)
        entry.max_epoch = max(entry.max_epoch, _epoch(record.event))
        if seq in entry.events:
            return  # a copy: the first stays
        entry.events[seq] = record.event
        if record.event.is_terminal:
            self._finish(run, entry, record.timestamp)

    def _finish(self, run: Run, entry: _Live, ended_at: float | None) -> None:
        try:
            summary = summarise(run, entry, ended_at or time.time())
        except _Unrestorable as exc:
            self.failed[run] = str(exc)
            del self.live[run]
            return
        if summary.status.is_terminal:  # else its terminal was stale: the run lives on
            self.done[run] = summary
            del self.live[run]

    def runs(self) -> list[JournaledRun]:
        """Every run read, in submit order; those that cannot be restored go to ``failed``."""
        found = list(self.done.values())
        for run, entry in self.live.items():
            try:
                found.append(summarise(run, entry, None))
            except _Unrestorable as exc:
                self.failed[run] = str(exc)
        self.live.clear()
        found.sort(key=lambda r: (r.submitted_at, r.journal_at))
        return found


def _epoch(event: RunEvent) -> int:
    raw = event.headers.get(EPOCH_HEADER)
    return int(raw) if raw is not None and raw.isdigit() else 0


def summarise(run: Run, entry: _Live, ended_at: float | None) -> JournaledRun:
    """What the run's journal says it is, as the lifecycle store keeps a run."""
    name, run_id = run
    events = [entry.events[seq] for seq in sorted(entry.events)]
    # Only a journal lockgate began is restored: one that starts with the run's run:init at
    # run_seq 1 and misses no run_seq after it. Anything else is a part of a journal (its
    # start past retention, a record skipped) or records someone else wrote.
    init = events[0]
    if init.kind != EventKind.RUN_INIT or init.run_seq != 1:
        raise _Unrestorable(
            f"its journal does not start with a run:init at run_seq 1 (it starts with "
            f"{init.kind} at run_seq {init.run_seq}: past the topic's retention, or not "
            "written by lockgate)"
        )
    missing = next((n for n, e in enumerate(events, 1) if e.run_seq != n), None)
    if missing is not None:
        raise _Unrestorable(f"its journal misses run_seq {missing}")
    try:
        state = reconstruct_state(events)
    except LockgateError as exc:
        raise _Unrestorable(f"its journal cannot be folded here: {exc}") from None
    found = JournaledRun(
        name=name,
        run_id=run_id,
        shard=entry.partition,
        submit=_submit_of(name, init),
        submitted_at=float(init.payload.get("submitted_at") or 0.0),
        status=RunStatus.PENDING,
        last_seq=max(entry.events),
        epoch=max(entry.max_epoch, state.highest_epoch),
        journal_at=(entry.partition, entry.first),
        idempotency=_idempotency(init),
    )
    _latch(found, events)
    if state.terminal is not None:
        found.status = terminal_status(state.terminal)
        if found.status == RunStatus.TERMINATED and found.cancel is None:
            # w_terminate latches a cancel at the time it ends the run, journaling none.
            detail = state.terminal.payload.get("detail") or {}
            found.cancel = (str(detail.get("terminated_at")), {})
        found.ended_at = ended_at if ended_at is not None else time.time()
        if state.terminal.kind == EventKind.RUN_CONTINUED:
            found.continued_to = str(state.terminal.payload.get("run_id"))
        return found
    found.wait = _open_wait(state, events)
    if found.wait is not None and found.cancel is None:
        found.status = WAIT_STATUS[found.wait.kind]
    found.outbox = events
    return found


def _submit_of(name: str, init: RunEvent) -> Submit:
    """The submit a ``run:init`` records."""
    p = init.payload
    gates = p.get("gates") or {}
    limit, rate = gates.get("concurrency") or {}, gates.get("rate") or {}
    return Submit(
        name=name,
        params=dict(p.get("params") or {}),
        metadata=dict(p.get("metadata") or {}),
        owner=p.get("owner"),
        version=str(p.get("version", "")),
        version_behavior=str(p.get("version_behavior", "pinned")),
        concurrency_key=limit.get("key"),
        concurrency_max=limit.get("max"),
        rate_key=rate.get("key"),
        rate_per_second=rate.get("per_second"),
        rate_burst=rate.get("burst"),
        provenance=p.get("provenance"),
        start_at=p.get("start_at"),
        gates_unknown=bool(gates.get("unknown")),
        shard_key=p.get("shard_key"),
    )


def _idempotency(init: RunEvent) -> tuple[str, str, float] | None:
    key = init.headers.get(IDEMPOTENCY_KEY_HEADER)
    until = init.headers.get(IDEMPOTENCY_UNTIL_HEADER)
    if not key or not until:
        return None
    return key, init.headers.get(IDEMPOTENCY_HASH_HEADER, ""), float(until)


def _latch(run: JournaledRun, events: Sequence[RunEvent]) -> None:
    """The controls latched on a live run, and its requeue counters since its last progress,
    as the store's scripts set them when they journaled each event."""
    for event in events:
        payload = event.payload
        if event.kind == EventKind.RUN_CANCEL and run.cancel is None:
            run.cancel = (str(payload.get("requested_at")), payload.get("detail") or {})
        elif event.kind == EventKind.RUN_PAUSE_REQUESTED:
            run.pause_at = str(payload.get("requested_at"))
        elif event.kind == EventKind.RUN_UNPAUSED:
            run.pause_at = None
        elif event.kind in PROGRESS_KINDS:
            run.owner_gone = run.store_requeues = 0
        elif event.kind == EventKind.RUN_REQUEUED:
            run.crashes.extend(crashes_in([event]))
            count = int(payload.get("count") or 0)
            if payload.get("reason") == "store_unavailable":
                run.store_requeues = count
            else:
                run.owner_gone = count


def _open_wait(state: ReplayState, events: Sequence[RunEvent]) -> WaitSpec | None:
    """The wait the run was parked on when its journal ends: of the waits the fold leaves open
    (a delayed start, sleep, signal wait or interrupt with no outcome, a pause not lifted), the
    one opened last."""
    opened: dict[str, tuple[int, int]] = {}  # wait id -> (run_seq, call index) of its opening
    for event in events:
        if (
            event.kind
            in (
                EventKind.RUN_SLEEPING,
                EventKind.RUN_SIGNAL_WAITING,
                EventKind.RUN_INTERRUPTED,
                EventKind.RUN_PAUSED,
            )
            and "wait_id" in event.payload
        ):
            index = int(event.payload.get("call_index", -1))
            opened[str(event.payload["wait_id"])] = (event.run_seq or 0, index)
    candidates: list[tuple[int, WaitSpec]] = []
    for record in state.calls.values():
        if record.wait_id is None or record.outcome is not None or record.wait_id not in opened:
            continue
        kind = "start" if record.wait_id == "start" else str(record.kind)
        signal = record.name if kind == "signal" else None
        if kind == "interrupt":
            signal = interrupt_signal(record.wait_id)
        spec = WaitSpec(kind, record.wait_id, record.call_index, record.due_at, signal)  # type: ignore[arg-type]
        candidates.append((opened[record.wait_id][0], spec))
    if state.paused_wait is not None and state.paused_wait in opened:
        seq, index = opened[state.paused_wait]
        candidates.append((seq, WaitSpec("pause", state.paused_wait, index)))
    return max(candidates, key=lambda c: c[0])[1] if candidates else None


@dataclass
class RebuildReport:
    """What a rebuild found in the topic and restored.

    ``restored`` counts the runs restored by (workflow, status). ``present`` counts runs left
    alone because the lifecycle store holds them already (a repeat, or a run made meanwhile).
    ``not_restored`` names the runs whose journals cannot be restored, and why (``refused``
    counts those whose journal is not one lockgate began, whole); ``skipped`` names each record
    not believed, as ``(partition, offset, reason)``; ``not_journaled`` what Valkey kept that
    no journal holds."""

    topic: str
    records: int = 0
    runs_seen: int = 0
    restored: Counter[tuple[str, str]] = field(default_factory=Counter)
    present: int = 0
    positions_kept: int = 0
    idempotency_keys: int = 0
    fired_marks: int = 0
    not_restored: list[tuple[str, str, str]] = field(default_factory=list)
    refused: int = 0
    skipped: list[tuple[int, int, str]] = field(default_factory=list)
    not_journaled: tuple[str, ...] = NOT_JOURNALED

    def by_status(self) -> Counter[str]:
        """Runs restored, by status."""
        counted: Counter[str] = Counter()
        for (_, status), n in self.restored.items():
            counted[status] += n
        return counted

    @property
    def restored_total(self) -> int:
        return sum(self.restored.values())

    def lines(self) -> list[str]:
        """The report as lines of text, as ``lockgate store rebuild`` prints it."""
        statuses = self.by_status()
        finished = sum(n for s, n in statuses.items() if RunStatus(s).is_terminal)
        lines = [f"read {self.records} records of {self.topic}: {self.runs_seen} runs"]
        if not self.restored_total:
            lines.append("restored nothing: every run in the journal is in the store already")
        else:
            # Interrupted runs are named only when there are some, so the line of a journal
            # with none reads as it always has.
            interrupted = statuses[RunStatus.INTERRUPTED]
            lines.append(
                f"restored {self.restored_total} runs: {statuses[RunStatus.PENDING]} queued, "
                f"{statuses[RunStatus.SLEEPING]} sleeping, {statuses[RunStatus.SIGNAL_WAITING]}"
                f" waiting for a signal, {statuses[RunStatus.PAUSED]} paused, "
                + (f"{interrupted} waiting on an interrupt, " if interrupted else "")
                + f"{finished} finished"
            )
            for workflow in sorted({w for w, _ in self.restored}):
                counts = sorted((s, n) for (w, s), n in self.restored.items() if w == workflow)
                lines.append(f"  {workflow}: " + ", ".join(f"{s} {n}" for s, n in counts))
        lines.append(f"already in the store, left as they are: {self.present} runs")
        lines.append(f"journal positions kept: {self.positions_kept}")
        lines.append(f"idempotency keys kept: {self.idempotency_keys}")
        lines.append(f"trigger fired-through marks raised: {self.fired_marks}")
        for workflow, run_id, why in self.not_restored:
            lines.append(f"not restored: run {run_id} of {workflow}: {why}")
        for partition, offset, why in self.skipped:
            lines.append(f"skipped record {partition}/{offset} of {self.topic}: {why}")
        lines.append("not in the journal, so not restored: " + "; ".join(self.not_journaled))
        return lines


def _tiers(store: object) -> tuple[ValkeyLifecycleStore, KafkaEventLogStore]:
    if isinstance(store, CompositeStore):
        lifecycle, log = store.lifecycle, store.events
        if isinstance(lifecycle, ValkeyLifecycleStore) and isinstance(log, KafkaEventLogStore):
            return lifecycle, log
    raise ConfigurationError(
        "a rebuild restores the Valkey tier of CompositeStore(lifecycle=ValkeyLifecycleStore, "
        f"events=KafkaEventLogStore) from its journal topic; {store!r} is not one"
    )


def _handed_on(run: JournaledRun, done: dict[Run, JournaledRun], live: set[Run]) -> str | None:
    """Why a live successor of a hand-on is not restored, or None. It is not when the run it
    takes over from is in the topic and was not handed on to it: that run's hand-on did not
    finish (it hands on again when it runs) or it ended another way."""
    source = (run.submit.provenance or {}).get("source")
    origin = source.get("gated_from") if isinstance(source, dict) else None
    if origin is None or run.status.is_terminal:
        return None
    before = (run.name, str(origin))
    if before in live:
        return f"its hand-on from run {origin} did not finish; that run hands on again"
    if before in done and done[before].continued_to != run.run_id:
        return f"run {origin}, which it was to take over from, ended another way"
    return None


def rebuild_lifecycle(store: CompositeStore, *, progress: Progress | None = None) -> RebuildReport:
    """Restore the Valkey tier of ``store`` (Valkey coordinating, Kafka journaling) from the
    journal topic, after Valkey lost it: each run the topic holds and the lifecycle store does
    not is written back, a live one in its queue or its wait with its whole journal as its
    outbox, a finished one as its status record. Runs the store holds are left alone, so a
    second rebuild restores nothing. Stop the workers first: a run restored while a worker
    serves the namespace is safe (the worker's lease went with Valkey), but the worker's own
    attempts fail until it claims again. ``progress`` is told how far the read has got."""
    lifecycle, log = _tiers(store)
    collector = _Collector()
    skipped: list[tuple[int, int, str]] = []
    for record in _read_topic(log, progress):
        if isinstance(record, _Skipped):
            skipped.append(tuple(record))  # type: ignore[arg-type]
            collector.records += 1
        else:
            collector.take(record)
    runs = collector.runs()
    report = RebuildReport(topic=log.topic, records=collector.records, skipped=skipped)
    report.runs_seen = len(runs) + len(collector.failed)
    report.not_restored.extend((n, r, why) for (n, r), why in sorted(collector.failed.items()))
    report.refused = len(collector.failed)
    live = {(r.name, r.run_id) for r in runs if not r.status.is_terminal}
    done = {(r.name, r.run_id): r for r in runs if r.status.is_terminal}
    for run in runs:
        why = _handed_on(run, done, live)
        if why is not None:
            report.not_restored.append((run.name, run.run_id, why))
            continue
        if lifecycle.restore_run(run):
            report.restored[(run.name, run.status.value)] += 1
            report.positions_kept += 1
        else:
            report.present += 1
        if run.idempotency is not None:
            key, body_hash, until = run.idempotency
            if lifecycle.restore_idempotency(run.name, key, run.run_id, body_hash, until):
                report.idempotency_keys += 1
        fired = (run.submit.provenance or {}).get("trigger") or {}
        if fired.get("source"):
            # Fired by a trigger topic's consumer: its records are in this run, and the mark
            # saying so went with Valkey; without it they would fire again when read again.
            source, key, last = str(fired["source"]), str(fired["key"]), int(fired["last"])
            if lifecycle.restore_fired_mark(run.name, source, key, last, run.shard):
                report.fired_marks += 1
        _restore_chain_tail(lifecycle, run)
    lifecycle.ensure_marker()  # last: workers waiting on the lost store go on once all is back
    return report


def _restore_chain_tail(lifecycle: ValkeyLifecycleStore, run: JournaledRun) -> None:
    """Move the tail record of the chain ``run`` is a hop of (if it is one) forward to it, and
    mark it final when it ended another way than continuing: the record went with Valkey, and
    without it a chain's first id resolves one read per hop. The record only moves forward,
    so restoring the hops in any order leaves it at the newest."""
    link = chain_link(run.submit.init_payload(0.0), run.name, run.run_id)
    if link.hop == 0:
        return
    if run.status.is_terminal and run.status != RunStatus.CONTINUED:
        lifecycle.close_chain(link)
    else:
        lifecycle.advance_chain_tail(link)
