"""``ctx.consume``: a stream read in batches inside a run, each batch handled in a journaled
step at a call position of its own.

Every poll of the source takes the next call position (kind ``stream``, named after the
stream). A position the journal finished is replayed without polling: its ``step:done``
holds either the batch's place and the handler's result, or ``{"idle": True}`` for a poll
that found nothing, which ended the loop. At the first position with no outcome, the source
is sought to where the journal says each partition of the stream stands, so a resumed run
never hands a batch whose step finished to the handler again; a source's own commits may lag
behind the journal (a crash between a step's outcome and its commit). Then, live, each batch
is journaled ``step:pending``, handled, journaled ``step:done``, made durable, and only then
committed to the source: the journal, not the commit, is the truth about the stream.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from lockgate._errors import StepResultTypeError
from lockgate.attempt._unwind import rebuild_error
from lockgate.journal._events import EventKind, StepKind, payload_size
from lockgate.journal._replay import CallRecord
from lockgate.workflow._retry import DEFAULT_RETRY, RetryPolicy
from lockgate.workflow._source import Batch, Source, StreamProgress

if TYPE_CHECKING:
    from lockgate.attempt._attempt_core import AttemptCore

log = logging.getLogger("lockgate.streams")
T = TypeVar("T")

#: The journaled result of a poll that found nothing (the loop ended there).
IDLE: dict[str, Any] = {"idle": True}

#: Where the stream of one name stands, per (source_id, partition): the offset after the
#: last batch whose step finished.
Positions = dict[tuple[str, int], int]


@dataclass
class _Tally:
    batches: int = 0
    records: int = 0
    positions: Positions = field(default_factory=dict)

    def add(self, result: dict[str, Any], stream: Positions) -> None:
        """Count a finished batch, here and in the stream's positions across the run."""
        self.batches += 1
        self.records += int(result["count"])
        place = (str(result["source_id"]), int(result["partition"]))
        after = int(result["next_offset"])
        self.positions[place] = max(self.positions.get(place, after), after)
        stream[place] = max(stream.get(place, after), after)

    def progress(self) -> StreamProgress:
        return StreamProgress(self.batches, self.records, dict(self.positions))


async def consume(
    attempt: AttemptCore,
    source: Source[T],
    handler: Callable[[Batch[T]], Any],
    *,
    name: str,
    max_batches: int | None,
    poll_timeout: float,
    retry: RetryPolicy | None,
) -> StreamProgress:
    """Read ``source`` in batches until ``max_batches`` were handled or a poll finds nothing,
    handing each batch to ``handler`` in a step of its own (see the module docstring)."""
    if not isinstance(source, Source):
        raise TypeError(f"ctx.consume needs a Source (poll, seek, commit, ...), not {source!r}")
    if not callable(handler):
        raise TypeError(f"ctx.consume handler must be callable, not {handler!r}")
    if max_batches is not None and (
        isinstance(max_batches, bool) or not isinstance(max_batches, int) or max_batches < 1
    ):
        raise ValueError(f"ctx.consume max_batches must be an integer >= 1, got {max_batches!r}")
    if (
        isinstance(poll_timeout, bool)
        or not isinstance(poll_timeout, int | float)
        or not math.isfinite(poll_timeout)
        or poll_timeout < 0
    ):
        raise ValueError(f"ctx.consume poll_timeout must be seconds >= 0, got {poll_timeout!r}")
    if retry is not None and not isinstance(retry, RetryPolicy):
        raise TypeError(f"ctx.consume retry must be a RetryPolicy, not {retry!r}")
    live = _Live(attempt, source, handler, name, int(poll_timeout * 1000), retry or DEFAULT_RETRY)
    stream = attempt.stream_positions.setdefault(name, {})
    tally = _Tally()
    sought = False
    while max_batches is None or tally.batches < max_batches:
        index, record = attempt.next_call(StepKind.STREAM, name)
        await attempt.before_call(index, record)
        if record is not None and record.done:
            if record.result == IDLE:
                break
            tally.add(record.result, stream)
            continue
        if record is not None and record.failed:
            raise rebuild_error(record.errors[-1], name)
        if not sought:
            await asyncio.to_thread(_seek_live, source, stream)
            sought = True
        result = await live.position(index, record)
        if result is None:
            break
        tally.add(result, stream)
    return tally.progress()


def _seek_live(source: Source[Any], stream: Positions) -> None:
    """Before the first live poll, put every partition of ``source`` where this run's stream
    stands: after the last batch whose step finished, whatever the source committed; a
    partition no step of the run finished, at the source's commit (its start when none). A
    source object that outlived an attempt (made outside the body) would otherwise go on from
    where its cursor was, past a batch that was polled and never finished."""
    places = {place: None for place in source.partitions()} | dict.fromkeys(stream)
    for source_id, partition in sorted(places):
        offset = stream.get((source_id, partition))
        if offset is None:
            offset = source.get_committed(source_id, partition)
        source.seek(source_id, partition, offset if offset is not None else 0)


class _Live:
    """The live half of one ``ctx.consume`` call: a poll, and the step of its batch."""

    def __init__(
        self,
        attempt: AttemptCore,
        source: Source[Any],
        handler: Callable[[Batch[Any]], Any],
        name: str,
        timeout_ms: int,
        policy: RetryPolicy,
    ) -> None:
        self.attempt = attempt
        self.source = source
        self.handler = handler
        self.name = name
        self.timeout_ms = timeout_ms
        self.policy = policy

    async def position(self, index: int, record: CallRecord | None) -> dict[str, Any] | None:
        """Poll at call position ``index`` and handle the batch: its journaled result, or
        None for a poll that found nothing (journaled idle)."""
        attempt = self.attempt
        # An attempt that started (step:pending) and left no outcome counts as one.
        tries = (record.last_attempt if record is not None else 0) + 1
        base = {"call_index": index, "step_id": self.name, "kind": StepKind.STREAM.value}
        while True:
            try:
                batch = _checked(
                    self.source, await asyncio.to_thread(self.source.poll, self.timeout_ms)
                )
                break
            except Exception as exc:
                tries = await self._failed(base, tries, exc)
        if batch is None:
            attempt.record_event(EventKind.STEP_DONE, {**base, "attempt": tries, "result": IDLE})
            if attempt.step_boundary_durability:
                attempt.fresh_controls = None  # read before a poll that waited: stale now
            else:
                await attempt.step_boundary()
            return None
        place = {
            "source_id": batch.source_id,
            "partition": batch.partition,
            "offset": batch.offset,
            "next_offset": batch.next_offset,
        }
        while True:
            attempt.record_event(EventKind.STEP_PENDING, {**base, "attempt": tries, **place})
            await attempt.step_boundary()

            async def effect() -> dict[str, Any]:
                value = await _call(self.handler, batch)
                return {**place, "count": len(batch.records), "result": _as_json(self.name, value)}

            result, failure = await attempt.step_effect(self.name, effect)
            if failure is None:
                break
            tries = await self._failed(base, tries, failure)
        assert result is not None
        attempt.record_event(
            EventKind.STEP_DONE,
            {**base, "attempt": tries, "result": result},
            size=payload_size(result),
            what=f"result of stream {self.name!r}",
        )
        # Whatever step_boundary_durability says: the commit must follow a durable outcome.
        await attempt.flush()
        await self._commit(batch.source_id, batch.partition, batch.next_offset)
        return result

    async def _failed(self, base: dict[str, Any], tries: int, failure: Exception) -> int:
        return await self.attempt.step_failed(base, tries, failure, self.policy)

    async def _commit(self, source_id: str, partition: int, offset: int) -> None:
        try:
            await asyncio.to_thread(self.source.commit, source_id, partition, offset)
        except Exception as exc:
            # The journal holds the batch's outcome: a resumed run seeks past it whatever
            # the source committed, so a failed commit costs nothing but a later one.
            log.warning(
                "run %s: stream %r: the commit of %s partition %d at offset %d failed: %s",
                self.attempt.run_id,
                self.name,
                source_id,
                partition,
                offset,
                exc,
            )


def _checked(source: Source[T], batch: object) -> Batch[T] | None:
    if batch is not None and not isinstance(batch, Batch):
        raise TypeError(f"{source!r}.poll() returned {type(batch).__name__}, not a Batch or None")
    return batch


async def _call(handler: Callable[[Batch[Any]], Any], batch: Batch[Any]) -> Any:
    """Call the handler once; a sync one runs on a worker thread."""
    if inspect.iscoroutinefunction(handler):
        return await handler(batch)
    result = await asyncio.to_thread(handler, batch)
    if inspect.isawaitable(result):
        return await result
    return result


def _as_json(name: str, value: Any) -> Any:
    """The handler's result as the journal keeps it (through JSON, so the live attempt gets
    what a replay will), or :class:`StepResultTypeError`."""
    try:
        return json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise StepResultTypeError(
            name,
            TypeError(
                f"the stream handler returned {type(value).__name__}, which is not "
                f"JSON-serializable; return plain data"
            ),
        ) from exc
