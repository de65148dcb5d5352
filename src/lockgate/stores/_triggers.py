"""Collect and Debounce as every store keeps them: a buffer of trigger events per key, when it
is due, and the run a fire submits. Buffering an event, and taking a batch together with
submitting its run, are each one atomic store operation, so an event is in exactly one run."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from lockgate._errors import CapabilityMissing
from lockgate._names import check_name
from lockgate.journal._events import RunEvent
from lockgate.stores._gates import Gates
from lockgate.stores._records import Submit


@dataclass(frozen=True)
class FiredBatch:
    """What :meth:`~lockgate.stores.Store.fire_batch` did: the batch's run id (None when the
    mark showed another fire already took some of its events) and the key's fired-through
    mark in the source after it."""

    run_id: str | None
    fired_through: int
    #: When this fire made the run and its opening events are all it holds: those events as
    #: the lifecycle's outbox now keeps them (``run:init``), for a composite to copy without
    #: reading them back; else empty (a repeated fire, a stale one, a run that latched a
    #: cancel or pause held for its id beside them, or a backend that does not say).
    opened: tuple[RunEvent, ...] = ()


@dataclass(frozen=True)
class BatchToFire:
    """One batch of :meth:`~lockgate.stores.Store.fire_batches`: what
    :meth:`~lockgate.stores.Store.fire_batch` takes for it besides the workflow name."""

    key: str
    events: Sequence[dict[str, Any]]
    policy: TriggerPolicy
    source: str
    first: int
    last: int


def settled_fire(
    run_id: str, exists: bool, mark: int, first: int, last: int
) -> tuple[FiredBatch, bool]:
    """What ``Store.fire_batch`` answers for the batch ``first``..``last`` whose run is
    ``run_id``, given whether that run ``exists`` and the key's ``mark`` (-1 for none), and
    whether the run is to be submitted now; the answer's mark is the key's mark after. A
    repeated fire is the same run; a stale one is no run. The rule ``t_fire_batch.lua`` keeps
    on Valkey, for the backends that keep it in Python."""
    if exists:
        return FiredBatch(run_id, max(mark, last)), False
    if mark >= first:
        return FiredBatch(None, mark), False
    return FiredBatch(run_id, last), True


@dataclass(frozen=True)
class TriggerPolicy:
    """How one workflow turns trigger events into runs, and what its runs are stamped with."""

    mode: Literal["collect", "debounce"]
    window_seconds: float
    max_events: int | None = None
    max_wait_seconds: float | None = None
    version: str = ""
    version_behavior: str = "auto_upgrade"
    gates: Gates = field(default_factory=Gates)

    def due_at(self, first_at: float, now: float, current: float | None) -> float:
        """When the buffer fires after an event at ``now``: a Collect window counts from its
        first event; a Debounce quiet period restarts with every event, but no later than
        ``max_wait_seconds`` after its first."""
        if self.mode == "collect":
            return current if current is not None else first_at + self.window_seconds
        due = now + self.window_seconds
        if self.max_wait_seconds is not None:
            due = min(due, first_at + self.max_wait_seconds)
        return due

    def full(self, count: int) -> bool:
        return self.mode == "collect" and self.max_events is not None and count >= self.max_events

    def submit(
        self,
        name: str,
        key: str,
        events: list[dict[str, Any]],
        first: int,
        last: int,
        source: str = "",
    ) -> tuple[str, Submit]:
        """The run a fire of ``events`` (sequence numbers, or offsets in ``source``,
        ``first``..``last``) submits, and its id: derived from the key and the events it
        covers, so it names one batch only."""
        covered = f"{name}\x1f{key}\x1f{first}\x1f{last}"
        if source:
            covered = f"{covered}\x1f{source}"
        import hashlib  # here: it loads OpenSSL, a tenth of what `lockgate runs list` took

        digest = hashlib.sha256(covered.encode()).hexdigest()
        run_id = f"trg-{digest[:32]}"
        trigger: dict[str, Any] = {"key": key, "mode": self.mode, "first": first, "last": last}
        if source:
            trigger["source"] = source
        gates = self.gates
        submit = Submit(
            name=name,
            params={"key": key, "events": events, "count": len(events)},
            metadata=None,
            owner=None,
            version=self.version,
            version_behavior=self.version_behavior,
            concurrency_key=gates.concurrency_key,
            concurrency_max=gates.concurrency_max,
            rate_key=gates.rate_key,
            rate_per_second=gates.rate_per_second,
            rate_burst=gates.rate_burst,
            provenance={"trigger": trigger},
            start_at=None,
        )
        return run_id, submit


def batch_submit(
    name: str,
    key: str,
    events: list[dict[str, Any]],
    policy: TriggerPolicy,
    *,
    source: str,
    first: int,
    last: int,
) -> tuple[str, Submit]:
    """What every backend's :meth:`TriggerStore.fire_batch` starts with: the workflow name
    checked, then the batch's run id and submit (:meth:`TriggerPolicy.submit`)."""
    check_name("workflow name", name)
    return policy.submit(name, key, events, first, last, source)


class TriggerStore:
    """Collect and Debounce buffers: trigger events kept per key until their batch fires."""

    def trigger_event(
        self, name: str, key: str, event: dict[str, Any], *, policy: TriggerPolicy
    ) -> str | None:
        """Buffer ``event`` under ``key`` and set when the buffer is due, atomically. When the
        event completes a Collect batch, take the batch and submit its run in the same step and
        return the run's id; else None."""
        raise CapabilityMissing.of(self, "triggers")

    def due_triggers(self, name: str, before: float, limit: int = 100) -> list[str]:
        """Keys of ``name`` whose buffer is due at or before ``before``, the earliest first."""
        raise CapabilityMissing.of(self, "triggers")

    def fire_trigger(
        self, name: str, key: str, *, policy: TriggerPolicy, due_by: float
    ) -> str | None:
        """If ``key``'s buffer is due by ``due_by``, take every event in it and submit their
        run, in one step, and return its id; else None. Two callers racing fire it once."""
        raise CapabilityMissing.of(self, "triggers")

    def next_trigger_due(self, name: str, after: float) -> float | None:
        """The earliest time later than ``after`` at which a buffer of ``name`` is due, or
        None when no buffer of it waits: as :meth:`TimerStore.next_wait_due` for triggers."""
        raise CapabilityMissing.of(self, "trigger_due")

    def fire_batch(
        self,
        name: str,
        key: str,
        events: list[dict[str, Any]],
        *,
        policy: TriggerPolicy,
        source: str,
        first: int,
        last: int,
    ) -> FiredBatch:
        """Submit the run of a batch buffered outside the store: ``events`` of ``key``, read
        from ``source`` (a topic partition) at positions ``first``..``last``. The run's id
        names the key, the source and the positions, and the submit moves ``key``'s
        fired-through mark in ``source`` to ``last``, in one step:

        - the batch's run exists already (a repeated fire): its id, nothing new;
        - the mark is at ``first`` or past it (another consumer fired some of these events):
          no run, and the mark, for the caller to drop what it covers and fire the rest;
        - else the run is submitted and its id returned with the new mark."""
        raise CapabilityMissing.of(self, "trigger_marks")

    def fire_batches(self, name: str, batches: Sequence[BatchToFire]) -> list[FiredBatch]:
        """:meth:`fire_batch` of each of ``batches`` in their order (a key's later batch sees
        the mark its earlier one left), answered in that order. Each batch is one step of its
        own, as :meth:`fire_batch` makes it; a backend may make those of one shard together,
        in one request (Valkey: one script), which is what the method is for.

        On an error (:class:`StoreUnavailable` included), any of the other batches may have
        fired: the caller fires each again with :meth:`fire_batch`, where a repeat is the
        same run, to learn which one fails or which part of the store is away."""
        return [
            self.fire_batch(
                name,
                batch.key,
                list(batch.events),
                policy=batch.policy,
                source=batch.source,
                first=batch.first,
                last=batch.last,
            )
            for batch in batches
        ]

    def fired_through(
        self, name: str, source: str, keys: Mapping[str, TriggerPolicy]
    ) -> dict[str, int]:
        """The fired-through marks in ``source`` of those of ``keys`` that have one (each key
        with the policy its fires are submitted with, which places the mark)."""
        raise CapabilityMissing.of(self, "trigger_marks")

    def forget_marks(self, name: str, source: str, below: int) -> int:
        """Drop the marks in ``source`` that are below ``below`` (the source's oldest position
        still kept: the records they cover can never be read again); how many went."""
        raise CapabilityMissing.of(self, "trigger_marks")
