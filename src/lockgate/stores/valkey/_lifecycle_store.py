"""ValkeyLifecycleStore: ValkeyStore as the lifecycle half of a :class:`CompositeStore`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Unpack

from lockgate.journal._events import RunEvent
from lockgate.stores._records import CreateOptions, Submit
from lockgate.stores._types import RunControls, Written
from lockgate.stores.valkey._keys import mark_field, member
from lockgate.stores.valkey._loop import Commands, Op, Script, command, operation
from lockgate.stores.valkey._replies import as_text
from lockgate.stores.valkey._restore import JournaledRun, restore_args
from lockgate.stores.valkey._store import ValkeyStore


class ValkeyLifecycleStore(ValkeyStore):
    """Coordination on Valkey (queue, claims and gates, leases, waits, signals, updates,
    controls, triggers), with another store keeping the journals.

    Every atomic decision still happens in one script here, so each run's events are kept here
    too while it lives: an outbox the composite copies to its event log after each operation
    (:meth:`events_after`; a write answering what it left there, ``*_written``, spares the
    read) and drops once the run's terminal is copied (:meth:`drop_outbox`). A claim answers
    where each run's journal starts in the log (``journal_at``) as :meth:`journal_position`
    does.
    Valkey then holds only live runs' events. Takes the same options as :class:`ValkeyStore`.

    A run's idempotency key is journaled in its ``run:init`` headers, so that a rebuild from
    the journal (``lockgate store rebuild``) keeps it again.
    """

    journal_idempotency = True

    @operation
    def events_after(self, name: str, run_id: str, after_seq: int) -> Op[list[RunEvent]]:
        """The run's outbox events after ``run_seq`` ``after_seq``, oldest first (read a page
        at a time, as journals are)."""
        return (yield from self._journal_op(name, run_id, after_seq))

    @operation
    def create_run_written(
        self, submit: Submit, run_id: str, **options: Unpack[CreateOptions]
    ) -> Op[tuple[str, list[RunEvent] | None]]:
        """:meth:`create_run`, answering the opening events it journaled when it made the
        run and they are all the outbox holds: as they were built, not yet numbered (the
        outbox holds them as ``run_seq`` 1, 2, ... in this order, unfenced); None when the
        run was there before (an idempotent repeat) or a control held for the id was
        latched beside them."""
        return (
            yield from self._create_op(
                submit,
                run_id,
                options.get("headers"),
                options.get("idempotency_key"),
                options.get("idempotency_body_hash"),
                options.get("idempotency_ttl", 86_400),
            )
        )

    @operation
    def append_written(
        self, name: str, run_id: str, events: list[RunEvent], *, fence: str | None = None
    ) -> Op[Written]:
        """:meth:`append_events`, answering what it left in the outbox."""
        return (yield from self._append_op(name, run_id, events, fence or ""))

    @operation
    def append_and_poll_written(
        self, name: str, run_id: str, events: list[RunEvent], *, fence: str
    ) -> Op[tuple[RunControls, Written]]:
        """:meth:`append_and_poll`, answering what it left in the outbox too."""
        return (yield from self._append_and_poll_op(name, run_id, events, fence))

    @operation
    def finish_if_quiet_written(
        self, name: str, run_id: str, events: list[RunEvent], *, fence: str
    ) -> Op[tuple[RunControls | None, Written]]:
        """:meth:`finish_if_quiet`, answering what it left in the outbox too (every event when
        the run ended, all but the terminal otherwise)."""
        return (yield from self._finish_if_quiet_op(name, run_id, events, fence))

    @operation
    def drop_outbox(self, name: str, run_id: str) -> Op[None]:
        """Forget the events of a run whose terminal the event log now holds."""
        shard = yield from self._run_shard_op(name, run_id)
        yield command("DEL", self._key("e", name, run_id, shard=shard))

    @operation
    def drop_outboxes(self, runs: Sequence[tuple[str, str]]) -> Op[None]:
        """:meth:`drop_outbox` for each of ``runs`` (workflow, run id), in one request (one
        ``DEL`` of them all on one server; on a cluster, one per key, pipelined)."""
        keys = []
        for name, run_id in runs:
            shard = yield from self._run_shard_op(name, run_id)
            keys.append(self._key("e", name, run_id, shard=shard))
        if not keys:
            return
        if self.cluster:
            yield Commands(tuple(("DEL", key) for key in keys), "drop_outboxes")
        else:
            yield command("DEL", *keys)

    @operation
    def keep_journal_position(
        self, name: str, run_id: str, partition: int, offset: int
    ) -> Op[tuple[int, int] | None]:
        """Remember where the run's journal starts in the event log (a Kafka partition and
        the offset of its first record), so that any process reads it from there; the lowest
        offset told stays, and is returned. A run this store does not hold is left alone
        (None)."""
        shard = yield from self._run_shard_op(name, run_id)
        kept = as_text(
            (yield Script("j_position", (name, run_id, str(partition), str(offset)), shard))
        )
        if not kept:
            return None
        at, _, lowest = kept.partition(":")
        return int(at), int(lowest)

    @operation
    def journal_position(self, name: str, run_id: str) -> Op[tuple[int, int] | None]:
        """Where the run's journal starts in the event log, as kept by
        :meth:`keep_journal_position`; None when none was kept (or no such run)."""
        # The one field, not the run's hash: a fired run's params hold its events.
        shard = yield from self._located_op(name, run_id)
        if shard is None:
            return None
        [kept] = yield command("HGET", self._key("r", name, run_id, shard=shard), "journal_at")
        if not kept:
            return None
        partition, _, offset = as_text(kept).partition(":")
        return int(partition), int(offset)

    @operation
    def journal_bounds(
        self, name: str, run_id: str
    ) -> Op[tuple[tuple[int, int] | None, int | None]]:
        """:meth:`journal_position` and the highest epoch (fencing token) this store issued
        for the run, from the one read of the run's record: ``(None, None)`` for a run it
        does not hold. An event log believes no event stamped with a higher epoch."""
        fields = yield from self._fields_op(name, run_id)
        if fields is None:
            return None, None
        kept = fields.get("journal_at")
        position = None
        if kept:
            partition, _, offset = kept.partition(":")
            position = int(partition), int(offset)
        epoch = fields.get("epoch")
        return position, int(epoch) if epoch and epoch.isdigit() else 0

    def restore_run(self, run: JournaledRun) -> bool:
        """Write ``run`` back as its journal tells it (``lockgate store rebuild``), in one
        script in its shard: True when restored, False when the run exists already (then
        nothing is written). With shards, the run -> shard index learns it too."""
        answer = as_text(self._script("restore_run", *restore_args(run), shard=run.shard))
        if self.shard_count > 1:
            self._cmd("HSETNX", self._key("shardof"), member(run.name, run.run_id), run.shard)
            self._remember(run.name, run.run_id, run.shard)
        return answer == "restored"

    def restore_fired_mark(self, name: str, source: str, key: str, last: int, shard: int) -> bool:
        """Raise ``key``'s fired-through mark in ``source`` to ``last`` (a restored run fired
        from a trigger topic covered the records through it), in ``shard``: whether it moved."""
        return bool(
            int(
                self._script(
                    "t_restore_mark", name, mark_field(source, key), str(last), shard=shard
                )
            )
        )

    def restore_idempotency(
        self, name: str, key: str, run_id: str, body_hash: str, until: float
    ) -> bool:
        """Keep the idempotency record ``key`` -> ``run_id`` again until ``until``, unless a
        live record holds the key or ``until`` has passed: whether it was kept."""
        kept = self._script("restore_idem", name, key, run_id, body_hash, repr(float(until)))
        return bool(int(kept))
