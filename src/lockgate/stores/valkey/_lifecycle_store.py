"""ValkeyLifecycleStore: ValkeyStore as the lifecycle half of a :class:`CompositeStore`."""

from __future__ import annotations

from lockgate.journal._events import RunEvent
from lockgate.stores.valkey._store import ValkeyStore


class ValkeyLifecycleStore(ValkeyStore):
    """Coordination on Valkey (queue, claims and gates, leases, waits, signals, updates,
    controls, triggers), with another store keeping the journals.

    Every atomic decision still happens in one script here, so each run's events are kept here
    too while it lives: an outbox the composite copies to its event log after each operation
    (:meth:`events_after`) and drops once the run's terminal is copied (:meth:`drop_outbox`).
    Valkey then holds only live runs' events. Takes the same options as :class:`ValkeyStore`.
    """

    def events_after(self, name: str, run_id: str, after_seq: int) -> list[RunEvent]:
        """The run's outbox events after ``run_seq`` ``after_seq``, oldest first (read a page
        at a time, as journals are)."""
        return self._run(self._journal_op(name, run_id, after_seq))

    def drop_outbox(self, name: str, run_id: str) -> None:
        """Forget the events of a run whose terminal the event log now holds."""
        self._cmd("DEL", self._run_key("e", name, run_id))

    def keep_journal_position(self, name: str, run_id: str, partition: int, offset: int) -> None:
        """Remember where the run's journal starts in the event log (a Kafka partition and
        the offset of its first record), so that any process reads it from there; the lowest
        offset told stays. A run this store does not hold is left alone."""
        shard = self._run_shard(name, run_id)
        self._script("j_position", name, run_id, str(partition), str(offset), shard=shard)

    def journal_position(self, name: str, run_id: str) -> tuple[int, int] | None:
        """Where the run's journal starts in the event log, as kept by
        :meth:`keep_journal_position`; None when none was kept (or no such run)."""
        fields = self._run(self._fields_op(name, run_id))
        kept = (fields or {}).get("journal_at")
        if not kept:
            return None
        partition, _, offset = kept.partition(":")
        return int(partition), int(offset)
