"""A worker's member of a bound workflow's consumer group: each record it reads becomes one run
of the workflow, submitted through the store; records that start no run go to the dead-letter
topic; offsets are committed behind the runs.

Exactly one run per record, across crashes and rebalances, rests on two rules:

- a record's run id is its topic, partition and offset (:func:`bound_run_id`), so a record read
  again (its partition was not committed past it when its owner died) finds its run made
  already (``DuplicateRunError``) instead of making a second one;
- a partition is committed only up to its oldest record whose run is not yet durably
  submitted, or, when the binding is ``ordered``, not yet finished (and never past a
  dead-lettered record whose copy Kafka has not acknowledged).

The worker runs at most ``max_concurrency`` runs of the binding at once (its claim loop), and
the consumer keeps at most SUBMIT_AHEAD times that many of the runs it submitted unfinished, so
the worker's slots never wait for a submit. It learns that a run finished from the worker that
ran it when that is its own (:meth:`BoundConsumer.ended`), else by asking the store. An
``ordered`` partition has one run unfinished at a time. A bound run's shard is its partition's
(:func:`partition_shard_key`), so the worker owning a partition claims there first.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hashlib
import json
import logging
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, TypeVar

from lockgate._clock import Clock
from lockgate._errors import (
    ConfigurationError,
    DuplicateRunError,
    InvalidParamsError,
    InvalidTextError,
    PayloadTooLarge,
    StoreFileGone,
    StoreUnavailable,
    one_line,
)
from lockgate._names import MAX_NAME_LENGTH
from lockgate.journal._events import RunStatus
from lockgate.stores._base import Store
from lockgate.stores._calls import call_store
from lockgate.stores._records import Submit
from lockgate.stores.kafka import KafkaEventLogStore
from lockgate.stores.kafka._topic import prepare_topic
from lockgate.streams._dead_letters import place_of
from lockgate.streams._member import GroupMember
from lockgate.streams._values import Undecodable, decoder_for, record_of
from lockgate.streams.bound._flow import AskPace, PartitionFlow, Pending
from lockgate.workflow._record import RECORD_METADATA
from lockgate.workflow._spec import WorkflowSpec

with contextlib.suppress(ImportError):  # the extra may be missing: no journal is made then
    from confluent_kafka import Consumer, KafkaException, Message, TopicPartition
    from confluent_kafka.admin import AdminClient

log = logging.getLogger("lockgate.bound")
T = TypeVar("T")

#: Runs submitted and not finished, at most, as a multiple of ``max_concurrency``.
SUBMIT_AHEAD = 2
#: Records taken from the consumer at once, at most.
CONSUME_BATCH = 1000
#: Records of one partition read ahead of their submits, at most: reading the partition pauses
#: there and resumes below half of it.
READ_AHEAD = 2000
#: Seconds one wait for records lasts: short while runs are open (a finished run's news
#: arrives between two waits), longer when there is nothing in flight.
WAIT_OPEN = 0.005
WAIT_IDLE = 0.1
#: Seconds after which an open run no worker here reported is asked about in the store, at
#: least (longer while this worker's own runs take longer: see ``AskPace``) and at most, and
#: between two passes asking.
ASK_AFTER = 0.25
ASK_AFTER_MOST = 2.0
#: An open run to ask about at the next pass (its run was found made before).
ASK_NOW = float("-inf")
#: Seconds a submit that found the store unavailable waits before it is tried again.
RETRY_AFTER = 0.5
#: The statuses of a run that waits (a sleep, a signal, a pause, a question), holding no slot:
#: it does not count against ``max_concurrency`` while it waits.
PARKED = frozenset(
    {RunStatus.SLEEPING, RunStatus.SIGNAL_WAITING, RunStatus.PAUSED, RunStatus.INTERRUPTED}
)
#: Why a record went to the dead-letter topic besides its value not decoding: the store
#: refused its run (its value does not fit the workflow); reading it failed otherwise than
#: its value not decoding; its submit failed with an error that is no outage (a bug in a
#: validator of ``value``, say), which trying again would meet again.
UNSUBMITTABLE = "unsubmittable"
UNREADABLE = "unreadable"
SUBMIT_FAILED = "submit-failed"


def bound_run_id(topic: str, partition: int, offset: int) -> str:
    """The run id of the record at ``offset`` of ``topic``'s ``partition``:
    ``{topic}:{partition}:{offset}``; a topic name too long for a run id is cut, a hash of it
    kept in its place."""
    run_id = f"{topic}:{partition}:{offset}"
    if len(run_id) <= MAX_NAME_LENGTH:
        return run_id
    digest = hashlib.sha256(topic.encode()).hexdigest()[:16]
    return f"{topic[:180]}~{digest}:{partition}:{offset}"


def bound_group(topic_prefix: str, workflow: str) -> str:
    """The consumer group of a bound workflow: ``lockgate.{topic_prefix}.bound.{workflow}``,
    one per deployment (its journal's prefix) and workflow, so two workflows bound to one
    topic, or two deployments on one broker, each read every record."""
    return f"lockgate.{topic_prefix}.bound.{workflow}"


def partition_shard_key(topic: str, partition: int) -> str:
    """What the runs of one partition's records are sharded by: they share a shard."""
    return f"{topic}:{partition}"


async def _together(calls: list[Coroutine[Any, Any, T]]) -> list[T]:
    """``calls`` side by side, on the loop running this."""
    return list(await asyncio.gather(*calls))


class BoundConsumer(GroupMember):
    """Serves ``spec``'s bound topic for one worker (see the module docstring): call
    :meth:`serve` on a thread of its own; it returns once ``stop`` is set, after committing
    what it may and leaving the group.

    ``on_submitted()`` is called after each batch of submits (a claim loop may start the
    runs at once) and ``on_assigned(partitions)`` whenever the partitions it owns change, both
    on its thread. :meth:`ended` may be called from any thread."""

    dead_letter_says = "starts no run"

    def __init__(
        self,
        store: Store,
        journal: KafkaEventLogStore,
        spec: WorkflowSpec,
        *,
        worker_id: str,
        clock: Clock | None = None,
        on_submitted: Callable[[], None] = lambda: None,
        on_assigned: Callable[[list[int]], None] = lambda partitions: None,
        config: Mapping[str, Any] | None = None,
    ) -> None:
        binding = spec.topic
        if binding is None:
            raise ValueError(f"workflow {spec.name!r} is bound to no topic")
        super().__init__(
            store,
            journal,
            spec,
            topic=binding.name,
            dlq=binding.dlq,
            group=bound_group(journal.topic_prefix, spec.name),
            kind="bound topic",
            worker_id=worker_id,
            clock=clock,
            log=log,
            on_assigned=on_assigned,
            config=config,
        )
        self.binding = binding
        self._decode = decoder_for(binding.avro_schema)
        self._on_submitted = on_submitted
        self._flows: dict[int, PartitionFlow] = {}
        self._next_ask = 0.0
        #: When each open run was submitted (or last asked about), to ask the store about it
        #: later; when each run made here was submitted, to learn how long runs take.
        self._opened_at: dict[str, float] = {}
        self._submitted_at: dict[str, float] = {}
        self._asks = AskPace(ASK_AFTER, ASK_AFTER_MOST)
        #: Run id -> (partition, offset) of every open run.
        self._where: dict[str, tuple[int, int]] = {}
        #: Runs reported finished by this worker, from its attempts' thread (the event loop).
        self._ended: collections.deque[str] = collections.deque()
        #: The owned partitions whose reading is paused (see ``_pace``).
        self._paused: set[int] = set()
        #: Whether the last ask about open runs failed (its error is said once).
        self._ask_failed = False
        #: Runs submitted, and records read again whose run was there.
        self.submitted = 0
        self.found = 0

    # -- serving -------------------------------------------------------------------------------

    def open(self) -> None:
        """Check the topic (it must exist: it is the user's), make its dead-letter topic, and
        join the group."""
        self._prepare_topics()
        self._paused.clear()
        self._renew(**{"fetch.wait.max.ms": 10})
        self._subscribe()

    def step(self) -> None:
        """Take news of finished runs, read what came, submit what may be, commit when due."""
        consumer = self._consumer
        assert consumer is not None, "open() first"
        self._settle_ended()
        if self._where and self.clock() >= self._next_ask:
            self._ask_open()
        self._pace(consumer)
        # No wait while a submit may be made; else a short one while runs are open.
        messages = self._consume(consumer, CONSUME_BATCH, self._wait)
        if messages:
            self._take(messages)
        self._submit_ready()
        if self.clock() >= self._next_commit:
            self._commit(consumer)

    def ended(self, run_id: str) -> None:
        """This worker finished the run ``run_id`` (any thread)."""
        self._ended.append(run_id)

    def _wait(self) -> float | None:
        """Seconds to wait for records (None: none, a submit may be made)."""
        if self._submittable():
            return None
        return WAIT_OPEN if self._where else WAIT_IDLE

    @property
    def in_flight(self) -> int:
        return sum(flow.in_flight for flow in self._flows.values())

    def _prepare_topics(self) -> None:
        admin = AdminClient(dict(self.journal.client_config))
        try:
            listed = admin.list_topics(self.topic, timeout=self.journal.read_timeout).topics
        except KafkaException as exc:
            raise StoreUnavailable(f"Kafka did not list topic {self.topic!r}: {exc}") from exc
        found = listed.get(self.topic)
        if found is None or found.error is not None or not found.partitions:
            # Checked at the worker's start (it exits 2 then); here the topic went away while
            # the worker served, and the consumer waits for it to be made again.
            from lockgate.streams._topic_admin import admin_for_journal, create_command

            command = create_command(admin_for_journal(self.journal), self.topic)
            raise StoreUnavailable(
                f"bound topic {self.topic!r} of workflow {self.spec.name!r} does not exist: "
                f"create it with `{command}` (N is how many workers can share it)"
            )
        prepare_topic(
            admin,
            self.dlq,
            bootstrap=self.journal.bootstrap_servers,
            partitions=len(found.partitions),
            replication_factor=self.journal.replication_factor,
            config={"cleanup.policy": "delete"},
            timeout=self.journal.read_timeout,
            journal=False,
        )

    # -- records -------------------------------------------------------------------------------

    def _take(self, messages: list[Message]) -> None:
        for message in self._records(messages):
            partition, offset = place_of(message)
            flow = self._flows.get(partition)
            if flow is None:
                continue  # revoked while these were in flight
            flow.read(offset)
            try:
                record = record_of(message, self._decode)
                metadata = {RECORD_METADATA: record.to_metadata()}
            except Undecodable as refused:
                self._dead_letter(message, refused.reason, refused.detail)
                continue
            except Exception as exc:  # what else a record's bytes lead reading it to
                self._dead_letter(message, UNREADABLE, f"{type(exc).__name__}: {one_line(exc)}")
                continue
            flow.waiting.append(
                Pending(
                    offset,
                    bound_run_id(self.topic, partition, offset),
                    record.value,
                    metadata,
                    message.key(),
                    message.value(),
                )
            )

    def _pace(self, consumer: Consumer) -> None:
        """Pause reading a partition while READ_AHEAD of its records wait for their submits;
        resume it below half of that. The other partitions read on."""
        pause, resume = [], []
        for partition, flow in self._flows.items():
            waiting = len(flow.waiting)
            if partition not in self._paused and waiting >= READ_AHEAD:
                pause.append(partition)
            elif partition in self._paused and waiting < READ_AHEAD // 2:
                resume.append(partition)
        with contextlib.suppress(KafkaException):
            if pause:
                consumer.pause([TopicPartition(self.topic, p) for p in pause])
                self._paused.update(pause)
            if resume:
                consumer.resume([TopicPartition(self.topic, p) for p in resume])
                self._paused.difference_update(resume)

    # -- submits -------------------------------------------------------------------------------

    def _room(self) -> int:
        return SUBMIT_AHEAD * self.binding.max_concurrency - self.in_flight

    def _submittable(self) -> bool:
        if self._room() <= 0 or self.clock() < self._retry_at:
            return False
        return any(flow.can_start() for flow in self._flows.values())

    def _submit_ready(self) -> None:
        """Submit the runs of the records that may start, side by side on the consumer's
        event loop, partitions taking turns, up to the room ``max_concurrency`` leaves."""
        if self.clock() < self._retry_at:
            return
        room = self._room()
        taken: list[tuple[PartitionFlow, Pending]] = []
        flows = [flow for flow in self._flows.values() if flow.waiting]
        while room > 0 and flows:
            share = max(1, room // len(flows))
            for flow in list(flows):
                ready = flow.ready(min(share, room))
                taken.extend((flow, pending) for pending in ready)
                room -= len(ready)
                if not ready or not flow.waiting or flow.ordered:
                    flows.remove(flow)
                if room <= 0:
                    break
        if not taken:
            return
        outcomes = self._run(_together([self._submit(p) for _, p in taken]))
        away: dict[int, list[Pending]] = {}
        for (flow, pending), outcome in zip(taken, outcomes, strict=True):
            if outcome is None:
                away.setdefault(flow.partition, []).append(pending)
            elif outcome == "dropped":
                flow.dropped(pending)
            else:
                flow.submitted(pending)
                self._opened(flow.partition, pending, checked=outcome == "made")
        for partition, unsent in away.items():
            self._flows[partition].put_back(unsent)
        if away:
            self._retry_at = self.clock() + RETRY_AFTER
        if sum(map(len, away.values())) < len(taken):
            self._on_submitted()

    async def _submit(self, pending: Pending) -> str | None:
        """Submit ``pending``'s run: ``"made"``, ``"found"`` (it was made before),
        ``"dropped"`` (the store refused it: its record went to the dead-letter topic), or None
        when the store is away."""
        spec = self.spec
        partition = pending.metadata[RECORD_METADATA]["partition"]
        try:
            params = spec.validate_params({"value": pending.value})
            submit = Submit(
                name=spec.name,
                params=params,
                metadata=pending.metadata,
                owner=None,
                version=spec.version,
                version_behavior=spec.version_behavior,
                concurrency_key=None,
                concurrency_max=None,
                rate_key=None,
                rate_per_second=None,
                rate_burst=None,
                provenance=None,
                start_at=None,
                shard_key=partition_shard_key(self.topic, partition),
            )
            # create_run, not submit_run: the store's own step, which a store that runs its
            # calls on the event loop (Valkey with a Kafka journal) makes there natively.
            await call_store(self.store, self.store.create_run, submit, pending.run_id)
        except DuplicateRunError:
            self.found += 1
            return "found"
        except StoreUnavailable as exc:
            log.debug("bound topic %s: submit deferred: %s", self.topic, exc)
            return None
        except (InvalidParamsError, InvalidTextError, PayloadTooLarge) as exc:
            # A value its workflow refuses: submitting it again cannot help.
            self._unsubmittable(partition, pending, one_line(exc))
            return "dropped"
        except (ConfigurationError, StoreFileGone):
            # The store refusing this worker (its credentials, its file gone) is no record's
            # fault: every record would meet it. The consumer ends, committing nothing past
            # this record, and the worker stops saying why.
            raise
        except Exception as exc:
            # Not an outage (the store translates those to StoreUnavailable): an error this
            # record's submit meets (a validator of ``value`` that raises, a value a store
            # cannot encode), which it would meet again. The record is set aside, so the
            # partition and every other record move on.
            detail = f"{type(exc).__name__}: {one_line(exc)}"
            log.error(
                "bound topic %s: the submit of the record at offset %d of partition %d failed: %s",
                self.topic,
                pending.offset,
                partition,
                detail,
            )
            log.debug("bound topic %s: the failed submit", self.topic, exc_info=exc)
            self._dead_letter_value(
                partition,
                pending.offset,
                pending.raw_key,
                pending.raw_value,
                SUBMIT_FAILED,
                detail,
            )
            return "dropped"
        self.submitted += 1
        return "made"

    def _unsubmittable(self, partition: int, pending: Pending, detail: str) -> None:
        """A record whose run the store refused: its decoded value goes as JSON (the record's
        own bytes when the value has no JSON form)."""
        value: bytes | None
        try:
            value = json.dumps(pending.value, separators=(",", ":"), default=str).encode()
        except (ValueError, TypeError, RecursionError):
            value = pending.raw_value
        self._dead_letter_value(
            partition, pending.offset, pending.raw_key, value, UNSUBMITTABLE, detail
        )

    # -- finished runs -------------------------------------------------------------------------

    def _opened(self, partition: int, pending: Pending, *, checked: bool) -> None:
        self._where[pending.run_id] = (partition, pending.offset)
        # A run found made before may have finished long ago: ask about it at once.
        now = self.clock()
        self._opened_at[pending.run_id] = now if checked else ASK_NOW
        if checked:
            self._submitted_at[pending.run_id] = now

    def _finish(self, run_id: str) -> None:
        where = self._where.pop(run_id, None)
        self._opened_at.pop(run_id, None)
        self._submitted_at.pop(run_id, None)
        if where is not None:
            flow = self._flows.get(where[0])
            if flow is not None:
                flow.finished(where[1])

    def _settle_ended(self) -> None:
        now = self.clock()
        while self._ended:
            run_id = self._ended.popleft()
            since = self._submitted_at.get(run_id)
            if since is not None:
                self._asks.took(now - since)
            self._finish(run_id)

    def _ask_open(self) -> None:
        """Ask the store about the open runs no worker here reported within ``AskPace.after``
        (from ASK_AFTER to ASK_AFTER_MOST): those another worker ran (or is running)."""
        now = self.clock()
        self._next_ask = now + ASK_AFTER
        after = self._asks.after
        asked = [run for run, at in self._opened_at.items() if now - at >= after]
        if not asked:
            return
        try:
            infos = self._run(
                _together(
                    [call_store(self.store, self.store.get_run, self.spec.name, r) for r in asked]
                )
            )
        except StoreUnavailable as exc:
            log.debug("bound topic %s: runs not asked about: %s", self.topic, exc)
            return
        except Exception as exc:  # no outage, but a pass that failed: asked again later
            if not self._ask_failed:
                log.error(
                    "bound topic %s: asking the store about %d open run(s) failed; asking "
                    "again every %gs: %s: %s",
                    self.topic,
                    len(asked),
                    ASK_AFTER,
                    type(exc).__name__,
                    one_line(exc),
                )
            self._ask_failed = True
            return
        self._ask_failed = False
        # A run the store does not know ended and went (retention) unless the store lost its
        # data: then it is unknown, held open (its record uncommitted) until the store is
        # rebuilt or marked anew.
        lost = any(info is None for info in infos) and self._store_lost()
        for run_id, info in zip(asked, infos, strict=True):
            if info is None and lost:
                self._opened_at[run_id] = now
                continue
            if info is None or info.status.is_terminal:
                self._finish(run_id)
                continue
            self._opened_at[run_id] = now
            parked = info.status in PARKED
            if parked:
                # Its time from submit to end will hold its wait: not what the pace learns.
                self._submitted_at.pop(run_id, None)
            partition, offset = self._where[run_id]
            flow = self._flows.get(partition)
            if flow is not None:
                flow.parked_now(offset, parked)

    def _store_lost(self) -> bool:
        """Whether the store has lost its data (its marker is gone); an outage or another
        failure asking counts as lost too, so nothing is committed on a guess."""
        try:
            return self._run(call_store(self.store, self.store.read_marker)) is None
        except Exception as exc:
            log.debug("bound topic %s: reading the store's marker failed: %s", self.topic, exc)
            return True

    # -- commits -------------------------------------------------------------------------------

    def _owned(self) -> dict[int, PartitionFlow]:
        return self._flows

    # -- rebalances ----------------------------------------------------------------------------

    def _take_on(self, assigned: TopicPartition) -> None:
        self._flows[assigned.partition] = PartitionFlow(assigned.partition, self.binding.ordered)

    def _drop(self, partitions: list[int]) -> None:
        for partition in partitions:
            flow = self._flows.pop(partition, None)
            self._forget(partition)
            self._paused.discard(partition)
            if flow is not None:
                for run_id in flow.open.values():
                    self._where.pop(run_id, None)
                    self._opened_at.pop(run_id, None)
                    self._submitted_at.pop(run_id, None)
