"""One attempt at a run: replay the journal, run the body from it, journal what is new.

The body is re-executed from the top on every attempt. Each durable call takes the next call
position; where the journal already records an outcome for that position the outcome is
returned, otherwise the call runs live and its outcome is journaled, fenced by the attempt's
lease, before the body's next durable call (or with the terminal, when the body then returns).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random as _random
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, NoReturn

from lockgate import _failpoints as failpoints
from lockgate._clock import SystemClock, iso
from lockgate._errors import (
    ErrorCode,
    LockgateError,
    NonDeterminismError,
    PayloadTooLarge,
    QueryError,
    StepResultTypeError,
    StoreFileGone,
    StoreUnavailable,
    WaitTimeout,
)
from lockgate.attempt import _blocked as blocked
from lockgate.attempt._attempt_core import step_seconds
from lockgate.attempt._calls import BodyCalls
from lockgate.attempt._cancel_timeout import arm_cancel_timeout
from lockgate.attempt._chain import Continued, close_if_chained
from lockgate.attempt._children import after_attempt, close_children
from lockgate.attempt._handon import hand_on_if_regated
from lockgate.attempt._unwind import (
    Abort,
    AttemptOutcome,
    Cancelled,
    HandedBack,
    HandedOn,
    LeaseLost,
    ReplayExhausted,
    StoreFailed,
    Suspend,
    Unwind,
    rebuild_error,
    run_error_payload,
)
from lockgate.journal._events import (
    EMIT_HEADER,
    RESERVED_PREFIXES,
    EventKind,
    RunEvent,
    StepKind,
    payload_size,
)
from lockgate.journal._replay import ReplayState
from lockgate.stores._calls import call_store
from lockgate.stores._types import RunControls, WaitOutcome, WaitSpec
from lockgate.workflow._context import WorkflowContext
from lockgate.workflow._retry import DEFAULT_RETRY
from lockgate.workflow._runtime import StepContext, bind_attempt, unbind_attempt
from lockgate.workflow._spec import json_ready, spec_of
from lockgate.workflow._step import StepSpec

log = logging.getLogger("lockgate.executor")


class Attempt(BodyCalls):
    """One attempt at one run under one lease (``mode="live"``), or a read-only replay that
    serves a query (``mode="query"``)."""

    #: Seconds a body has, after the heartbeat saw its cancel, to reach a boundary before its
    #: task is cancelled and the run ends cancelled (None: no limit; see _cancel_timeout.py).
    cancel_timeout: float | None = None
    cancel_forced = False

    # -- durable operations --------------------------------------------------------------------

    async def run_step(self, spec: StepSpec, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        index, record = self.next_call(StepKind.NAMED, spec.name)
        await self.before_call(index, record)
        if record is not None and record.done:
            return spec.from_journal(record.result)
        if record is not None and record.failed:
            raise rebuild_error(record.errors[-1], spec.name)
        policy = spec.retry or DEFAULT_RETRY
        # An attempt that started (step:pending) and left no outcome counts as one.
        attempt = (record.last_attempt if record is not None else 0) + 1
        base = {"call_index": index, "step_id": spec.name, "kind": StepKind.NAMED.value}
        while True:
            if spec.effect == "write":
                self.record_event(EventKind.STEP_PENDING, {**base, "attempt": attempt})
            await self.step_boundary()
            step_ctx = StepContext(
                run_id=self.run_id,
                run_name=self.spec.name,
                step_id=spec.name,
                call_index=index,
                attempt=attempt,
                metadata=self.metadata,
                _is_cancelled=lambda: self._cancel_seen,
            )

            async def effect(step_ctx: StepContext = step_ctx) -> tuple[Any, int]:
                call = spec.invoke(args, kwargs, step_ctx)
                result = await (asyncio.wait_for(call, spec.timeout) if spec.timeout else call)
                journaled = spec.to_journal(result)
                try:
                    return journaled, payload_size(journaled)
                except (TypeError, ValueError) as exc:
                    raise StepResultTypeError(
                        spec.name,
                        TypeError(
                            f"{type(journaled).__name__} is not JSON-serializable; annotate the "
                            f"step's return type or return plain data"
                        ),
                    ) from exc

            started = self.clock()
            outcome, failure = await self.step_effect(spec.name, effect)
            took = step_seconds(self.clock() - started)
            if failure is None:
                break
            attempt = await self.step_failed(base, attempt, failure, policy, took=took)
        assert outcome is not None  # the effect returned: its value, never None
        journaled, size = outcome
        self.record_event(
            EventKind.STEP_DONE,
            {**base, "attempt": attempt, "result": journaled},
            took,
            size=size,
            what=f"result of step {spec.name!r}",
        )
        if self.step_boundary_durability:
            # The outcome goes with the attempt's next write, before the body's next durable
            # call or its end: only the body's plain code runs first, which leaves no trace
            # outside the process. The controls read before the effect are stale now.
            self.fresh_controls = None
        else:
            await self.step_boundary()
        return spec.from_journal(journaled)

    async def sleep(self, seconds: float) -> None:
        index, record = self.next_call(StepKind.SLEEP, "sleep")
        await self.before_call(index, record)
        if record is not None and record.outcome is not None:
            return
        if record is None and seconds <= 0:
            return
        wake_at = (
            record.due_at
            if record is not None and record.due_at is not None
            else self.clock() + seconds
        )
        wait = WaitSpec("sleep", f"sleep:{index}", index, due_at=wake_at)
        opening = (
            []
            if record is not None
            else [
                self.new_event(
                    EventKind.RUN_SLEEPING,
                    {
                        "call_index": index,
                        "wait_id": wait.wait_id,
                        "wake_at": wake_at,
                        "name": "sleep",
                    },
                )
            ]
        )
        await self._wait_out(wait, opening)

    async def _wait_out(self, wait: WaitSpec, opening: list[RunEvent]) -> None:
        """Sleep until ``wait`` is due: close it here when it already is, else park."""
        while True:
            assert wait.due_at is not None
            if self.clock() >= wait.due_at:
                self.buffer.extend(opening)
                self.event_count += len(opening)
                await self.flush()
                outcome = await self.io(
                    self.store.wake_run,
                    self.spec.name,
                    self.run_id,
                    wait_id=wait.wait_id,
                    lease=self.lease,
                )
                if outcome == WaitOutcome.SUPERSEDED:
                    self.record_event(
                        EventKind.RUN_WOKEN,
                        {"call_index": wait.call_index, "wait_id": wait.wait_id},
                    )
                    await self.flush()
                return
            if await self.park(opening, wait) == WaitOutcome.PARKED:
                raise Suspend()

    async def wait_for_signal(self, signal: str, timeout: float | None) -> Any:
        index, record = self.next_call(StepKind.SIGNAL, signal)
        await self.before_call(index, record)
        if record is not None and record.outcome == "received":
            return record.payload
        wait_id = f"signal:{index}"
        if record is not None and record.due_at is not None:
            deadline: float | None = record.due_at
        else:
            deadline = self.clock() + timeout if timeout is not None else None
        if record is not None and record.outcome == "timed_out":
            raise self._wait_timeout(signal, index, deadline)
        wait = WaitSpec("signal", wait_id, index, due_at=deadline, signal=signal)
        opening = (
            []
            if record is not None
            else [
                self.new_event(
                    EventKind.RUN_SIGNAL_WAITING,
                    {
                        "call_index": index,
                        "wait_id": wait_id,
                        "signal": signal,
                        "deadline": deadline,
                    },
                )
            ]
        )
        while True:
            buffered = await self.io(self.store.peek_signal, self.spec.name, self.run_id, signal)
            if buffered is not None:
                signal_id = str(buffered["signal_id"])
                if signal_id in self.state.journaled_signal_ids:
                    # Journaled for an earlier wait by an attempt that died before popping it.
                    await self.io(
                        self.store.pop_signal_match, self.spec.name, self.run_id, signal, signal_id
                    )
                    continue
                self.record_event(
                    EventKind.RUN_SIGNAL_RECEIVED,
                    {
                        "call_index": index,
                        "wait_id": wait_id,
                        "signal": signal,
                        "payload": buffered.get("payload"),
                        "signal_id": signal_id,
                    },
                    size=payload_size(buffered.get("payload")),
                    what=f"payload of signal {signal!r}",
                )
                await self.flush()
                self.state.journaled_signal_ids.add(signal_id)
                await self.io(
                    self.store.pop_signal_match, self.spec.name, self.run_id, signal, signal_id
                )
                return buffered.get("payload")
            if deadline is not None and self.clock() >= deadline:
                self.buffer.extend(opening)
                self.event_count += len(opening)
                opening = []
                await self.flush()
                outcome = await self.io(
                    self.store.time_out_wait,
                    self.spec.name,
                    self.run_id,
                    wait_id=wait_id,
                    lease=self.lease,
                )
                if outcome == WaitOutcome.SUPERSEDED:
                    if (
                        await self.io(self.store.peek_signal, self.spec.name, self.run_id, signal)
                        is not None
                    ):
                        continue
                    self.record_event(
                        EventKind.RUN_WAIT_TIMED_OUT, {"call_index": index, "wait_id": wait_id}
                    )
                    await self.flush()
                raise self._wait_timeout(signal, index, deadline)
            if await self.park(opening, wait) == WaitOutcome.PARKED:
                raise Suspend()

    def _wait_timeout(self, signal: str, index: int, deadline: float | None) -> WaitTimeout:
        when = datetime.fromtimestamp(deadline, UTC) if deadline is not None else None
        return WaitTimeout("signal", signal, index, when)

    async def emit(self, kind: str, payload: dict[str, Any]) -> None:
        if not isinstance(kind, str) or not kind or kind.startswith(RESERVED_PREFIXES):
            raise ValueError(
                f"ctx.emit kind {kind!r} is reserved or empty; the prefixes "
                f"{', '.join(RESERVED_PREFIXES)} belong to the engine"
            )
        if not isinstance(payload, dict) or not json_ready(payload):
            raise TypeError("ctx.emit payload must be a JSON-serializable dict")
        index, record = self.next_call(StepKind.EMIT, kind)
        await self.before_call(index, record)
        if record is None:
            self.record_event(kind, {"call_index": index, "data": payload}, {EMIT_HEADER: "1"})

    def _deterministic(self, name: str, produce: Callable[[], Any]) -> Any:
        index, record = self.next_call(StepKind.DETERMINISTIC, name)
        if record is not None and record.done:
            return record.result
        if self.mode == "query":
            raise ReplayExhausted()
        value = produce()
        self.record_event(
            EventKind.STEP_DONE,
            {
                "call_index": index,
                "step_id": name,
                "kind": StepKind.DETERMINISTIC.value,
                "result": value,
            },
        )
        return value

    def now(self) -> datetime:
        return datetime.fromisoformat(str(self._deterministic("now", lambda: iso(self.clock()))))

    def uuid4(self) -> uuid.UUID:
        return uuid.UUID(str(self._deterministic("uuid4", lambda: uuid.uuid4().hex)))

    def random(self) -> float:
        return float(self._deterministic("random", _random.random))

    # -- the attempt ---------------------------------------------------------------------------

    async def execute(self) -> AttemptOutcome:
        """Run the attempt to its end: a terminal, a park, or the loss of its lease.

        Any other ``BaseException`` (the task cancelled, the process dying) propagates with
        nothing more written; the lease is left to expire so another attempt resumes the run.
        """
        self.task = asyncio.current_task()
        heartbeat = asyncio.create_task(self._heartbeat())
        try:
            outcome = await self._drive()
            await after_attempt(self, outcome)  # a child's end is told to its parent
            return outcome
        except asyncio.CancelledError:
            lost = self._lease_lost or self._store_lost is not None
            if self.cancel_forced and not lost and self.task is not None:
                if self.task.uncancel() > 0:
                    raise
                forced = await self._finish_error(
                    await self._cancelled_payload(), AttemptOutcome.CANCELLED
                )
                await after_attempt(self, forced)
                return forced
            if self.task is None or not lost or self.task.uncancel() > 0:
                raise
            if self._store_lost is not None:
                await self._put_back(self._store_lost)
            return AttemptOutcome.ABANDONED
        finally:
            heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await heartbeat
            if self._cancel_timer is not None:
                self._cancel_timer.cancel()

    _cancel_timer: asyncio.Task[None] | None = None

    async def _heartbeat(self) -> None:
        while True:
            await self.clock.sleep(self.store.heartbeat_interval)
            asked_at = self.clock()
            try:
                cancel_at, _ = await self.io(
                    self.store.heartbeat, self.spec.name, self.run_id, self.lease
                )
                self.lease_renewed(asked_at)
                if cancel_at is not None:
                    self._cancel_seen = True
                    if self._cancel_timer is None:
                        self._cancel_timer = arm_cancel_timeout(self)
            except LeaseLost:
                self._lease_lost = True
                if self._ending:
                    # Most likely the terminal's own release; cancelling now could cut the
                    # write short after the store took it. The write tells (_finish_if_quiet).
                    return
                log.warning(
                    "run %s of %s: lease %s lost; abandoning the attempt",
                    self.run_id,
                    self.spec.name,
                    self.lease,
                )
                if self.task is not None:
                    self.task.cancel()
                return
            except StoreFailed as failed:
                gone = isinstance(failed.cause, StoreFileGone)
                # Debug: a worker tells a store outage once, not per run, and the attempt's
                # end says what became of the run; a lease that lapses is acted on below.
                log.debug("run %s: heartbeat failed: %s", self.run_id, failed.cause)
                if (gone or self.lease_lapsed()) and not self._ending:
                    # The store was away for a whole lease, or its file is gone: stop the
                    # body (nothing it does can be journaled) and put the run back when the
                    # store answers (a file gone takes none: the worker stops).
                    self._store_lost = failed.cause
                    if self.task is not None:
                        self.task.cancel()
                    return

    async def _drive(self) -> AttemptOutcome:
        if self.state.terminal is not None:
            return AttemptOutcome.ALREADY_ENDED
        token = bind_attempt(self)
        try:
            try:
                return await self._body_to_terminal()
            except Suspend:
                return AttemptOutcome.SUSPENDED
            except HandedBack:
                return AttemptOutcome.HANDED_BACK
            except HandedOn:
                return AttemptOutcome.HANDED_ON
            except Continued:
                return AttemptOutcome.CONTINUED
            except Cancelled:
                return await self._finish_error(
                    await self._cancelled_payload(), AttemptOutcome.CANCELLED
                )
            except Abort as abort:
                if abort.overflow:
                    cap = self.event_cap
                    self.buffer.append(
                        self.new_event(
                            EventKind.STREAM_OVERFLOW, {"limit": cap, "count": self.event_count}
                        )
                    )
                    payload = {
                        "code": ErrorCode.STREAM_OVERFLOW.value,
                        "message": f"the run reached its cap of {cap} events "
                        f"(max_event_count_per_run, or what the store keeps); continue the "
                        f"work in a new run",
                        "error": {
                            "type": "lockgate:stream_overflow",
                            "code": ErrorCode.STREAM_OVERFLOW.value,
                            "message": str(abort.error),
                        },
                    }
                else:
                    payload = run_error_payload(abort.error)
                return await self._finish_error(payload, AttemptOutcome.FAILED)
        except LeaseLost:
            return AttemptOutcome.ABANDONED
        except StoreFailed as failed:
            await self._put_back(failed.cause)
            raise AssertionError("unreachable") from None
        finally:
            unbind_attempt(token)

    async def _put_back(self, cause: Exception) -> NoReturn:
        """The store failed under the attempt: try once to requeue the run as
        ``store_unavailable`` (its lease, even lapsed, still lets it unless someone took the
        run), then raise :class:`StoreUnavailable`; ``put_back`` says whether that landed (a
        worker keeps trying while the store stays away). A store whose file is gone takes no
        requeue: its :class:`StoreFileGone` is raised as it is."""
        if isinstance(cause, StoreFileGone):
            raise cause
        if blocked.was_blocked(self.lease) and self.lease_lapsed():
            raise StoreUnavailable(
                f"run {self.run_id!r}: the event loop was blocked past the lease"
            )
        with contextlib.suppress(Exception):
            await call_store(
                self.store,
                self.store.requeue_run,
                self.spec.name,
                self.run_id,
                self.lease,
                reason="store_unavailable",
            )
            self.put_back = True
        raise StoreUnavailable(f"the store failed under run {self.run_id!r}: {cause}") from cause

    async def _cancelled_payload(self) -> dict[str, Any]:
        """The cancelled terminal, carrying the detail of the ``run:cancel`` that asked."""
        journal = await self.io(self.store.load_run, self.spec.name, self.run_id)
        detail: dict[str, Any] = {}
        for event in reversed(journal):
            if event.kind == EventKind.RUN_CANCEL:
                detail = dict(event.payload.get("detail") or {})
                break
        return {
            "code": ErrorCode.CANCELLED.value,
            "message": "the run was cancelled",
            "error": {
                "type": "lockgate:cancelled",
                "code": ErrorCode.CANCELLED.value,
                "message": "cancelled",
            },
            "detail": detail,
        }

    async def _start(self) -> None:
        """The gate before the body: a delayed start not yet due parks, a cancel that arrived
        before the body ever ran ends the run without running it, and a run stamped with gates
        other than this worker's is handed on (see ``_handon``)."""
        await self._hand_back_if_stopping()
        start = self.state.calls.get(-1)
        if start is not None and start.outcome is None and start.due_at is not None:
            await self._wait_out(WaitSpec("start", "start", -1, due_at=start.due_at), [])
        if not any(index >= 0 for index in self.state.calls):
            self.fresh_controls = self.fresh_controls or await self.poll()
            if self.fresh_controls.cancel_requested_at is not None:
                raise Cancelled()
            if not self.buffer and await hand_on_if_regated(self) is not None:
                raise HandedOn()

    async def _body_to_terminal(self) -> AttemptOutcome:
        await self._start()
        body = self.spec.body
        deadline = asyncio.timeout(self.spec.attempt_deadline)
        try:
            async with deadline:
                result = await body(WorkflowContext(self), **self.params)
        except TimeoutError as exc:
            if not deadline.expired():
                return await self._finish_error(run_error_payload(exc), AttemptOutcome.FAILED)
            return await self._finish_error(
                {
                    "code": ErrorCode.RUN_TIMEOUT.value,
                    "message": f"the attempt ran past the workflow's timeout of "
                    f"{self.spec.attempt_deadline:g}s",
                    "error": {
                        "type": "lockgate:run_timeout",
                        "code": ErrorCode.RUN_TIMEOUT.value,
                        "message": "attempt deadline",
                    },
                },
                AttemptOutcome.FAILED,
            )
        except Unwind:
            raise
        except Exception as exc:
            return await self._finish_error(run_error_payload(exc), AttemptOutcome.FAILED)
        await self._replay_updates(self.call_index)
        self._check_body_reached_journal_end()
        # The controls the last append read serve here too: since it, only plain code ran.
        controls, self.fresh_controls = self.fresh_controls, None
        if controls is None:
            ending = self._completion(result)
            if ending is not None:
                # One write ends the run unless a cancel or an update came in the meantime.
                controls = await self._finish_if_quiet(ending)
                if controls is None:
                    return AttemptOutcome.COMPLETED
            else:
                controls = await self._controls_now()
        await self._apply_new_updates(self.call_index, controls.updates_pending)
        if controls.cancel_requested_at is not None or self._cancel_raised:
            raise Cancelled()
        if not json_ready(result):
            return await self._finish_error(
                run_error_payload(
                    TypeError(
                        f"workflow {self.spec.name!r} returned {type(result).__name__}, "
                        "which is not JSON-serializable"
                    )
                ),
                AttemptOutcome.FAILED,
            )
        size, limit = payload_size(result), self.spec.max_event_payload_bytes
        if limit is not None and size > limit:
            raise Abort(
                PayloadTooLarge(
                    f"result of workflow {self.spec.name!r} is {size} "
                    f"bytes, over max_event_payload_bytes={limit}",
                    what="result",
                    size=size,
                    limit=limit,
                )
            )
        await self._finish(self.new_event(EventKind.RUN_COMPLETE, {"result": result}))
        return AttemptOutcome.COMPLETED

    def _completion(self, result: Any) -> RunEvent | None:
        """The ``run:complete`` of a body that returned ``result``, or None when the result
        cannot be journaled (the slow path then ends the run in error)."""
        if not json_ready(result):
            return None
        limit = self.spec.max_event_payload_bytes
        if limit is not None and payload_size(result) > limit:
            return None
        return self.new_event(EventKind.RUN_COMPLETE, {"result": result})

    async def _finish_if_quiet(self, terminal: RunEvent) -> RunControls | None:
        """Append the buffer and ``terminal`` in one fenced write, unless the store finds a
        cancel latched or an update pending: then only the buffer, and its controls come
        back. None when the run ended."""
        await close_children(self, terminal.kind)
        events, self.buffer = [*self.buffer, terminal], []
        self._ending = True
        try:
            controls: RunControls | None = await self.io(
                self.store.finish_if_quiet, self.spec.name, self.run_id, events, fence=self.lease
            )
        finally:
            self._ending = False
        if controls is not None and self._lease_lost:
            # The run goes on, but a heartbeat during the write found the lock gone (it was
            # not the terminal's: none was written), and heartbeats have stopped.
            log.warning(
                "run %s of %s: lease %s lost; abandoning the attempt",
                self.run_id,
                self.spec.name,
                self.lease,
            )
            raise LeaseLost()
        self._appended(events if controls is None else events[:-1])
        if controls is None:
            # The run ended: what the heartbeat saw gone was the terminal's own release.
            self._lease_lost = False
            failpoints.hit("after_terminal_append")
            await close_if_chained(self)
        return controls

    async def _finish_error(
        self, payload: dict[str, Any], outcome: AttemptOutcome
    ) -> AttemptOutcome:
        await self._finish(self.new_event(EventKind.RUN_ERROR, payload))
        return outcome

    async def _finish(self, terminal: RunEvent) -> None:
        """Append the buffer and the terminal in one fenced batch. The store drops the run's
        lock with the terminal (see ``EventLogStore.append_events``): no release follows."""
        await close_children(self, terminal.kind)
        events, self.buffer = [*self.buffer, terminal], []
        self._ending = True
        try:
            await self.io(
                self.store.append_events, self.spec.name, self.run_id, events, fence=self.lease
            )
        finally:
            self._ending = False
        self._lease_lost = False  # the run ended: a lock seen gone was the terminal's release
        self._appended(events)
        failpoints.hit("after_terminal_append")
        await close_if_chained(self)

    async def query(self, query: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Replay the journal read-only, then call the ``query`` handler it registered."""
        token = bind_attempt(self)
        try:
            with contextlib.suppress(Unwind, Exception):
                await self.spec.body(WorkflowContext(self), **self.params)
                await self._replay_updates(self.call_index)
        finally:
            unbind_attempt(token)
        handler = self.queries.get(query)
        if handler is None:
            known = ", ".join(sorted(self.queries)) or "none"
            raise QueryError(
                f"run {self.run_id!r} of {self.spec.name!r} has no query "
                f"{query!r} (registered: {known})"
            )
        try:
            return await self._call_handler("query", query, handler, *args, **kwargs)
        except LockgateError:
            raise
        except Exception as exc:
            raise QueryError(f"query {query!r} of run {self.run_id!r} failed: {exc}") from exc

    async def check(self) -> None:
        """Replay the body against the journal, writing nothing, and raise
        :class:`NonDeterminismError` where the body no longer matches it."""
        token = bind_attempt(self)
        try:
            await self.spec.body(WorkflowContext(self), **self.params)
        except Abort as abort:
            if isinstance(abort.error, NonDeterminismError):
                raise abort.error from None
        except (Unwind, Exception):
            pass  # the end of the journal, or the body's own recorded failure
        finally:
            unbind_attempt(token)
        if self.state.terminal is not None and self.state.terminal.kind == EventKind.RUN_COMPLETE:
            try:
                self._check_body_reached_journal_end()
            except Abort as abort:
                raise abort.error from None

    def _check_body_reached_journal_end(self) -> None:
        """A body that returns before the calls its journal records has changed."""
        extra = sorted(i for i in self.state.calls if i >= self.call_index)
        if extra:
            record = self.state.calls[extra[0]]
            raise Abort(
                NonDeterminismError(
                    f"the journal of run {self.run_id!r} records {record.fingerprint} at call "
                    f"{record.call_index}, which the body no longer makes",
                    call_index=record.call_index,
                    expected=record.fingerprint,
                    actual="(the body returned)",
                )
            )


async def check_replay(workflow: Callable[..., Any], events: list[RunEvent]) -> ReplayState:
    """Replay ``events`` (a run's journal) through ``workflow``'s current body, writing nothing.

    Returns the folded journal when the body still makes the calls the journal records; raises
    :class:`NonDeterminismError` naming the first call position where it does not, and
    :class:`JournalNeedsNewerRuntime` for a journal this runtime cannot read. Run it in CI over
    journals of real runs before deploying a changed body.
    """
    from lockgate.stores.memory._store import MemoryStore

    spec = spec_of(workflow)
    run_id = events[0].run_id if events else ""
    attempt = Attempt(
        store=MemoryStore(),
        spec=spec,
        run_id=run_id,
        lease=None,
        clock=SystemClock(),
        events=events,
        mode="query",
    )
    await attempt.check()
    return attempt.state
