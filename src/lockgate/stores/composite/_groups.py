"""The optional groups of a :class:`CompositeStore` (``stores/composite/_store.py``): each is the
lifecycle backend's, and a call that writes to a run copies the run's new events to the event
log after it, as every write of the composite does."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from lockgate.journal._events import RunEvent
from lockgate.stores._base import Store
from lockgate.stores._chains import ChainLink
from lockgate.stores._insight import BufferInfo, LimitUsage, RateUsage, WorkerInfo
from lockgate.stores._records import SuccessorPlan
from lockgate.stores._triggers import BatchToFire, FiredBatch, TriggerPolicy
from lockgate.stores._types import TerminateOutcome, WaitOutcome, WaitSpec
from lockgate.stores.composite._composed import Call, Op, Together, composed


class CompositeGroups(Store):
    """What :class:`CompositeStore` serves of the optional groups; see its docstring."""

    lifecycle: Store

    if TYPE_CHECKING:

        def _copy(self, name: str, run_id: str | None, *, wrote: bool = False) -> int | None: ...

        def _copy_op(
            self, name: str, run_id: str | None, *, wrote: bool = False
        ) -> Op[int | None]: ...

        def _copy_fresh_op(
            self, name: str, run_id: str, have: int, outbox: list[RunEvent]
        ) -> Op[int | None]: ...

    # -- optional groups: the lifecycle backend's --------------------------------------------------

    def get_idempotency_run(self, name: str, key: str) -> str | None:
        return self.lifecycle.get_idempotency_run(name, key)

    def set_idempotency_run(self, name: str, key: str, run_id: str, ttl: int = 86_400) -> bool:
        return self.lifecycle.set_idempotency_run(name, key, run_id, ttl)

    def get_idempotency_body_hash(self, name: str, key: str) -> str | None:
        return self.lifecycle.get_idempotency_body_hash(name, key)

    @composed
    def park_run(
        self,
        name: str,
        run_id: str,
        *,
        lease: str,
        events: list[RunEvent],
        wait: WaitSpec,
    ) -> Op[WaitOutcome]:
        outcome: WaitOutcome = yield Call(
            self.lifecycle.park_run,
            (name, run_id),
            {"lease": lease, "events": events, "wait": wait},
        )
        wrote = outcome == WaitOutcome.PARKED and bool(events)
        yield from self._copy_op(name, run_id, wrote=wrote)
        return outcome

    def get_sleeping_runs(self, before: float, limit: int = 100) -> list[tuple[str, str]]:
        return self.lifecycle.get_sleeping_runs(before, limit)

    def next_wait_due(self, after: float) -> float | None:
        return self.lifecycle.next_wait_due(after)

    def wake_due(self, name: str, run_id: str, *, due_by: float) -> WaitOutcome:
        outcome = self.lifecycle.wake_due(name, run_id, due_by=due_by)
        self._copy(name, run_id)
        return outcome

    def wake_run(
        self, name: str, run_id: str, *, wait_id: str, lease: str | None = None
    ) -> WaitOutcome:
        outcome = self.lifecycle.wake_run(name, run_id, wait_id=wait_id, lease=lease)
        self._copy(name, run_id)
        return outcome

    def time_out_wait(
        self, name: str, run_id: str, *, wait_id: str, lease: str | None = None
    ) -> WaitOutcome:
        outcome = self.lifecycle.time_out_wait(name, run_id, wait_id=wait_id, lease=lease)
        self._copy(name, run_id)
        return outcome

    def send_signal(
        self,
        name: str,
        run_id: str,
        signal_name: str,
        payload: dict[str, Any],
        sent_at: str,
        *,
        idempotency_key: str | None = None,
    ) -> str:
        result = self.lifecycle.send_signal(
            name, run_id, signal_name, payload, sent_at, idempotency_key=idempotency_key
        )
        self._copy(name, run_id)
        return result

    @composed
    def peek_signal(self, name: str, run_id: str, signal_name: str) -> Op[dict[str, Any] | None]:
        answer: dict[str, Any] | None = yield Call(
            self.lifecycle.peek_signal, (name, run_id, signal_name)
        )
        return answer

    @composed
    def pop_signal_match(
        self, name: str, run_id: str, signal_name: str, signal_id: str
    ) -> Op[bool]:
        answer: bool = yield Call(
            self.lifecycle.pop_signal_match, (name, run_id, signal_name, signal_id)
        )
        return answer

    def deliver_update(
        self,
        name: str,
        run_id: str,
        update_name: str,
        payload: dict[str, Any],
        update_id: str,
        sent_at: str,
    ) -> str:
        result = self.lifecycle.deliver_update(
            name, run_id, update_name, payload, update_id, sent_at
        )
        self._copy(name, run_id)
        return result

    @composed
    def peek_pending_updates(self, name: str, run_id: str) -> Op[list[dict[str, Any]]]:
        answer: list[dict[str, Any]] = yield Call(
            self.lifecycle.peek_pending_updates, (name, run_id)
        )
        return answer

    def settle_update(
        self,
        name: str,
        run_id: str,
        update_id: str,
        outcome: dict[str, Any],
        *,
        fence: str | None = None,
        ack: bool = True,
    ) -> None:
        self.lifecycle.settle_update(name, run_id, update_id, outcome, fence=fence, ack=ack)
        self._copy(name, run_id)

    def read_update_result(self, name: str, run_id: str, update_id: str) -> dict[str, Any] | None:
        return self.lifecycle.read_update_result(name, run_id, update_id)

    def request_pause(self, name: str, run_id: str) -> str:
        at = self.lifecycle.request_pause(name, run_id)
        self._copy(name, run_id)
        return at

    def resume_paused_run(
        self, name: str, run_id: str, *, wait_id: str | None = None
    ) -> WaitOutcome:
        outcome = self.lifecycle.resume_paused_run(name, run_id, wait_id=wait_id)
        self._copy(name, run_id)
        return outcome

    def terminate_run(
        self,
        name: str,
        run_id: str,
        *,
        reason: str | None = None,
        requested_by: str | None = None,
        cause: dict[str, Any] | None = None,
    ) -> TerminateOutcome:
        outcome = self.lifecycle.terminate_run(
            name, run_id, reason=reason, requested_by=requested_by, cause=cause
        )
        self._copy(name, run_id)
        return outcome

    @composed
    def hand_back_run(self, name: str, run_id: str, worker_id: str | None = None) -> Op[None]:
        yield Call(self.lifecycle.hand_back_run, (name, run_id, worker_id))

    def hand_on(
        self, name: str, run_id: str, lease: str, successor_id: str, plan: SuccessorPlan
    ) -> str:
        successor = self.lifecycle.hand_on(name, run_id, lease, successor_id, plan)
        self._copy(name, successor)
        self._copy(name, run_id)
        return successor

    def get_chain_tail(self, root_name: str, root_run_id: str) -> ChainLink | None:
        return self.lifecycle.get_chain_tail(root_name, root_run_id)

    def advance_chain_tail(self, link: ChainLink) -> None:
        self.lifecycle.advance_chain_tail(link)

    def close_chain(self, link: ChainLink) -> None:
        self.lifecycle.close_chain(link)

    def chain_closed(self, root_name: str, root_run_id: str) -> bool:
        return self.lifecycle.chain_closed(root_name, root_run_id)

    def register_version(self, name: str, version: str) -> int:
        return self.lifecycle.register_version(name, version)

    def version_rank(self, name: str, version: str) -> int | None:
        return self.lifecycle.version_rank(name, version)

    def record_workflow_policy(self, name: str, policy: dict[str, Any]) -> None:
        self.lifecycle.record_workflow_policy(name, policy)

    def get_workflow_policy(self, name: str) -> dict[str, Any] | None:
        return self.lifecycle.get_workflow_policy(name)

    def trigger_event(
        self, name: str, key: str, event: dict[str, Any], *, policy: TriggerPolicy
    ) -> str | None:
        fired = self.lifecycle.trigger_event(name, key, event, policy=policy)
        self._copy(name, fired)
        return fired

    def due_triggers(self, name: str, before: float, limit: int = 100) -> list[str]:
        return self.lifecycle.due_triggers(name, before, limit)

    def fire_trigger(
        self, name: str, key: str, *, policy: TriggerPolicy, due_by: float
    ) -> str | None:
        fired = self.lifecycle.fire_trigger(name, key, policy=policy, due_by=due_by)
        self._copy(name, fired)
        return fired

    def next_trigger_due(self, name: str, after: float) -> float | None:
        return self.lifecycle.next_trigger_due(name, after)

    @composed
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
    ) -> Op[FiredBatch]:
        options = {"policy": policy, "source": source, "first": first, "last": last}
        fired: FiredBatch = yield Call(self.lifecycle.fire_batch, (name, key, events), options)
        yield from self._copy_op(name, fired.run_id)
        return fired

    @composed
    def fire_batches(self, name: str, batches: Sequence[BatchToFire]) -> Op[list[FiredBatch]]:
        # The lifecycle's fires together (Valkey: a script per shard), then every run's
        # journal copy side by side, their records sharing the producer's batches: the call
        # returns once Kafka acknowledged every fired run's run:init.
        fired: list[FiredBatch] = yield Call(self.lifecycle.fire_batches, (name, batches))
        copies: dict[str, Op[int | None]] = {}
        for one in fired:
            run_id = one.run_id
            if run_id is None or run_id in copies:
                continue
            if one.opened:
                # A run this fire made: its outbox is what the lifecycle said it wrote, and
                # the log holds none of it (a copy it did hold is kept once all the same).
                copies[run_id] = self._copy_fresh_op(name, run_id, 0, list(one.opened))
            else:
                copies[run_id] = self._copy_op(name, run_id)
        yield Together(tuple(copies.values()))
        return fired

    def fired_through(
        self, name: str, source: str, keys: Mapping[str, TriggerPolicy]
    ) -> dict[str, int]:
        return self.lifecycle.fired_through(name, source, keys)

    def forget_marks(self, name: str, source: str, below: int) -> int:
        return self.lifecycle.forget_marks(name, source, below)

    def limit_usage(self, name: str, *, limit: int = 50) -> list[LimitUsage]:
        return self.lifecycle.limit_usage(name, limit=limit)

    def rate_usage(self, name: str, *, limit: int = 50) -> list[RateUsage]:
        return self.lifecycle.rate_usage(name, limit=limit)

    def open_buffers(self, name: str, *, limit: int = 100) -> list[BufferInfo]:
        return self.lifecycle.open_buffers(name, limit=limit)

    def record_worker(self, info: WorkerInfo, ttl: float) -> None:
        self.lifecycle.record_worker(info, ttl)

    def live_workers(self) -> list[WorkerInfo]:
        return self.lifecycle.live_workers()

    def drop_worker(self, worker_id: str) -> None:
        self.lifecycle.drop_worker(worker_id)
