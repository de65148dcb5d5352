"""The journal-facing half of an attempt: store access, buffered fenced appends, call
positions, run controls, parking, and the update and query handlers a body registers."""

from __future__ import annotations

import asyncio
import inspect
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, Literal, TypeVar

from lockgate import _failpoints as failpoints
from lockgate._clock import Clock
from lockgate._errors import (
    LockgateError,
    LockLost,
    NonDeterminismError,
    PayloadTooLarge,
    StoreFault,
    StoreUnavailable,
    UpdateError,
    describe_error,
)
from lockgate.attempt._unwind import (
    Abort,
    Cancelled,
    HandedBack,
    LeaseLost,
    ReplayExhausted,
    StoreFailed,
    Suspend,
    describe_with_args,
)
from lockgate.journal._events import STEP_SECONDS_HEADER, EventKind, RunEvent, payload_size
from lockgate.journal._replay import CallRecord, is_final, reconstruct_state
from lockgate.stores._base import Store
from lockgate.stores._calls import call_store
from lockgate.stores._types import RunControls, WaitOutcome, WaitSpec
from lockgate.workflow._retry import RetryPolicy
from lockgate.workflow._runtime import enter_boundary, exit_boundary
from lockgate.workflow._spec import WorkflowSpec, json_ready

T = TypeVar("T")


class AttemptCore:
    """State and journal plumbing shared by every durable operation of an attempt."""

    #: Set by a runner that refuses ``ctx.continue_as_new``: the run ends in error instead.
    reject_continue_as_new: bool = False

    def __init__(
        self,
        *,
        store: Store,
        spec: WorkflowSpec,
        run_id: str,
        lease: str | None,
        clock: Clock,
        events: list[RunEvent],
        mode: Literal["live", "query"] = "live",
        event_buffer_size: int = 64,
        step_boundary_durability: bool = True,
        should_stop: Callable[[], bool] = lambda: False,
        controls: RunControls | None = None,
        leased_at: float | None = None,
    ) -> None:
        self.store = store
        self.event_buffer_size = max(1, event_buffer_size)
        self.step_boundary_durability = step_boundary_durability
        self.should_stop = should_stop
        self.spec = spec
        self.run_id = run_id
        self.lease = lease
        self.clock = clock
        self.mode = mode
        self.state = reconstruct_state(events)
        self.params = self.state.params
        metadata = self.state.init.get("metadata")
        self.metadata: dict[str, Any] = dict(metadata) if isinstance(metadata, dict) else {}
        self.call_index = 0
        self.event_count = len(events)
        self.queries: dict[str, Callable[..., Any]] = {}
        self.updates: dict[str, tuple[Callable[..., Any], Callable[..., Any] | None]] = {}
        #: Per stream name, where each partition stands after the batches handled so far in
        #: the run (``ctx.consume``, see ``_stream``).
        self.stream_positions: dict[str, dict[tuple[str, int], int]] = {}
        self.buffer: list[RunEvent] = []
        self._has_updates = "updates" in store.capabilities()
        # A store that keeps only so many events of a run lowers the cap to that, so a run ends
        # with stream:overflow instead of replaying a cut-off journal.
        kept = getattr(store, "max_replay_entries", None)
        room = kept - 2 if isinstance(kept, int) else None  # stream:overflow and the terminal
        caps = [c for c in (spec.max_event_count_per_run, room) if isinstance(c, int)]
        self.event_cap: int | None = min(caps) if caps else None
        self._cancel_seen = False
        self._cancel_raised = False
        self._parked = False
        # Controls read at the attempt's start (by its claim, when the store reads them with
        # it) or by its last append, reused by its next live boundary: only the body's own
        # plain code runs in between, so one read serves both.
        self.fresh_controls: RunControls | None = controls
        self._lease_lost = False
        # Set while a write that ends the run is in flight: the store drops the lock with the
        # terminal, so a heartbeat then finding no lock is no loss, and the write itself says
        # (LockLost) if the lease was lost before it.
        self._ending = False
        # Set when the heartbeat stopped the body because no heartbeat got through for a
        # whole lease: the failure, for the attempt to put the run back with.
        self._store_lost: Exception | None = None
        #: Whether the attempt, after the store failed under it, put its run back itself
        #: (else whoever runs it keeps trying while the store stays away).
        self.put_back = False
        self.task: asyncio.Task[Any] | None = None
        # The attempt's own view of its lease: ``lock_ttl`` from before the claim was asked
        # for, renewed from before each heartbeat that succeeded. Past it, the attempt writes
        # nothing more, whatever the store would still accept.
        ttl = getattr(store, "lock_ttl", None)
        self._lease_ttl: float | None = float(ttl) if isinstance(ttl, int | float) else None
        self._lease_until = (leased_at if leased_at is not None else clock()) + (
            self._lease_ttl or 0.0
        )

    # -- store access --------------------------------------------------------------------------

    def lease_renewed(self, asked_at: float) -> None:
        """A heartbeat sent at ``asked_at`` (on the attempt's clock) succeeded."""
        if self._lease_ttl is not None:
            self._lease_until = max(self._lease_until, asked_at + self._lease_ttl)

    def lease_lapsed(self) -> bool:
        """Whether a whole lease passed, on the attempt's clock, without a heartbeat that
        succeeded: another worker may hold the run now."""
        return (
            self.lease is not None
            and self._lease_ttl is not None
            and self.clock() >= self._lease_until
        )

    async def io(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if self.lease_lapsed():
            # No heartbeat got through for a whole lease: the store was unreachable (or this
            # process stalled). Nothing more is written for the body; the run goes back (as
            # store_unavailable) once the store answers, unless someone took it since.
            raise StoreFailed(
                StoreUnavailable(
                    f"no heartbeat of run {self.run_id!r} got through for a whole lease (the "
                    f"store unreachable, or this process stalled)"
                )
            )
        try:
            return await call_store(self.store, method, *args, **kwargs)
        except LockLost as exc:
            raise LeaseLost() from exc
        except StoreFault as exc:
            # Not the body's to catch: the attempt unwinds, and a file gone stops the worker.
            raise StoreFailed(exc) from exc
        except LockgateError:
            raise
        except Exception as exc:
            raise StoreFailed(exc) from exc

    def new_event(
        self, kind: str, payload: dict[str, Any], headers: dict[str, str] | None = None
    ) -> RunEvent:
        return RunEvent(kind=kind, payload=payload, run_id=self.run_id, headers=headers or {})

    def record_event(
        self,
        kind: str,
        payload: dict[str, Any],
        headers: dict[str, str] | None = None,
        *,
        size: int | None = None,
        what: str | None = None,
    ) -> None:
        """Buffer an event for the next fenced append, within the workflow's caps.

        ``size`` is the payload's JSON size when the caller measured it already (a step
        result), and ``what`` names the payload in the error when it is over the cap."""
        cap = self.event_cap
        if cap is not None and self.event_count + 1 > cap:
            raise Abort(
                LockgateError(
                    f"run has {self.event_count} events, the cap of max_event_count_per_run={cap}"
                ),
                overflow=True,
            )
        limit = self.spec.max_event_payload_bytes
        if limit is not None:
            size = payload_size(payload) if size is None else size
        if limit is not None and size is not None and size > limit:
            raise Abort(
                PayloadTooLarge(
                    f"{what or kind + ' payload'} is {size} bytes, over "
                    f"max_event_payload_bytes={limit}",
                    what=what or kind,
                    size=size,
                    limit=limit,
                )
            )
        self.buffer.append(self.new_event(kind, payload, headers))
        self.event_count += 1

    async def step_effect(
        self, name: str, effect: Callable[[], Awaitable[T]]
    ) -> tuple[T, None] | tuple[None, Exception]:
        """Run a step's ``effect`` once, inside the step's boundary (a durable call from it is
        refused) and between the ``before_step_effect`` and ``after_step_effect`` fault points:
        ``(its value, None)``, or ``(None, the exception it raised)``."""
        token = enter_boundary("step", name)
        try:
            failpoints.hit("before_step_effect")
            value = await effect()
            failpoints.hit("after_step_effect")
        except Exception as exc:
            return None, exc
        finally:
            exit_boundary(token)
        return value, None

    async def step_failed(
        self,
        base: dict[str, Any],
        tries: int,
        failure: Exception,
        policy: RetryPolicy,
        *,
        took: dict[str, str] | None = None,
    ) -> int:
        """Journal try ``tries`` of the step ``base`` describes as failed with ``failure``
        (``took``: the try's :func:`step_seconds` header); raise ``failure`` when ``policy``
        retries it no more, else wait out the backoff and return the next try's number."""
        retry = policy.should_retry(tries, failure)
        self.record_event(
            EventKind.STEP_ERROR,
            {**base, "attempt": tries, "final": not retry, "error": describe_with_args(failure)},
            took,
        )
        await self.step_boundary()
        if not retry:
            raise failure
        await self.clock.sleep(policy.backoff_seconds(tries))
        return tries + 1

    async def step_boundary(self) -> None:
        """Around a step's effect: make the buffer durable now when every step boundary must
        be, else only once it holds ``event_buffer_size`` events (a crash may then run steps
        whose outcome was still buffered again)."""
        if self.step_boundary_durability or len(self.buffer) >= self.event_buffer_size:
            await self.flush()

    async def flush(self) -> None:
        """Append the buffer, fenced by the lease. The store answers with the run's controls
        in the same step, and the next boundary uses them: only the body's own plain code
        runs before it."""
        if not self.buffer:
            return
        events, self.buffer = self.buffer, []
        if self.lease is None:
            await self.io(self.store.append_events, self.spec.name, self.run_id, events)
            return
        self.fresh_controls = await self.io(
            self.store.append_and_poll, self.spec.name, self.run_id, events, fence=self.lease
        )
        self._appended(events)

    def _appended(self, events: list[RunEvent]) -> None:
        """``events`` are in the store now."""
        if any(event.kind == EventKind.STEP_DONE for event in events):
            failpoints.hit("after_step_append")

    async def _controls_now(self) -> RunControls:
        """The run's controls: read by the write that makes a step's outcome durable when one
        waits in the buffer (with step-boundary durability), else by a poll."""
        if self.step_boundary_durability and self.buffer and self.lease is not None:
            await self.flush()
            if self.fresh_controls is not None:
                return self.fresh_controls
        return await self.poll()

    # -- call positions and boundaries ---------------------------------------------------------

    def next_call(self, kind: str, name: str) -> tuple[int, CallRecord | None]:
        if self._parked:
            # The run parked and this attempt is unwinding (a ``finally`` in the body): it no
            # longer holds the run, so any further durable call just keeps unwinding.
            raise Suspend()
        index = self.call_index
        self.call_index += 1
        record = self.state.calls.get(index)
        if record is not None and (record.kind != kind or record.name != name):
            raise Abort(
                NonDeterminismError(
                    f"run {self.run_id!r} of {self.spec.name!r} is not deterministic: call "
                    f"{index} is {kind} {name!r} in the body but {record.fingerprint} in the "
                    f"journal",
                    call_index=index,
                    expected=record.fingerprint,
                    actual=f"{kind} {name!r}",
                )
            )
        return index, record

    async def before_call(self, index: int, record: CallRecord | None) -> None:
        await self._replay_updates(index)
        if is_final(record):
            return
        if self.mode == "query":
            raise ReplayExhausted()
        await self._hand_back_if_stopping()
        controls = await self._check_controls(index)
        await self._apply_new_updates(index, controls.updates_pending)

    async def _hand_back_if_stopping(self) -> None:
        """At a live boundary of a worker that is shutting down: journal what is buffered and
        give the run back to the queue, so another worker resumes it from here."""
        if not self.should_stop():
            return
        await self.flush()
        await self.io(self.store.hand_back_run, self.spec.name, self.run_id, self.lease)
        raise HandedBack()

    async def poll(self) -> RunControls:
        controls: RunControls = await self.io(self.store.poll_run, self.spec.name, self.run_id)
        return controls

    async def _check_controls(self, index: int) -> RunControls:
        while True:
            controls, self.fresh_controls = self.fresh_controls or await self._controls_now(), None
            if controls.cancel_requested_at is not None:
                self._cancel_seen = True
                if self._cancel_raised:
                    return controls  # the body is cleaning up after the cancel: let it
                self._cancel_raised = True
                raise Cancelled()
            if controls.pause_requested_at is None:
                return controls
            wait_id = f"pause:{uuid.uuid4().hex[:12]}"
            paused = self.new_event(EventKind.RUN_PAUSED, {"wait_id": wait_id, "call_index": index})
            if await self.park([paused], WaitSpec("pause", wait_id, index)) == WaitOutcome.PARKED:
                raise Suspend()

    async def park(self, events: list[RunEvent], wait: WaitSpec) -> WaitOutcome:
        """Park on ``wait``, appending the buffer and ``events`` with it. On SUPERSEDED nothing
        was written; pending updates are applied so the caller can try again."""
        batch = self.buffer + events
        outcome = WaitOutcome(
            await self.io(
                self.store.park_run,
                self.spec.name,
                self.run_id,
                lease=self.lease,
                events=batch,
                wait=wait,
            )
        )
        if outcome == WaitOutcome.PARKED:
            self._appended(batch)
            self.buffer = []
            self.event_count += len(events)
            self._parked = True
            return outcome
        controls = await self.poll()
        await self._apply_new_updates(wait.call_index, controls.updates_pending)
        if controls.cancel_requested_at is not None:
            # A run with a latched cancel cannot park, not even to clean up: it ends here.
            self._cancel_seen = self._cancel_raised = True
            raise Cancelled()
        return WaitOutcome.SUPERSEDED

    # -- updates and queries -------------------------------------------------------------------

    def register_query(self, name: str, fn: Callable[..., Any]) -> None:
        if not callable(fn):
            raise TypeError(f"query handler {name!r} must be callable")
        self.queries[name] = fn

    def register_update(
        self, name: str, fn: Callable[..., Any], validator: Callable[..., Any] | None
    ) -> None:
        if not callable(fn) or (validator is not None and not callable(validator)):
            raise TypeError(f"update handler and validator of {name!r} must be callable")
        self.updates[name] = (fn, validator)

    async def _call_handler(
        self, kind: str, name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> Any:
        token = enter_boundary(kind, name)
        try:
            result = fn(*args, **kwargs)
            if inspect.isawaitable(result):
                result = await result
            return result
        finally:
            exit_boundary(token)

    async def _apply_update(self, update: dict[str, Any]) -> dict[str, Any]:
        handler = self.updates.get(str(update["update"]))
        if handler is None:
            return {
                "status": "failed",
                "error": describe_error(
                    UpdateError(f"run {self.run_id!r} has no update handler {update['update']!r}")
                ),
            }
        try:
            result = await self._call_handler(
                "update", str(update["update"]), handler[0], update.get("payload")
            )
        except Exception as exc:
            return {"status": "failed", "error": describe_error(exc)}
        if not json_ready(result):
            return {
                "status": "failed",
                "error": describe_error(
                    UpdateError(
                        f"update {update['update']!r} returned a value that is not "
                        "JSON-serializable"
                    )
                ),
            }
        return {"status": "completed", "result": result}

    async def settle(self, update_id: str, outcome: dict[str, Any]) -> None:
        await self.io(
            self.store.settle_update,
            self.spec.name,
            self.run_id,
            update_id,
            outcome,
            fence=self.lease,
        )

    async def _journal_outcome(self, update_id: str, outcome: dict[str, Any]) -> None:
        kind = (
            EventKind.RUN_UPDATE_COMPLETED
            if outcome["status"] == "completed"
            else EventKind.RUN_UPDATE_FAILED
        )
        self.record_event(kind, {"update_id": update_id, **outcome})
        self.state.journaled_update_outcomes[update_id] = outcome
        await self.flush()
        await self.settle(update_id, outcome)

    async def _replay_updates(self, frontier: int) -> None:
        for update in self.state.updates_by_frontier.pop(frontier, []):
            outcome = await self._apply_update(update)
            update_id = str(update["update_id"])
            if self.mode == "live" and update_id not in self.state.journaled_update_outcomes:
                await self._journal_outcome(update_id, outcome)

    async def _apply_new_updates(self, frontier: int, pending: bool | None = None) -> None:
        """Apply updates queued for the run at call ``frontier``. ``pending`` is what the last
        poll said (False skips the read; None means look)."""
        if self.mode != "live" or not self._has_updates or pending is False:
            return
        queued = await self.io(self.store.peek_pending_updates, self.spec.name, self.run_id)
        for update in queued:
            update_id = str(update["update_id"])
            if update_id in self.state.journaled_update_ids:
                journaled = self.state.journaled_update_outcomes.get(update_id)
                if journaled is not None:
                    outcome = {k: v for k, v in journaled.items() if k != "update_id"}
                    await self.settle(update_id, outcome)
                continue
            handler = self.updates.get(str(update["update"]))
            if handler is not None and handler[1] is not None:
                try:
                    await self._call_handler(
                        "update validator", str(update["update"]), handler[1], update.get("payload")
                    )
                except Exception as exc:
                    await self.settle(
                        update_id, {"status": "rejected", "error": describe_error(exc)}
                    )
                    continue
            if handler is None:
                await self.settle(update_id, await self._apply_update(update))
                continue
            self.record_event(
                EventKind.RUN_UPDATE_RECEIVED,
                {
                    "update_id": update_id,
                    "update": update["update"],
                    "payload": update.get("payload"),
                    "frontier": frontier,
                },
                size=payload_size(update.get("payload")),
                what=f"payload of update {update['update']!r}",
            )
            self.state.journaled_update_ids.add(update_id)
            await self._journal_outcome(update_id, await self._apply_update(update))


def step_seconds(seconds: float) -> dict[str, str]:
    """The header saying how long a try of a step took (``STEP_SECONDS_HEADER``)."""
    return {STEP_SECONDS_HEADER: f"{max(0.0, seconds):.6f}"}
