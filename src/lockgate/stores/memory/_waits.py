"""MemoryStore's optional groups: parking and waking runs, signals, updates and run
controls."""

from __future__ import annotations

import uuid
from typing import Any

from lockgate._clock import iso
from lockgate._errors import EventAfterTerminal
from lockgate.journal._events import (
    EventKind,
    RunEvent,
)
from lockgate.stores._records import (
    SuccessorPlan,
    handed_on_to,
    terminated_payload,
)
from lockgate.stores._types import (
    SIGNAL_WAITS,
    TerminateOutcome,
    WaitOutcome,
    WaitSpec,
)
from lockgate.stores.memory._state import MemoryState, locked


class MemoryWaits(MemoryState):
    """Timers and waits, signals, updates, pause, terminate, hand-back and hand-on in memory."""

    @locked
    def park_run(
        self, name: str, run_id: str, *, lease: str, events: list[RunEvent], wait: WaitSpec
    ) -> WaitOutcome:
        run = self._run(name, run_id)
        self._check_fence(run, lease)
        if (
            run.cancel_at is not None
            or run.updates
            or (wait.kind in SIGNAL_WAITS and any(s["name"] == wait.signal for s in run.signals))
        ):
            return WaitOutcome.SUPERSEDED
        if wait.kind == "pause" and run.pause_at is None:
            return WaitOutcome.SUPERSEDED
        self._append(run, events, run.epoch)
        run.wait = wait
        self._set_lock(run, None)
        self._dequeue(run)
        return WaitOutcome.PARKED

    @locked
    def get_sleeping_runs(self, before: float, limit: int = 100) -> list[tuple[str, str]]:
        due = sorted(
            (
                (r.wait.due_at, r.order, r.name, r.run_id)
                for r in self._runs.values()
                if r.wait is not None
                and r.wait.due_at is not None
                and r.wait.due_at <= before
                and not r.ended
            ),
            key=lambda t: (t[0], t[1]),
        )
        return [(name, run_id) for _, _, name, run_id in due[:limit]]

    @locked
    def next_wait_due(self, after: float) -> float | None:
        return min(
            (
                r.wait.due_at
                for r in self._runs.values()
                if r.wait is not None and r.wait.due_at is not None and r.wait.due_at > after
            ),
            default=None,
        )

    @locked
    def wake_due(self, name: str, run_id: str, *, due_by: float) -> WaitOutcome:
        run = self._runs.get((name, run_id))
        wait = run.wait if run is not None else None
        if run is None or wait is None or wait.due_at is None or wait.due_at > due_by:
            return WaitOutcome.SUPERSEDED
        if wait.kind in SIGNAL_WAITS:
            if any(s["name"] == wait.signal for s in run.signals):
                return WaitOutcome.SUPERSEDED
            kind = EventKind.RUN_WAIT_TIMED_OUT
        elif wait.kind in ("sleep", "start"):
            kind = EventKind.RUN_WOKEN
        else:
            return WaitOutcome.SUPERSEDED
        self._append(
            run,
            [self._event(run, kind, {"call_index": wait.call_index, "wait_id": wait.wait_id})],
            None,
        )
        self._close_wait(run)
        if not self._held(run):
            self._enqueue(run)
        return WaitOutcome.RESOLVED

    def _end_wait(
        self, name: str, run_id: str, wait_id: str, kind: EventKind, lease: str | None
    ) -> WaitOutcome:
        run = self._run(name, run_id)
        if lease is not None:
            self._check_fence(run, lease)
        wait = run.wait
        kinds = SIGNAL_WAITS if kind == EventKind.RUN_WAIT_TIMED_OUT else {"sleep", "start"}
        if wait is None or wait.wait_id != wait_id or wait.kind not in kinds:
            journaled = any(
                e.kind == kind and e.payload.get("wait_id") == wait_id for e in run.events
            )
            return WaitOutcome.DUPLICATE if journaled else WaitOutcome.SUPERSEDED
        if kind == EventKind.RUN_WAIT_TIMED_OUT and any(
            s["name"] == wait.signal for s in run.signals
        ):
            return WaitOutcome.SUPERSEDED
        self._append(
            run,
            [self._event(run, kind, {"call_index": wait.call_index, "wait_id": wait_id})],
            run.epoch if lease is not None else None,
        )
        self._close_wait(run)
        if lease is None and not self._held(run):
            self._enqueue(run)
        return WaitOutcome.RESOLVED

    @locked
    def wake_run(
        self,
        name: str,
        run_id: str,
        *,
        wait_id: str,
        lease: str | None = None,
    ) -> WaitOutcome:
        return self._end_wait(name, run_id, wait_id, EventKind.RUN_WOKEN, lease)

    @locked
    def time_out_wait(
        self,
        name: str,
        run_id: str,
        *,
        wait_id: str,
        lease: str | None = None,
    ) -> WaitOutcome:
        return self._end_wait(name, run_id, wait_id, EventKind.RUN_WAIT_TIMED_OUT, lease)

    @locked
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
        run = self._run(name, run_id)
        if idempotency_key is not None and idempotency_key in run.signal_keys:
            return "duplicate"
        if run.ended or run.cancel_at is not None:
            return "rejected"
        run.signals.append(
            {
                "signal_id": idempotency_key or uuid.uuid4().hex,
                "name": signal_name,
                "payload": payload,
                "sent_at": sent_at,
            }
        )
        result = "buffered"
        wait = run.wait
        if wait is not None and wait.kind in SIGNAL_WAITS and wait.signal == signal_name:
            self._close_wait(run)
            if not self._held(run):
                self._enqueue(run)
            result = "delivered"
        if idempotency_key is not None:
            run.signal_keys[idempotency_key] = result
        return result

    @locked
    def peek_signal(self, name: str, run_id: str, signal_name: str) -> dict[str, Any] | None:
        run = self._run(name, run_id)
        return next((dict(s) for s in run.signals if s["name"] == signal_name), None)

    @locked
    def pop_signal_match(self, name: str, run_id: str, signal_name: str, signal_id: str) -> bool:
        run = self._run(name, run_id)
        for index, signal in enumerate(run.signals):
            if signal["name"] == signal_name and signal["signal_id"] == signal_id:
                del run.signals[index]
                return True
        return False

    @locked
    def deliver_update(
        self,
        name: str,
        run_id: str,
        update_name: str,
        payload: dict[str, Any],
        update_id: str,
        sent_at: str,
    ) -> str:
        run = self._run(name, run_id)
        if update_id in run.update_results:
            return "settled"
        if update_id in run.updates:
            return "duplicate"
        if run.ended:
            return "rejected"
        run.updates[update_id] = {
            "update_id": update_id,
            "update": update_name,
            "payload": payload,
            "sent_at": sent_at,
        }
        if run.wait is not None and run.wait.kind != "start" and not self._held(run):
            self._enqueue(run)
        return "queued"

    @locked
    def peek_pending_updates(self, name: str, run_id: str) -> list[dict[str, Any]]:
        return [dict(u) for u in self._run(name, run_id).updates.values()]

    @locked
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
        run = self._run(name, run_id)
        if fence is not None:
            self._check_fence(run, fence)
        run.update_results[update_id] = dict(outcome)
        if ack:
            run.updates.pop(update_id, None)

    @locked
    def read_update_result(self, name: str, run_id: str, update_id: str) -> dict[str, Any] | None:
        result = self._run(name, run_id).update_results.get(update_id)
        return dict(result) if result is not None else None

    @locked
    def request_pause(self, name: str, run_id: str) -> str:
        run = self._runs.get((name, run_id))
        if run is None:
            held = self._hold(name, run_id)
            held.pause_at = held.pause_at or iso(self._clock())
            return held.pause_at
        if run.pause_at is None and not run.ended:
            self._latch_pause(run, iso(self._clock()))
        return run.pause_at or iso(self._clock())

    @locked
    def resume_paused_run(
        self,
        name: str,
        run_id: str,
        *,
        wait_id: str | None = None,
    ) -> WaitOutcome:
        run = self._run(name, run_id)
        if (
            run.wait is not None
            and run.wait.kind == "pause"
            and (wait_id is None or run.wait.wait_id == wait_id)
        ):
            self._append(
                run, [self._event(run, EventKind.RUN_UNPAUSED, {"wait_id": run.wait.wait_id})], None
            )
            run.pause_at = None
            self._close_wait(run)
            self._enqueue(run)
            return WaitOutcome.RESOLVED
        if run.pause_at is not None and wait_id is None:
            run.pause_at = None
            return WaitOutcome.RESOLVED
        return WaitOutcome.SUPERSEDED

    @locked
    def terminate_run(
        self,
        name: str,
        run_id: str,
        *,
        reason: str | None = None,
        requested_by: str | None = None,
        cause: dict[str, Any] | None = None,
    ) -> TerminateOutcome:
        run = self._runs.get((name, run_id))
        if run is None:
            return TerminateOutcome.NOT_FOUND
        if run.ended:
            return TerminateOutcome.ALREADY_ENDED
        now = iso(self._clock())
        self._append(
            run,
            [
                self._event(
                    run, EventKind.RUN_ERROR, terminated_payload(now, reason, requested_by, cause)
                )
            ],
            None,
        )
        run.cancel_at = run.cancel_at or now
        self._set_lock(run, None)
        return TerminateOutcome.TERMINATED

    @locked
    def hand_back_run(self, name: str, run_id: str, worker_id: str | None = None) -> None:
        run = self._runs.get((name, run_id))
        if run is None or (worker_id is not None and run.lock != worker_id):
            return
        self._set_lock(run, None)
        if not run.ended:
            self._enqueue(run)

    @locked
    def hand_on(
        self, name: str, run_id: str, lease: str, successor_id: str, plan: SuccessorPlan
    ) -> str:
        run = self._run(name, run_id)
        if run.ended:
            if handed_on_to(run.events[-1], successor_id):
                return successor_id
            raise EventAfterTerminal(f"run {run_id!r} has ended; it cannot be handed on")
        self._check_fence(run, lease)
        submit, continued_with = plan(
            run.params, run.metadata, run.owner, dict(run.events[0].payload)
        )
        self._insert_run(submit, successor_id, None, self._clock())
        successor = self._runs[(name, successor_id)]
        successor.signals, run.signals = run.signals, []
        successor.signal_keys, run.signal_keys = run.signal_keys, {}
        successor.updates, run.updates = run.updates, {}
        # Settled outcomes are copied: a sender that retries an update id finds it settled.
        successor.update_results.update(run.update_results)
        if run.pause_at is not None:
            self._latch_pause(successor, run.pause_at)
        if run.cancel_at is not None:
            cancel = next(e for e in reversed(run.events) if e.kind == EventKind.RUN_CANCEL)
            self._latch_cancel(successor, run.cancel_at, dict(cancel.payload.get("detail") or {}))
        continued = self._event(run, EventKind.RUN_CONTINUED, continued_with)
        self._append(run, [continued], run.epoch)
        return successor_id
