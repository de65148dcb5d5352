"""ValkeyStore's waits and controls: parking and waking runs, timers, signals, updates,
pause, terminate, hand-back and hand-on, each one Lua script.

What a run holds besides its hash and journal lives under keys of its own: ``sig`` (a list of
buffered signals, each ``name SEP signal_id SEP record``), ``sigk`` (signal send key -> first
answer), ``upd`` (update id -> ``{"seq", "record"}``, the pending updates) and ``updr``
(update id -> settled outcome). Open waits with a due time sit in the ``timers`` sorted set,
scored by that time, as ``name SEP run_id``.
"""

from __future__ import annotations

import functools
import json
import uuid
from typing import Any

from lockgate._clock import iso
from lockgate._errors import RunNotFoundError
from lockgate._names import check_name, check_optional
from lockgate.journal._events import EventKind, RunEvent
from lockgate.stores._gates import fair_bucket
from lockgate.stores._records import (
    SuccessorPlan,
    terminated_payload,
)
from lockgate.stores._shards import shard_key
from lockgate.stores._types import TerminateOutcome, WaitOutcome, WaitSpec
from lockgate.stores.valkey._events import event_args
from lockgate.stores.valkey._keys import SEP, split_member
from lockgate.stores.valkey._lifecycle import ValkeyLifecycle, run_fields, soonest_op
from lockgate.stores.valkey._loop import Op, command, operation
from lockgate.stores.valkey._replies import as_text, scored


def _dumps(value: Any) -> str:
    return json.dumps(value, allow_nan=False, separators=(",", ":"))


class ValkeyWaits(ValkeyLifecycle):
    """Timers and waits, signals, updates, pause, terminate, hand-back and hand-on on Valkey."""

    def _require_op(self, name: str, run_id: str) -> Op[int]:
        """The run's shard; :class:`RunNotFoundError` unless it exists (for the plain reads)."""
        shard = yield from self._located_op(name, run_id)
        if shard is not None:
            [exists] = yield command("EXISTS", self._key("r", name, run_id, shard=shard))
            if int(exists):
                return shard
        self._forget(name, run_id)
        raise RunNotFoundError(name, run_id)

    # -- timers and waits ----------------------------------------------------------------------

    @operation
    def park_run(
        self, name: str, run_id: str, *, lease: str, events: list[RunEvent], wait: WaitSpec
    ) -> Op[WaitOutcome]:
        outcome = yield from self._on_run_op(
            "w_park",
            name,
            run_id,
            lease,
            event_args(events),
            _dumps(wait.to_dict()),
            repr(float(wait.due_at)) if wait.due_at is not None else "",
            wait.kind,
            wait.signal or "",
        )
        return WaitOutcome(as_text(outcome))

    def get_sleeping_runs(self, before: float, limit: int = 100) -> list[tuple[str, str]]:
        """Due waits, earliest first and in submit order within one due time (each shard's
        order; across shards, by submit time)."""
        ranked: list[tuple[float, float, int, str, str]] = []
        for shard in self._shards():
            ranked.extend(self._due_in(shard, before, limit))
        ranked.sort(key=lambda t: t[:3])
        due = [(name, run_id) for *_, name, run_id in ranked[:limit]]
        return due

    def _due_in(
        self, shard: int, before: float, limit: int
    ) -> list[tuple[float, float, int, str, str]]:
        """Up to ``limit`` of ``shard``'s due waits (and any tied with the last), as
        (due at, submitted at, ord, name, run id), of runs that have not ended."""
        timers = self._key("timers", shard=shard)
        due = self._cmd(
            "ZRANGEBYSCORE", timers, "-inf", repr(float(before)), "WITHSCORES", "LIMIT", 0, limit
        )
        entries = scored(due)
        if len(entries) >= limit > 0:
            # Waits due at the same time as the last one come in submit order: take them all.
            last = repr(max(entries.values()))
            tied = self._cmd("ZRANGEBYSCORE", timers, last, last, "WITHSCORES")
            entries.update(scored(tied))
        ranked: list[tuple[float, float, int, str, str]] = []
        for member, due_at in entries.items():
            name, run_id = split_member(member)
            key = self._key("r", name, run_id, shard=shard)
            order, submitted, terminal = self._cmd("HMGET", key, "ord", "submitted_at", "terminal")
            if order is not None and not terminal:
                self._remember(name, run_id, shard)
                at = float(submitted) if self.shard_count > 1 else 0.0
                ranked.append((due_at, at, int(order), name, run_id))
        return ranked

    @operation
    def next_wait_due(self, after: float) -> Op[float | None]:
        """The soonest timer later than ``after`` over every shard, in one round trip. An
        entry of a run that ended meanwhile may answer: the timer loop then finds nothing
        to end, as the store contract allows."""
        keys = [self._key("timers", shard=s) for s in self._shards()]
        return (yield from soonest_op(keys, after))

    def wake_due(self, name: str, run_id: str, *, due_by: float) -> WaitOutcome:
        outcome = as_text(self._on_run("w_wake", name, run_id, "", repr(float(due_by)), ""))
        if outcome == "handoff":
            return self._finish_hand_on(name, run_id)
        return WaitOutcome(outcome)

    @operation
    def wake_run(
        self, name: str, run_id: str, *, wait_id: str, lease: str | None = None
    ) -> Op[WaitOutcome]:
        return (yield from self._end_wait_op(name, run_id, EventKind.RUN_WOKEN, wait_id, lease))

    @operation
    def time_out_wait(
        self, name: str, run_id: str, *, wait_id: str, lease: str | None = None
    ) -> Op[WaitOutcome]:
        return (
            yield from self._end_wait_op(name, run_id, EventKind.RUN_WAIT_TIMED_OUT, wait_id, lease)
        )

    def _end_wait_op(
        self, name: str, run_id: str, kind: str, wait_id: str, lease: str | None
    ) -> Op[WaitOutcome]:
        """End the run's wait ``wait_id`` with an event of ``kind`` (``w_wake``)."""
        outcome = yield from self._on_run_op("w_wake", name, run_id, kind, wait_id, lease or "")
        return WaitOutcome(as_text(outcome))

    # -- signals -------------------------------------------------------------------------------

    @operation
    def send_signal(
        self,
        name: str,
        run_id: str,
        signal_name: str,
        payload: dict[str, Any],
        sent_at: str,
        *,
        idempotency_key: str | None = None,
    ) -> Op[str]:
        # Buffered entries join the signal's name and id with SEP, kept out of both.
        check_name("signal name", signal_name)
        check_optional("signal id", idempotency_key)
        signal_id = idempotency_key or uuid.uuid4().hex
        record = _dumps(
            {"signal_id": signal_id, "name": signal_name, "payload": payload, "sent_at": sent_at}
        )
        entry = f"{signal_name}{SEP}{signal_id}{SEP}{record}"
        sent = yield from self._on_run_op(
            "w_signal", name, run_id, signal_name, entry, idempotency_key or ""
        )
        return as_text(sent)

    @operation
    def peek_signal(self, name: str, run_id: str, signal_name: str) -> Op[dict[str, Any] | None]:
        shard = yield from self._require_op(name, run_id)
        [buffered] = yield command("LRANGE", self._key("sig", name, run_id, shard=shard), 0, -1)
        for raw in buffered:
            entry_name, _, rest = as_text(raw).partition(SEP)
            if entry_name == signal_name:
                signal: dict[str, Any] = json.loads(rest.partition(SEP)[2])
                return signal
        return None

    @operation
    def pop_signal_match(
        self, name: str, run_id: str, signal_name: str, signal_id: str
    ) -> Op[bool]:
        popped = yield from self._on_run_op("w_pop_signal", name, run_id, signal_name, signal_id)
        return bool(popped)

    # -- updates -------------------------------------------------------------------------------

    def deliver_update(
        self,
        name: str,
        run_id: str,
        update_name: str,
        payload: dict[str, Any],
        update_id: str,
        sent_at: str,
    ) -> str:
        record = _dumps(
            {"update_id": update_id, "update": update_name, "payload": payload, "sent_at": sent_at}
        )
        return as_text(self._on_run("w_update", name, run_id, update_id, record))

    @operation
    def peek_pending_updates(self, name: str, run_id: str) -> Op[list[dict[str, Any]]]:
        shard = yield from self._require_op(name, run_id)
        [stored] = yield command("HVALS", self._key("upd", name, run_id, shard=shard))
        pending = sorted((json.loads(as_text(raw)) for raw in stored), key=lambda u: int(u["seq"]))
        return [dict(u["record"]) for u in pending]

    @operation
    def settle_update(
        self,
        name: str,
        run_id: str,
        update_id: str,
        outcome: dict[str, Any],
        *,
        fence: str | None = None,
        ack: bool = True,
    ) -> Op[None]:
        yield from self._on_run_op(
            "w_settle", name, run_id, update_id, _dumps(outcome), fence or "", "1" if ack else ""
        )

    def read_update_result(self, name: str, run_id: str, update_id: str) -> dict[str, Any] | None:
        shard = self._located(name, run_id)
        raw = None
        if shard is not None:
            raw = self._cmd("HGET", self._key("updr", name, run_id, shard=shard), update_id)
        if raw is None:
            self._run(self._require_op(name, run_id))
            return None
        result: dict[str, Any] = json.loads(as_text(raw))
        return result

    # -- controls ------------------------------------------------------------------------------

    def request_pause(self, name: str, run_id: str) -> str:
        return as_text(self._control("w_pause", name, run_id, iso(self._now())))

    def resume_paused_run(
        self, name: str, run_id: str, *, wait_id: str | None = None
    ) -> WaitOutcome:
        return WaitOutcome(as_text(self._on_run("w_resume", name, run_id, wait_id or "")))

    def terminate_run(
        self,
        name: str,
        run_id: str,
        *,
        reason: str | None = None,
        requested_by: str | None = None,
        cause: dict[str, Any] | None = None,
    ) -> TerminateOutcome:
        now = iso(self._now())
        error = RunEvent(
            EventKind.RUN_ERROR, terminated_payload(now, reason, requested_by, cause), run_id
        )
        outcome = self._on_run("w_terminate", name, run_id, event_args([error]), now)
        return TerminateOutcome(as_text(outcome))

    @operation
    def hand_back_run(self, name: str, run_id: str, worker_id: str | None = None) -> Op[None]:
        yield from self._on_run_op("release", name, run_id, worker_id or "", "hand_back")

    def hand_on(
        self, name: str, run_id: str, lease: str, successor_id: str, plan: SuccessorPlan
    ) -> str:
        """One script when the successor's gates map it to the run's shard; otherwise the
        steps ``w_hand_on_create`` lists, each safe to repeat."""
        shard = self._located(name, run_id)
        fields = self._fields(name, run_id)
        if shard is None or fields is None:
            raise RunNotFoundError(name, run_id)
        owner = fields.get("owner") or None
        opening = self.load_run(name, run_id, max_events=1)
        submit, continued_with = plan(
            json.loads(fields["params"]),
            json.loads(fields.get("metadata") or "{}"),
            owner,
            dict(opening[0].payload) if opening else {},
        )
        gates = submit.gates
        continued = event_args([RunEvent(EventKind.RUN_CONTINUED, continued_with, run_id)])
        born = [
            json.dumps(run_fields(submit, fair_bucket(owner, gates))),
            event_args(submit.opening_events(successor_id, self._now(), None)),
        ]
        target = self._home(
            shard_key(gates.concurrency_key, gates.rate_key, submit.shard_key or successor_id)
        )
        if self.shard_count == 1 or target == shard:
            held = ""
            if self.shard_count > 1:
                held = self._run(self._route_op(name, successor_id, shard))[1]
            args = (lease, successor_id, *born, continued, held)
            handed = as_text(self._script("w_hand_on", name, run_id, *args, shard=shard))
            if self.shard_count > 1:
                self._run(self._routed_op(name, successor_id, shard, held))
            return handed
        return self._hand_on_across(
            name, run_id, lease, successor_id, born, continued, shard, target
        )

    def _hand_on_across(
        self,
        name: str,
        run_id: str,
        lease: str,
        successor_id: str,
        born: list[str],
        continued: str,
        shard: int,
        target: int,
    ) -> str:
        """A hand-on whose successor lives in another shard (``target``)."""
        off = functools.partial(self._script, "w_hand_off", name, run_id, shard=shard)
        off(lease, successor_id, "", "check")
        held = self._run(self._route_op(name, successor_id, target))[1]
        self._script("w_hand_on_create", name, run_id, successor_id, *born, held, shard=target)
        self._run(self._routed_op(name, successor_id, target, held))
        holdings = as_text(off(lease, successor_id, continued, "hand"))
        self._script("w_hand_on_adopt", name, successor_id, "adopt", holdings, shard=target)
        off("", successor_id, "", "clear")
        return successor_id

    def _finish_hand_on(self, name: str, successor_id: str) -> WaitOutcome:
        """The timer of a successor set aside by a hand-on across shards whose worker went:
        adopt what the run held if it was handed on, look again later while it has not
        ended, end the successor if the run ended another way."""
        fields = self._fields(name, successor_id)
        if fields is None or not fields.get("handoff"):
            return WaitOutcome.SUPERSEDED
        run_id = fields["handoff_from"]
        shard = self._run_shard(name, run_id)
        holdings = as_text(
            self._script("w_hand_off", name, run_id, "", successor_id, "", "read", shard=shard)
        )
        adopt = functools.partial(self._on_run, "w_hand_on_adopt", name, successor_id)
        if holdings == "pending":
            adopt("rearm", "")
            return WaitOutcome.SUPERSEDED
        if holdings == "abandoned":
            adopt("abandon", "")
            return WaitOutcome.RESOLVED
        adopt("adopt", holdings)
        self._script("w_hand_off", name, run_id, "", successor_id, "", "clear", shard=shard)
        return WaitOutcome.RESOLVED
