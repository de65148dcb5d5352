"""What a workflow body sees: :class:`WorkflowContext`, whose calls reach the attempt running
the body through the :class:`~lockgate.workflow._runtime.Runtime` protocol (implemented by
``attempt.Attempt``), after checking their arguments here."""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, NoReturn

from lockgate._errors import ConfigurationError, UnboundContextError
from lockgate.stores._types import INTERRUPT_SIGNAL_PREFIX
from lockgate.workflow._interrupt import check_question
from lockgate.workflow._record import RECORD_METADATA, KafkaRecord
from lockgate.workflow._runtime import Runtime, bound_attempt
from lockgate.workflow._step import step_spec_for
from lockgate.workflow._targets import check_signal, child_target, stream_name, target_name

if TYPE_CHECKING:
    from lockgate.workflow._interrupt import Expects, InterruptResponse
    from lockgate.workflow._retry import RetryPolicy
    from lockgate.workflow._source import Batch, Source, StreamProgress


def _seconds(what: str, duration: object) -> float:
    """A duration in seconds, refusing what would park a run for ever or make no sense."""
    seconds = duration.total_seconds() if isinstance(duration, timedelta) else duration
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise TypeError(f"{what} takes seconds or a timedelta, not {duration!r}")
    if not math.isfinite(seconds):
        raise ValueError(f"{what} must be a finite number of seconds, got {duration!r}")
    return float(seconds)


class WorkflowContext:
    """The durable context a workflow body receives first.

    Everything that must come out the same on replay goes through it: step results, time,
    randomness, sleeps and signals. Each call is journaled at its call position; on replay the
    journaled value is returned instead of running it again.
    """

    __slots__ = ("_attempt",)

    def __init__(self, attempt: Runtime) -> None:
        self._attempt = attempt

    def _bound(self, operation: str, name: str) -> Runtime:
        attempt = bound_attempt(operation, name)
        if attempt is not self._attempt:
            raise UnboundContextError(
                f"{operation} {name!r}: this context belongs to run "
                f"{self._attempt.run_id!r}, not the one running here"
            )
        return attempt

    @property
    def run_id(self) -> str:
        return self._attempt.run_id

    @property
    def name(self) -> str:
        return self._attempt.spec.name

    @property
    def params(self) -> dict[str, Any]:
        return dict(self._attempt.params)

    @property
    def metadata(self) -> dict[str, Any]:
        return dict(self._attempt.metadata)

    @property
    def record(self) -> KafkaRecord[Any]:
        """The Kafka record this run was started for, in a workflow bound to a topic
        (``@workflow(topic=...)``): its topic, partition, offset, key, timestamp and headers,
        and its decoded ``value`` (the body's ``value`` parameter too). Raises
        :class:`ConfigurationError` in a run that no record started."""
        meta = self._attempt.metadata.get(RECORD_METADATA)
        if not isinstance(meta, dict):
            raise ConfigurationError(
                f"run {self.run_id!r} of {self.name!r} was not started by a Kafka record: "
                f"ctx.record is for workflows bound to a topic (@workflow(topic=...))"
            )
        return KafkaRecord.from_metadata(meta, self._attempt.params.get("value"))

    async def step(
        self,
        fn: Callable[..., Any],
        /,
        *args: Any,
        name: str | None = None,
        retry: Any = None,
        **kwargs: Any,
    ) -> Any:
        """Run ``fn(*args, **kwargs)`` as a journaled step (sync or async callable)."""
        spec = step_spec_for(fn, name=name, retry=retry)
        return await self._bound("step", spec.name).run_step(spec, args, kwargs)

    async def sleep(self, duration: float | timedelta) -> None:
        """Sleep durably: the run parks, holding no worker or slot, and resumes after."""
        seconds = _seconds("ctx.sleep", duration)
        await self._bound("sleep", "sleep").sleep(seconds)

    async def wait_for_signal(self, name: str, timeout: float | timedelta | None = None) -> Any:
        """Wait for the signal ``name`` and return its payload. A signal sent earlier was
        buffered and is returned at once. Raises :class:`WaitTimeout` at the deadline."""
        if not isinstance(name, str) or not name:
            raise TypeError(f"ctx.wait_for_signal needs a signal name, not {name!r}")
        if name.startswith(INTERRUPT_SIGNAL_PREFIX):
            raise ValueError(f"signal name {name!r} is reserved for the answers of ctx.interrupt")
        seconds = None if timeout is None else _seconds("ctx.wait_for_signal timeout", timeout)
        return await self._bound("wait_for_signal", name).wait_for_signal(name, seconds)

    async def continue_as_new(self, params: dict[str, Any] | None = None) -> NoReturn:
        """End this run and carry its work on in a new run of the same workflow with
        ``params``, in one store step: the run ends ``run:continued``, and the successor
        (params checked and gates stamped as at submit) takes over its buffered signals,
        pending updates and a latched cancel or pause. Callers keep the id they hold: status,
        result, signals and the rest follow the chain to its live run. Never returns."""
        await self._bound("continue_as_new", self.name).continue_as_new(dict(params or {}))

    async def interrupt(
        self,
        payload: dict[str, Any],
        /,
        *,
        expects: Expects = "approval",
        timeout: float | timedelta | None = None,
    ) -> InterruptResponse:
        """Ask a person ``payload`` (a JSON dict describing the question) and park the run,
        holding no worker or slot, until ``client.resume`` answers it; return the answer.

        ``expects`` says what kind of answer it takes, and so which actions
        (:class:`InterruptAction`): ``approval`` (approve or reject), ``choice``, ``text`` or
        ``value`` (respond, with the answer as the value), ``edit`` (approve, reject, or edit
        with the edited proposal as the value). An answer sent before the run parks is kept
        for it. The run reads ``interrupted`` while it waits. Raises :class:`WaitTimeout` at
        the deadline ``timeout`` sets, and :class:`InterruptHandlerFailed` when the caller's
        ``on_interrupt`` handler could not answer."""
        question = check_question(payload, expects)
        seconds = None if timeout is None else _seconds("ctx.interrupt timeout", timeout)
        return await self._bound("interrupt", "interrupt").interrupt(question, expects, seconds)

    def on_query(self, name: str, fn: Callable[..., Any]) -> None:
        """Serve ``client.query(name, ...)`` with ``fn`` from the run's replayed state."""
        self._attempt.register_query(name, fn)

    def on_update(
        self, name: str, fn: Callable[..., Any], validator: Callable[..., Any] | None = None
    ) -> None:
        """Apply ``client.update(name, payload)`` with ``fn(payload)``; ``validator(payload)``
        may raise to reject it before it enters the journal."""
        self._attempt.register_update(name, fn, validator)

    async def emit(self, kind: str, payload: dict[str, Any]) -> None:
        """Journal a custom event of ``kind`` once, visible in ``client.events``."""
        await self._bound("emit", kind).emit(kind, payload)

    def now(self) -> datetime:
        """The current time, journaled: a replay returns the same instant."""
        return self._bound("now", "now").now()

    def uuid4(self) -> uuid.UUID:
        """A random UUID, journaled."""
        return self._bound("uuid4", "uuid4").uuid4()

    def random(self) -> float:
        """A random float in [0, 1), journaled."""
        return self._bound("random", "random").random()

    async def consume(
        self,
        source: Source[Any],
        handler: Callable[[Batch[Any]], Any],
        /,
        *,
        name: str | None = None,
        max_batches: int | None = None,
        poll_timeout: float = 1.0,
        retry: RetryPolicy | None = None,
    ) -> StreamProgress:
        """Read ``source`` in batches, handing each to ``handler(batch)`` (sync or async) in a
        journaled step, until ``max_batches`` were handled or a poll finds nothing within
        ``poll_timeout`` seconds. Each batch is committed to the source once its step's
        outcome is durable; a resumed run seeks the source past every batch already handled,
        so each batch is journaled once (its handler may run again if the run dies while it
        is in flight). ``name`` (the source's id by default) names the stream in the
        journal; ``retry`` retries a failing poll or handler. Returns what was handled."""
        stream = stream_name(source, name)
        return await self._bound("consume", stream).consume(
            source,
            handler,
            name=stream,
            max_batches=max_batches,
            poll_timeout=poll_timeout,
            retry=retry,
        )

    async def run_child(
        self,
        workflow: Callable[..., Any] | str,
        params: dict[str, Any] | None = None,
        *,
        run_id: str | None = None,
        parent_close: str = "cancel",
        timeout: float | timedelta | None = None,
    ) -> Any:
        """Start ``workflow`` (a ``@workflow`` function or its name) as a child run with
        ``params`` and return its result. The submit is journaled once; while the child runs
        this run is parked, holding no worker slot. The child's id is ``run_id``, else
        ``{this run's id}.child{call position}``. ``parent_close`` says what becomes of the
        child if this run ends first: ``"cancel"`` asks it to cancel (``terminate`` of this
        run terminates it), ``"abandon"`` leaves it running. Raises
        :class:`ChildWorkflowError` when the child fails, is cancelled or terminated, or
        (status ``timed_out``) is still running ``timeout`` after it was started: it is
        terminated then."""
        name, _ = child_target("ctx.run_child", workflow)
        return await self._bound("run_child", name).run_child(
            workflow,
            params,
            run_id=run_id,
            parent_close=parent_close,
            timeout=timeout,
        )

    async def fan_out(
        self,
        target: Callable[..., Any] | str,
        items: Iterable[Any],
        /,
        *,
        max_in_flight: int = 50,
        parent_close: str = "cancel",
    ) -> list[Any]:
        """Run ``target`` once per item and return the results in item order. A ``@workflow``
        function (or a workflow's name) starts one child run per item, the item being its
        params; any other callable runs as a step per item, the item its one argument. At most
        ``max_in_flight`` members run at once. Each member's start and outcome is journaled,
        so a replay starts nothing twice and runs no finished member again. The first member
        to fail (lowest item index among those found failed together) raises: a child's
        :class:`ChildWorkflowError`, a step's own error; members still running are then
        cancelled (children with ``parent_close="cancel"``) or dropped (steps)."""
        return await self._bound("fan_out", target_name(target)).fan_out(
            target,
            items,
            max_in_flight=max_in_flight,
            parent_close=parent_close,
        )

    async def signal(
        self,
        workflow: Callable[..., Any] | str,
        run_id: str,
        signal: str,
        payload: dict[str, Any] | None = None,
    ) -> str:
        """Send ``signal`` with ``payload`` to the run ``run_id`` of ``workflow`` (a
        ``@workflow`` function or its name), once: the send is keyed by this run and call
        position, so a replay after a crash does not send it again. Returns what
        ``client.signal`` does (``"delivered"``, ``"buffered"``, or ``"duplicate"`` for a send
        a crashed attempt had made); raises :class:`RunFinishedError` when the target has
        ended, :class:`RunNotFoundError` for no such run (both journaled: a replay raises
        them again)."""
        name, payload = check_signal(workflow, run_id, signal, payload)
        return await self._bound("signal", signal).signal(name, run_id, signal, payload)
