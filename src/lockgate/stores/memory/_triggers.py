"""MemoryStore's Collect and Debounce buffers, and the fired-through marks of batches buffered
outside the store: each operation one step under the store's mutex."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from lockgate.stores._triggers import FiredBatch, TriggerPolicy, batch_submit, settled_fire
from lockgate.stores.memory._state import MemoryBuffer, MemoryState, locked


class MemoryTriggers(MemoryState):
    """Collect/Debounce buffers and fired-through marks in memory."""

    @locked
    def trigger_event(
        self, name: str, key: str, event: dict[str, Any], *, policy: TriggerPolicy
    ) -> str | None:
        buffer = self._buffers.setdefault((name, key), MemoryBuffer())
        now = self._clock()
        buffer.events.append((buffer.next_seq, json.loads(json.dumps(event, allow_nan=False))))
        buffer.next_seq += 1
        buffer.first_at = now if buffer.first_at is None else buffer.first_at
        buffer.due_at = policy.due_at(buffer.first_at, now, buffer.due_at)
        if policy.full(len(buffer.events)):
            return self._fire(name, key, buffer, policy)
        return None

    @locked
    def due_triggers(self, name: str, before: float, limit: int = 100) -> list[str]:
        due = sorted(
            (buffer.due_at, key)
            for (n, key), buffer in self._buffers.items()
            if n == name and buffer.events and buffer.due_at is not None and buffer.due_at <= before
        )
        return [key for _, key in due[:limit]]

    @locked
    def fire_trigger(
        self, name: str, key: str, *, policy: TriggerPolicy, due_by: float
    ) -> str | None:
        buffer = self._buffers.get((name, key))
        if buffer is None or not buffer.events or buffer.due_at is None:
            return None
        if buffer.due_at > due_by:
            return None
        return self._fire(name, key, buffer, policy)

    @locked
    def next_trigger_due(self, name: str, after: float) -> float | None:
        return min(
            (
                buffer.due_at
                for (n, _), buffer in self._buffers.items()
                if n == name and buffer.events and buffer.due_at is not None
                if buffer.due_at > after
            ),
            default=None,
        )

    @locked
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
        run_id, submit = batch_submit(
            name, key, events, policy, source=source, first=first, last=last
        )
        mark = self._marks.get((name, source, key), -1)
        answer, submit_now = settled_fire(run_id, (name, run_id) in self._runs, mark, first, last)
        if submit_now:
            params = json.loads(json.dumps(submit.params, allow_nan=False))
            self._insert_run(replace(submit, params=params), run_id, None, self._clock())
        self._marks[(name, source, key)] = answer.fired_through
        return answer

    @locked
    def fired_through(
        self, name: str, source: str, keys: Mapping[str, TriggerPolicy]
    ) -> dict[str, int]:
        return {
            key: self._marks[(name, source, key)]
            for key in keys
            if (name, source, key) in self._marks
        }

    @locked
    def forget_marks(self, name: str, source: str, below: int) -> int:
        gone = [m for m, at in self._marks.items() if m[:2] == (name, source) and at < below]
        for mark in gone:
            del self._marks[mark]
        return len(gone)

    def _fire(self, name: str, key: str, buffer: MemoryBuffer, policy: TriggerPolicy) -> str:
        events = [event for _, event in buffer.events]
        run_id, submit = policy.submit(name, key, events, buffer.events[0][0], buffer.events[-1][0])
        buffer.events, buffer.first_at, buffer.due_at = [], None, None
        self._insert_run(submit, run_id, None, self._clock())
        return run_id
