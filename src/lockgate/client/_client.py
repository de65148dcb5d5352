"""The caller's side: start runs and talk to them through a store."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from lockgate._clock import Clock, as_clock, iso
from lockgate._errors import (
    CapabilityMissing,
    ConfigurationError,
    QueryError,
    RunFinishedError,
    RunNotFoundError,
    RunNotStartedError,
    UpdateError,
    UpdateRejected,
    UpdateTimeout,
)
from lockgate._names import check_name, check_optional
from lockgate.attempt._attempt import Attempt
from lockgate.client._handle import RunHandle, TerminateResult
from lockgate.client._interrupts import InterruptHandler, await_result
from lockgate.client._trigger_key import trigger_key
from lockgate.journal._events import (
    RunEvent,
    RunStatus,
)
from lockgate.runs._chains import live_run, on_live_run
from lockgate.runs._family import after_terminate
from lockgate.runs._grouping import SubmitGroup
from lockgate.runs._interrupts import resume as answer_interrupt
from lockgate.runs._retry import ExistingRetry, RetryPlan, find_retry, plan_retry, retry_run
from lockgate.runs._signals import send_signal
from lockgate.runs._submit import check_cap, known, submit_run
from lockgate.stores import _notices as notices
from lockgate.stores._base import Store
from lockgate.stores._batch import GroupCommitStore
from lockgate.stores._calls import call_store
from lockgate.stores._gates import WaitReason
from lockgate.stores._types import TerminateOutcome
from lockgate.streams._topics import kafka_journal, trigger_topic
from lockgate.streams.triggers._produce import producer_for
from lockgate.workflow._spec import (
    WorkflowSpec,
    check_text,
    get_workflow,
    json_ready,
    trigger_policy,
)

if TYPE_CHECKING:
    from lockgate.workflow._interrupt import InterruptAction


class WorkflowClient:
    """Start runs and talk to them. Every method is async; store calls that may block run on
    a worker thread. A client never executes a run body: workers and runners do."""

    def __init__(
        self,
        store: Store,
        *,
        poll_interval: float = 0.1,
        clock: Clock | None = None,
        group_submits: bool = False,
    ) -> None:
        """``group_submits`` gathers submits made at once into one store call when the store
        can write them so (SQLite; see ``runs/_grouping.py``): for a process that takes many
        submits concurrently, as ``lockgate serve`` does. Each submit's answer is its own."""
        self.store = store
        self.poll_interval = poll_interval
        self.clock = as_clock(clock)
        self._grouped = group_submits and isinstance(store, GroupCommitStore)
        self._group: tuple[asyncio.AbstractEventLoop, SubmitGroup] | None = None

    def _submit_group(self) -> SubmitGroup | None:
        """This event loop's group of submits (a client may be used from one loop, then
        another), or None for a client that does not group them."""
        if not self._grouped:
            return None
        loop = asyncio.get_running_loop()
        group = self._group
        if group is None or group[0] is not loop:
            group = self._group = (loop, SubmitGroup(self.store))
        return group[1]

    async def _io(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return await call_store(self.store, method, *args, **kwargs)

    async def _advance(self, name: str, run_id: str) -> None:
        """Wait for the run to move: a runner-bound client drives it here instead."""
        await self.clock.sleep(self.poll_interval)

    # -- starting ------------------------------------------------------------------------------

    async def submit(
        self,
        name: str,
        params: dict[str, Any] | None = None,
        *,
        idempotency_key: str | None = None,
        owner: str | None = None,
        metadata: dict[str, Any] | None = None,
        allow_unregistered: bool = True,
        start_at: datetime | None = None,
        delay: float | timedelta | None = None,
        run_id: str | None = None,
    ) -> RunHandle:
        """Queue a run of ``name`` and return its handle.

        Params are checked against the workflow's signature when it is imported here; a bad
        submit raises (:class:`InvalidParamsError`, :class:`PayloadTooLarge`, ``ValueError``)
        and queues nothing. With ``idempotency_key`` a repeat of the same request returns the
        first run; the same key with other params or timing raises
        :class:`IdempotencyConflict`. ``start_at`` or ``delay`` parks the run until then.
        ``run_id`` names the run (a random id otherwise); a taken id raises
        :class:`DuplicateRunError` unless the idempotency key already maps to it. A name, id
        or key the naming rules refuse raises :class:`InvalidNameError` (see docs/concepts.md).
        """
        run_id = await submit_run(
            self.store,
            self.clock,
            name,
            params,
            idempotency_key=idempotency_key,
            owner=owner,
            metadata=metadata,
            allow_unregistered=allow_unregistered,
            start_at=start_at,
            delay=delay,
            run_id=run_id,
            group=self._submit_group(),
        )
        return RunHandle(self, name, run_id)

    async def retry(self, name: str, run_id: str) -> RunHandle:
        """Start a new run that carries on from where the run ``run_id`` stopped, when it
        ended without completing (in error, cancelled or terminated). It is created with the
        calls the failed run finished before its failure journaled (served, not run again),
        and runs the failed step and what follows live; see ``runs/_retry.py``. Its id is
        ``{first id}.retry{n}``, so retrying again returns the same run. The failed run is
        left as it is. Raises :class:`RetryRefused` for a run still going, completed or
        handed on, :class:`RunNotFoundError` for no such run, and
        :class:`DuplicateRunError` when the retry's id belongs to another run."""
        retry_id = await retry_run(self.store, name, run_id, group=self._submit_group())
        return RunHandle(self, name, retry_id)

    async def find_retry(self, name: str, run_id: str) -> ExistingRetry | None:
        """The retry already started for the run ``run_id``, or None. It reads the retry's
        own journal, not the failed run's, so it answers after that run has expired."""
        return await find_retry(self.store, name, run_id)

    async def plan_retry(self, name: str, run_id: str) -> RetryPlan:
        """What :meth:`retry` would carry over and run again, starting nothing."""
        return await plan_retry(self.store, name, run_id)

    async def trigger(
        self, name: str, event: dict[str, Any], *, key: str | None = None
    ) -> RunHandle | None:
        """Send ``event`` to ``name``'s ``Collect`` or ``Debounce`` buffer, under ``key`` or
        else the key the trigger resolves from it. Returns a handle to the run this event
        started by completing a Collect batch, else None: a time-based fire is submitted later
        by a worker's trigger loop (or ``InlineWorkflowRunner.fire_due_triggers``). A workflow
        not imported here takes the trigger its workers recorded. A workflow with no trigger,
        or an event that is not a JSON object, raises and buffers nothing.

        On a store with a Kafka journal the event is produced to the workflow's trigger topic
        instead, and this returns None once Kafka acknowledged it: every fire happens in the
        consumers of the workers serving the workflow (docs/kafka.md, "Trigger topics")."""
        spec, key = await self._trigger_target(name, event, key)
        journal = kafka_journal(self.store)
        if journal is not None:
            topic = trigger_topic(journal.topic_prefix, spec)
            await asyncio.to_thread(producer_for(journal).send, topic, key, event)
            return None
        run_id = await self._io(
            self.store.trigger_event, name, key, event, policy=trigger_policy(spec, key)
        )
        if run_id is None:
            notices.post(self.store, notices.TRIGGERS)  # a worker here may fire it sooner
        return RunHandle(self, name, str(run_id)) if run_id is not None else None

    async def trigger_many(
        self,
        name: str,
        events: Iterable[dict[str, Any]],
        *,
        key: str | None = None,
        progress: Callable[[int], None] | None = None,
        check_only: bool = False,
    ) -> list[RunHandle]:
        """:meth:`trigger` for many events, in order: every event is checked before any is
        sent, so a bad one sends none. ``progress(sent so far)`` is called as they go. On a
        store with a Kafka journal they are produced in batches, each acknowledged before the
        next, and this returns []; else the handles of the runs completed Collect batches
        started. With ``check_only`` the events are checked and none is sent."""
        targets = [(await self._trigger_target(name, event, key), event) for event in events]
        if check_only:
            return []
        journal = kafka_journal(self.store)
        if journal is not None:
            if targets:
                topic = trigger_topic(journal.topic_prefix, targets[0][0][0])
                pairs = [(event_key, event) for (_, event_key), event in targets]
                await asyncio.to_thread(producer_for(journal).send_all, topic, pairs, progress)
            return []
        fired = []
        for sent, ((spec, event_key), event) in enumerate(targets, start=1):
            run_id = await self._io(
                self.store.trigger_event,
                name,
                event_key,
                event,
                policy=trigger_policy(spec, event_key),
            )
            if run_id is not None:
                fired.append(RunHandle(self, name, str(run_id)))
            if progress is not None:
                progress(sent)
        notices.post(self.store, notices.TRIGGERS)
        return fired

    async def _trigger_target(
        self, name: str, event: dict[str, Any], key: str | None
    ) -> tuple[WorkflowSpec, str]:
        """The triggered workflow ``name`` and the key ``event`` goes under, once the event is
        checked: a JSON object within the cap, with a key given or resolvable."""
        spec = await self.triggered_workflow(name)
        return spec, trigger_key(spec, event, key, keyed=kafka_journal(self.store) is not None)

    async def triggered_workflow(self, name: str) -> WorkflowSpec:
        """The ``Collect`` or ``Debounce`` workflow ``name``: as imported here, else as its
        workers recorded it. :class:`ConfigurationError` for a workflow with no trigger."""
        check_name("workflow name", name)
        spec = (await known(self.store, name, get_workflow(name))).trigger_spec()
        if spec is None or spec.trigger is None:
            raise ConfigurationError(
                f"workflow {name!r} has no Collect or Debounce trigger"
                + (
                    ""
                    if spec is not None
                    else " (it is not imported here and no worker serving it recorded its policy)"
                )
            )
        return spec

    def handle(self, name: str, run_id: str) -> RunHandle:
        """A handle to an existing run."""
        return RunHandle(self, name, run_id)

    # -- reading -------------------------------------------------------------------------------

    async def status(self, name: str, run_id: str) -> RunStatus:
        """The run's status now: a run handed on to a successor reports the successor's."""
        return (await live_run(self.store, name, run_id))[1].status

    async def why_waiting(self, name: str, run_id: str) -> str | None:
        """Why a queued run has not started yet, in one line, e.g.
        ``Limit tenant_id="acme" 2/2 running, 7th in line`` or
        ``Rate tenant_id="acme" next token in 0.18s, 1st in line``; None when it is not queued.
        """
        run_id, _ = await live_run(self.store, name, run_id)
        reason = await self._io(self.store.explain_wait, name, run_id)
        if reason is None:
            return None
        assert isinstance(reason, WaitReason)
        return reason.describe(await self._key_param(name, reason.gate))

    async def _key_param(self, name: str, gate: str) -> str | None:
        """The parameter a gate keys on, from the imported workflow or the recorded policy."""
        workflow = await known(self.store, name, get_workflow(name))
        if workflow.spec is not None:
            policy = workflow.spec.concurrency if gate == "limit" else workflow.spec.rate_limit
            key = policy.key if policy is not None else None
            return key if isinstance(key, str) else None
        entry = (workflow.record or {}).get("concurrency" if gate == "limit" else "rate") or {}
        key = entry.get("key") if isinstance(entry, dict) else None
        return key if isinstance(key, str) else None

    async def events(self, name: str, run_id: str) -> list[RunEvent]:
        """The run's own journal, oldest first. A run handed on ends ``run:continued``; the
        work is in its successor's journal, named there."""
        events: list[RunEvent] = await self._io(self.store.load_run, name, run_id)
        if not events:
            raise RunNotFoundError(name, run_id)
        return events

    async def result(
        self,
        name: str,
        run_id: str,
        *,
        timeout: float | None = None,
        on_interrupt: InterruptHandler | None = None,
    ) -> Any:
        """Wait for the run to end and return its result.

        Raises :class:`DurableInvocationError` if it failed, :class:`DurableInvocationCancelled`
        if it was cancelled or terminated, :class:`DurableInvocationTimeout` past ``timeout``
        seconds (on the client's clock), and :class:`DurableInterrupt` (with the question and
        its ``wait_id``) when the run waits on ``ctx.interrupt`` and no ``on_interrupt``
        handler is given. ``on_interrupt(payload)`` (sync or async) answers each question the
        run asks as it waits: an :class:`InterruptResponse` it returns chooses the action,
        any other value is the value of a ``respond``. A handler that raises, or answers with
        an action the question does not take, fails the question (the body's
        ``ctx.interrupt`` raises :class:`InterruptHandlerFailed`) and its exception
        propagates; one that raises :class:`DurableInterrupt` leaves the run waiting."""
        return await await_result(
            self,
            name,
            run_id,
            timeout=timeout,
            on_interrupt=on_interrupt,
            advance=self._advance,
        )

    async def resume(
        self,
        name: str,
        run_id: str,
        action: InterruptAction | str,
        value: Any = None,
        *,
        wait_id: str | None = None,
    ) -> None:
        """Answer the run's ``ctx.interrupt`` with ``action`` (``approve``, ``reject``,
        ``respond`` or ``edit``) and ``value``, and queue the run with the answer.

        ``wait_id`` names the interrupt answered (from :class:`DurableInterrupt`, or ``runs
        show``), so an answer meant for one question never lands on a later one; it defaults
        to the one the run waits on now. An action the question does not take (see
        :class:`InterruptAction`) raises ``ValueError`` and sends nothing. Raises
        :class:`RunNotWaitingError` when the run does not wait on that interrupt: it has
        ended, it never asked it, it reached its deadline, or it was answered already (of
        two answers to one interrupt, the first one the store takes stands), and
        :class:`RunNotFoundError` for an unknown run."""
        await answer_interrupt(self.store, self.clock, name, run_id, action, value, wait_id)

    # -- talking to a run ----------------------------------------------------------------------

    async def signal(
        self,
        name: str,
        run_id: str,
        signal: str,
        payload: dict[str, Any] | None = None,
        *,
        signal_id: str | None = None,
    ) -> str:
        """Send a signal; returns ``"delivered"`` or ``"buffered"``. ``signal_id`` makes a
        retried send apply once: a repeat returns ``"duplicate"`` and keeps nothing (its
        payload is not compared; the first send's stands). Raises :class:`RunFinishedError`
        once the run has ended or a cancel is latched."""
        return await send_signal(
            self.store, self.clock, name, run_id, signal, payload, signal_id=signal_id
        )

    async def query(self, name: str, run_id: str, query: str, *args: Any, **kwargs: Any) -> Any:
        """Call the run's ``ctx.on_query`` handler against its replayed state. Read-only."""
        check_name("query name", query)
        spec = get_workflow(name)
        if spec is None or spec.fn is None:
            raise QueryError(f"workflow {name!r} is not imported here; a query replays its body")
        run_id, _ = await live_run(self.store, name, run_id)
        events = await self.events(name, run_id)
        attempt = Attempt(
            store=self.store,
            spec=spec,
            run_id=run_id,
            lease=None,
            clock=self.clock,
            events=events,
            mode="query",
        )
        return await attempt.query(query, args, kwargs)

    async def update(
        self,
        name: str,
        run_id: str,
        update: str,
        payload: dict[str, Any] | None = None,
        *,
        update_id: str | None = None,
        timeout: float = 30.0,
    ) -> Any:
        """Deliver an update, wait for a worker to apply it, and return the handler's value.

        A repeat with the same ``update_id`` returns the settled outcome without applying it
        again. Raises :class:`UpdateRejected`, :class:`UpdateError`, :class:`UpdateTimeout`,
        :class:`RunFinishedError` or :class:`RunNotStartedError`."""
        check_name("update name", update)
        check_optional("update id", update_id)
        payload = {} if payload is None else payload
        check_text(payload, f"the payload of update {update!r}")
        if not json_ready(payload):
            raise ValueError("an update payload must be JSON-serializable")
        await check_cap(self.store, name, payload, f"payload of update {update!r}")
        run_id, info = await live_run(self.store, name, run_id)
        update_id = update_id or uuid.uuid4().hex
        existing = await self._io(self.store.read_update_result, name, run_id, update_id)
        if existing is None:
            if info.status.is_terminal:
                raise RunFinishedError(f"run {run_id!r} of {name!r} has ended")
            if info.wait is not None and info.wait.kind == "start" and not info.lock_holder:
                raise RunNotStartedError(
                    f"run {run_id!r} of {name!r} starts later; it has no update handlers yet"
                )
            delivered = await self._io(
                self.store.deliver_update,
                name,
                run_id,
                update,
                payload,
                update_id,
                iso(self.clock()),
            )
            if delivered == "rejected":
                if (await live_run(self.store, name, run_id))[0] != run_id:
                    # Handed on in between: deliver to the successor instead.
                    return await self.update(
                        name, run_id, update, payload, update_id=update_id, timeout=timeout
                    )
                raise RunFinishedError(f"run {run_id!r} of {name!r} has ended")
        deadline = self.clock() + timeout
        # The runs the update may be settled on: the one it was delivered to, and each it
        # moved on to with a hand-on or a continue_as_new before it was applied.
        held_by = [run_id]
        while True:
            for holder in held_by:
                outcome = await self._io(self.store.read_update_result, name, holder, update_id)
                if outcome is not None:
                    return _update_outcome(update, update_id, outcome)
            run_id, info = await live_run(self.store, name, run_id)
            if run_id not in held_by:
                held_by.append(run_id)
                continue
            if info.status.is_terminal:
                raise RunFinishedError(
                    f"run {run_id!r} of {name!r} ended before it applied update {update_id!r}"
                )
            if self.clock() >= deadline:
                raise UpdateTimeout(
                    f"no worker applied update {update!r} ({update_id}) to run "
                    f"{run_id!r} within {timeout:g}s; it stays queued"
                )
            await self._advance(name, run_id)

    async def cancel(
        self, name: str, run_id: str, *, reason: str | None = None, requested_by: str | None = None
    ) -> None:
        """Ask the run to stop at its next boundary; it ends cancelled. A parked run is queued
        so a worker writes its terminal. An unknown id raises :class:`RunNotFoundError` (the
        store can hold a cancel for an id not yet submitted; the client does not)."""

        async def cancel(tail: str) -> None:
            await self._io(
                self.store.request_cancel,
                name,
                tail,
                detail={"reason": reason, "requested_by": requested_by},
            )

        await on_live_run(self.store, name, run_id, cancel)

    async def terminate(
        self, name: str, run_id: str, *, reason: str | None = None, requested_by: str | None = None
    ) -> TerminateResult:
        """End the run now, with no worker involved. A holder still running is fenced out.
        Then each open child's ``parent_close`` policy is applied, grandchildren included
        (``runs/_family.py``); a repeat on a run already terminated finishes that."""
        if "terminate" not in self.store.capabilities():
            raise CapabilityMissing(type(self.store).__name__, "terminate")
        if await self._io(self.store.get_run, name, run_id) is None:
            raise RunNotFoundError(name, run_id)

        async def terminate(tail: str) -> tuple[str, TerminateOutcome]:
            outcome = await self._io(
                self.store.terminate_run, name, tail, reason=reason, requested_by=requested_by
            )
            return tail, TerminateOutcome(outcome)

        tail, outcome = await on_live_run(self.store, name, run_id, terminate)
        children, ended = await after_terminate(
            self.store, self.clock, name, tail, outcome, reason, requested_by
        )
        return TerminateResult(outcome=outcome, children=children, run_id=tail, ended=ended)

    async def pause(self, name: str, run_id: str) -> None:
        """Ask the run to park at its next boundary until :meth:`unpause`."""

        async def pause(tail: str) -> None:
            await self._io(self.store.request_pause, name, tail)

        await on_live_run(self.store, name, run_id, pause)

    async def unpause(self, name: str, run_id: str) -> None:
        """Lift a pause and queue the run."""

        async def unpause(tail: str) -> None:
            await self._io(self.store.resume_paused_run, name, tail)

        await on_live_run(self.store, name, run_id, unpause)


def _update_outcome(update: str, update_id: str, outcome: dict[str, Any]) -> Any:
    status = outcome.get("status")
    if status == "completed":
        return outcome.get("result")
    message = str((outcome.get("error") or {}).get("message", ""))
    if status == "rejected":
        raise UpdateRejected(f"update {update!r} ({update_id}) was rejected: {message}")
    raise UpdateError(f"update {update!r} ({update_id}) failed: {message}")
