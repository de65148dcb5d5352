"""Running workflows inside the caller's own process: for tests, scripts and embedding."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from lockgate._clock import Clock, as_clock
from lockgate._errors import (
    ConfigurationError,
    RunFinishedError,
    RunGatedError,
    RunOwnedError,
)
from lockgate.attempt._attempt import Attempt
from lockgate.attempt._unwind import AttemptOutcome
from lockgate.client._client import WorkflowClient
from lockgate.client._handle import RunHandle
from lockgate.client._interrupts import await_result
from lockgate.journal._events import RunEvent, RunStatus
from lockgate.journal._replay import reconstruct_state
from lockgate.runs._chains import tail_info
from lockgate.runs._family import open_children
from lockgate.stores._base import Store
from lockgate.stores._calls import call_store
from lockgate.workflow._spec import WorkflowSpec, get_workflow, spec_of, trigger_policy

if TYPE_CHECKING:
    from lockgate.client._interrupts import InterruptHandler

log = logging.getLogger("lockgate.inline")

GATE_TIMEOUT_S = 300.0
#: A run kept waiting this long by a gate or another holder is logged once, naming why.
GATE_LOG_AFTER_S = 10.0
GATE_POLL_S = 0.05
TRIGGER_BATCH = 100


class _InlineClient(WorkflowClient):
    """A client whose waits drive the run in this process instead of waiting for a worker."""

    def __init__(self, runner: InlineWorkflowRunner, store: Store, clock: Clock) -> None:
        super().__init__(store, clock=clock)
        self._runner = runner

    async def _advance(self, name: str, run_id: str) -> None:
        await self._runner.advance(name, run_id, poll_interval=self.poll_interval)


class InlineWorkflowRunner:
    """Runs workflows in the caller's process against any store, one attempt at a time.

    ``run`` and ``run_next`` advance a run by one attempt; ``client`` is a client whose
    ``result`` and ``update`` drive runs here until they end. With
    ``reject_continue_as_new`` a body calling ``ctx.continue_as_new`` fails its run instead
    (for a test that must see one run do all its work). Time comes from ``clock``: give it
    the store's clock so leases, sleeps and timers agree.
    """

    def __init__(
        self,
        *,
        store: Store,
        workflows: Sequence[Callable[..., Any]] = (),
        worker_id: str | None = None,
        clock: Clock | None = None,
        gate_timeout: float | None = GATE_TIMEOUT_S,
        reject_continue_as_new: bool = False,
    ) -> None:
        self.store = store
        self.reject_continue_as_new = reject_continue_as_new
        self.worker_id = worker_id or f"inline-{uuid.uuid4().hex[:8]}"
        self.clock = as_clock(clock)
        self.gate_timeout = gate_timeout
        self._specs: dict[str, WorkflowSpec] = {}
        for fn in workflows:
            spec = spec_of(fn)
            self._specs[spec.name] = spec
        self.client: WorkflowClient = _InlineClient(self, store, self.clock)
        self._started = False
        self._closed = False

    def _spec(self, name: str) -> WorkflowSpec:
        spec = self._specs.get(name) or get_workflow(name)
        if spec is None or spec.fn is None:
            raise ConfigurationError(f"workflow {name!r} is not imported in this process")
        return spec

    def _lease(self) -> str:
        return f"{self.worker_id}/{uuid.uuid4().hex[:12]}"

    async def _io(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return await call_store(self.store, method, *args, **kwargs)

    async def start(self) -> None:
        """Ready the runner. Idempotent; ``run`` calls it on first use."""
        if self._closed:
            raise RuntimeError("this InlineWorkflowRunner was closed")
        self._started = True

    async def aclose(self) -> None:
        self._closed = True

    async def _attempt(
        self, spec: WorkflowSpec, run_id: str, lease: str, leased_at: float
    ) -> AttemptOutcome:
        events = await self._io(self.store.load_run, spec.name, run_id)
        attempt = Attempt(
            store=self.store,
            spec=spec,
            run_id=run_id,
            lease=lease,
            clock=self.clock,
            events=events,
            leased_at=leased_at,
        )
        attempt.reject_continue_as_new = self.reject_continue_as_new
        return await attempt.execute()

    async def run(
        self, name: str, run_id: str, *, lease: str | None = None
    ) -> list[RunEvent] | None:
        """Advance ``run_id`` by one attempt here and return its journal.

        The run passes its gates as a worker's claim does: while its ``Limit`` has no free
        slot or its ``Rate`` no token, or another live lease holds it, this waits (logging once
        after ten seconds, naming why), up to ``gate_timeout`` seconds (then
        :class:`RunGatedError`; None waits without limit). A run that has already ended is
        returned as it is. Every gated run submitted to an inline runner has to be driven:
        one waiting for a slot holds its place until it is run or cancelled."""
        await self.start()
        spec = self._spec(name)
        lease = lease or self._lease()
        waited_since = self.clock()
        logged = False
        while True:
            asked_at = self.clock()
            try:
                await self._io(self.store.claim_run, name, run_id, lease)
                break
            except RunFinishedError:
                return await self._io(self.store.load_run, name, run_id)  # type: ignore[no-any-return]
            except (RunOwnedError, RunGatedError) as held:
                waited = self.clock() - waited_since
                if waited >= GATE_LOG_AFTER_S and not logged:
                    log.warning("run %s of %s has waited %.0fs: %s", run_id, name, waited, held)
                    logged = True
                if self.gate_timeout is not None and waited >= self.gate_timeout:
                    raise RunGatedError(
                        f"run {run_id!r} of {name!r} could not start within gate_timeout="
                        f"{self.gate_timeout:g}s: {held}"
                    ) from None
                await self.clock.sleep(GATE_POLL_S)
        await self._attempt(spec, run_id, lease, asked_at)
        return await self._io(self.store.load_run, name, run_id)  # type: ignore[no-any-return]

    async def run_next(self, name: str) -> list[RunEvent] | None:
        """Claim the next queued run of ``name`` and advance it one attempt; None if none."""
        await self.start()
        spec = self._spec(name)
        lease = self._lease()
        asked_at = self.clock()
        run_id = await self._io(self.store.claim_next_run, name, lease, spec.version)
        if run_id is None:
            return None
        await self._attempt(spec, run_id, lease, asked_at)
        return await self._io(self.store.load_run, name, run_id)  # type: ignore[no-any-return]

    async def fire_due_timers(self, now: float | None = None, limit: int = 100) -> int:
        """End every wait due by ``now`` (the clock's time by default): wake sleeps and time
        out signal waits, queueing their runs. Returns how many were ended."""
        due_by = self.clock() if now is None else now
        fired = 0
        for name, run_id in await self._io(self.store.get_sleeping_runs, due_by, limit):
            outcome = await self._io(self.store.wake_due, name, run_id, due_by=due_by)
            fired += outcome == "resolved"
        return fired

    async def fire_due_triggers(self, name: str, now: float | None = None) -> list[RunHandle]:
        """Fire every ``Collect`` window and ``Debounce`` quiet period of ``name`` that is due
        by ``now`` (the clock's time by default): submit one run per due key, with its
        buffered events. Returns handles to the runs submitted."""
        spec = self._spec(name)
        due_by = self.clock() if now is None else now
        handles: list[RunHandle] = []
        while True:
            due = await self._io(self.store.due_triggers, name, due_by, TRIGGER_BATCH)
            for key in due:
                run_id = await self._io(
                    self.store.fire_trigger,
                    name,
                    key,
                    policy=trigger_policy(spec, key),
                    due_by=due_by,
                )
                if run_id is not None:
                    handles.append(self.client.handle(name, str(run_id)))
            if len(due) < TRIGGER_BATCH:
                return handles

    async def run_until_idle(self, name: str, *, max_attempts: int = 10_000) -> int:
        """Burst mode: fire due timers and due trigger batches, and run queued runs of
        ``name`` until none is left. Returns how many attempts ran."""
        attempts = 0
        triggered = self._spec(name).trigger is not None
        while attempts < max_attempts:
            await self.fire_due_timers()
            if triggered:
                await self.fire_due_triggers(name)
            if await self.run_next(name) is None:
                return attempts
            attempts += 1
        return attempts

    async def advance(self, name: str, run_id: str, *, poll_interval: float = 0.1) -> None:
        """Move the run on by the one thing it waits for: run it if it is queued, run the
        queued children and fan-out members it waits on (no worker would run them
        otherwise), wait out its timer if it sleeps, or wait a poll interval for a signal,
        another holder, or a timer of one of its children."""
        info = await self._io(self.store.get_run, name, run_id)
        if info is None or info.status.is_terminal:
            return
        if info.status == RunStatus.PENDING:
            await self.run(name, run_id)
            return
        if await self._run_children(name, run_id, {(name, run_id)}):
            return
        due = info.wait.due_at if info.wait is not None else None
        timed = (RunStatus.SLEEPING, RunStatus.SIGNAL_WAITING, RunStatus.INTERRUPTED)
        if info.status in timed and due is not None:
            remaining = due - self.clock()
            if remaining > 0:
                # Poll, rather than sleep to the deadline: a signal, update or cancel may come
                # first and queue the run.
                await self.clock.sleep(min(remaining, poll_interval))
            await self.fire_due_timers()
            return
        await self.clock.sleep(poll_interval)
        await self.fire_due_timers()  # a sleeping child's, say

    async def _run_children(self, name: str, run_id: str, seen: set[tuple[str, str]]) -> bool:
        """Run one attempt of each queued run among the open children of the run (each the
        live end of its chain), and of theirs, whose workflows this process has; True if any
        ran. ``seen`` keeps a family that names itself from being walked twice."""
        events = await self._io(self.store.load_run, name, run_id)
        ran = False
        for ref in open_children(reconstruct_state(events)):
            spec = self._specs.get(ref.name) or get_workflow(ref.name)
            if spec is None or spec.fn is None:
                continue  # not runnable here: a worker that has it runs it
            tail, info = await tail_info(self._io, self.store, ref.name, ref.run_id)
            if (ref.name, tail) in seen or info is None or info.status.is_terminal:
                continue
            seen.add((ref.name, tail))
            if info.status == RunStatus.PENDING:
                await self.run(ref.name, tail)
                ran = True
            else:
                ran = await self._run_children(ref.name, tail, seen) or ran
        return ran


async def run_and_await(
    store: Store,
    name: str,
    params: dict[str, Any] | None = None,
    *,
    idempotency_key: str,
    owner: str | None = None,
    on_interrupt: InterruptHandler | None = None,
    poll_interval: float = 0.5,
    timeout: float | None = None,
    suspend_on: tuple[type[BaseException], ...] = (),
    clock: Clock | None = None,
) -> Any:
    """Submit ``name`` as the run ``idempotency_key`` (the key is also its run id) and await
    its result from whichever worker executes it. Calling again with the same key and params
    re-attaches to the same run instead of starting another. Must not be awaited inside the
    worker that executes ``name``: it waits on the store for someone else to run it.

    Raises as :meth:`WorkflowClient.result` does: :class:`DurableInvocationCancelled`,
    :class:`DurableInvocationError`, :class:`DurableInvocationTimeout`, and
    :class:`DurableInterrupt` when the run waits on ``ctx.interrupt`` with no
    ``on_interrupt`` handler. A handler is called with each question's payload and its return
    value answers it (an :class:`InterruptResponse` chooses the action; anything else is the
    value of a ``respond``). A handler that raises, or answers with an action the question
    does not take, fails the run's question with code ``interrupt_handler_failed`` (raised
    in the body by ``ctx.interrupt``; uncaught, the run ends in error with that code) and its
    exception propagates, unless it is a :class:`DurableInterrupt` or an instance of one of
    ``suspend_on``: those leave the run parked on the question, for the caller to resume."""
    if not isinstance(suspend_on, tuple) or not all(
        isinstance(kind, type) and issubclass(kind, BaseException) for kind in suspend_on
    ):
        raise TypeError("suspend_on must be a tuple of exception classes")
    client = WorkflowClient(store, poll_interval=poll_interval, clock=clock)
    handle = await client.submit(
        name, params, idempotency_key=idempotency_key, owner=owner, run_id=idempotency_key
    )
    return await await_result(
        client,
        name,
        handle.run_id,
        timeout=timeout,
        on_interrupt=on_interrupt,
        suspend_on=suspend_on,
    )
