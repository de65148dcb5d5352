"""What every part of a worker shares: the store and clock, the served workflows, the stop
request they all watch (and the request to stop at once), and what they last found of the
store."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from typing import Any

from lockgate._clock import Clock
from lockgate._errors import LockgateError, StoreFault
from lockgate.metrics import _hooks as metrics
from lockgate.stores._base import Store
from lockgate.stores._calls import call_store, call_store_at
from lockgate.worker._marker import MarkerWatch
from lockgate.worker._options import WorkerOptions
from lockgate.worker._status import StoreState, describe_store
from lockgate.workflow._spec import WorkflowSpec


class StopSignal:
    """A worker's stop request: a flag, and an event its loops wait on.

    :meth:`set` is idempotent and safe from any thread and from a signal handler: it raises the
    flag at once and wakes the waiters through ``call_soon_threadsafe``. Once set it stays set.
    """

    def __init__(self) -> None:
        self._flag = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._event: asyncio.Event | None = None

    @property
    def is_set(self) -> bool:
        return self._flag

    def bind(self) -> None:
        """Attach to the running event loop, so :meth:`set` can wake waiters on it."""
        self._loop = asyncio.get_running_loop()
        self._event = asyncio.Event()
        if self._flag:
            self._event.set()

    def set(self) -> None:
        self._flag = True
        loop, event = self._loop, self._event
        if loop is None or event is None:
            return
        # The loop may be gone (a stop after run() returned): nothing waits any more then.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(event.set)

    async def wait(self) -> None:
        if self._event is None:
            raise RuntimeError("StopSignal.wait() before bind()")
        await self._event.wait()

    async def race(self, awaitable: asyncio.Future[Any]) -> bool:
        """Wait for ``awaitable`` or the stop, whichever comes first; True when the stop did.

        ``awaitable`` is left as it is (done or pending): the caller decides what to do with
        it. The stop wins ties, so a caller never starts new work once stopping."""
        if not self._flag:
            stopped = asyncio.ensure_future(self.wait())
            try:
                await asyncio.wait({awaitable, stopped}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                stopped.cancel()
        return self._flag

    async def sleep(self, clock: Clock, seconds: float) -> bool:
        """Sleep ``seconds`` on ``clock``, cut short by the stop; True when stopping."""
        sleeper = asyncio.ensure_future(clock.sleep(seconds))
        try:
            return await self.race(sleeper)
        finally:
            sleeper.cancel()


class Wakeup:
    """A nudge one loop rests on: :meth:`set`, from any thread, ends the loop's current rest
    early, or its next one if it is not resting (a nudge is never lost, and several before a
    rest count as one)."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._event: asyncio.Event | None = None
        self._early = False

    def set(self) -> None:
        loop, event = self._loop, self._event
        if loop is None or event is None:
            self._early = True
            return
        with contextlib.suppress(RuntimeError):  # the loop is gone: nothing rests on it
            loop.call_soon_threadsafe(event.set)

    async def wait(self) -> None:
        """Until the next nudge (at once if one came since the last wait); consumes it."""
        if self._event is None:
            self._loop, self._event = asyncio.get_running_loop(), asyncio.Event()
            if self._early:
                self._event.set()
        await self._event.wait()
        self._event.clear()


async def wait_all(
    tasks: Collection[asyncio.Future[Any]],
    clock: Clock,
    seconds: float,
    *,
    until: StopSignal | None = None,
) -> None:
    """Wait until every task in ``tasks`` is done, for at most ``seconds`` on ``clock``, and
    no longer than until ``until`` is set."""
    pending = {task for task in tasks if not task.done()}
    if not pending or (until is not None and until.is_set):
        return
    timer = asyncio.ensure_future(clock.sleep(seconds))
    cut = asyncio.ensure_future(until.wait()) if until is not None else timer
    try:
        while pending and not timer.done() and not cut.done():
            await asyncio.wait({*pending, timer, cut}, return_when=asyncio.FIRST_COMPLETED)
            pending = {task for task in pending if not task.done()}
    finally:
        timer.cancel()
        cut.cancel()


@dataclass
class Runtime:
    """The shared state of one worker, handed to each of its parts."""

    store: Store
    clock: Clock
    options: WorkerOptions
    worker_id: str
    specs: dict[str, WorkflowSpec]
    stop: StopSignal = field(default_factory=StopSignal)
    #: Set by a second stop request (a second Ctrl-C): the shutdown waits for nothing more.
    hurry: StopSignal = field(default_factory=StopSignal)
    #: The store's shards this worker leases (see ``lease_shards``); its claims try them first.
    shards: list[int] = field(default_factory=list)
    #: Per triggered workflow, the partitions of its trigger topic (the shards) this worker
    #: owns in the topic's consumer group; its claims of the workflow try them first.
    owned: dict[str, list[int]] = field(default_factory=dict)
    #: Per bound workflow, what is told each run of it this worker finished (its consumer).
    run_ended: dict[str, Callable[[str], None]] = field(default_factory=dict)
    #: When this worker's presence record began to be written without a break (its clock);
    #: None while it is not (``_presence.py``). Set from the presence thread.
    presence_steady_since: float | None = None
    _claims: int = 0
    _leases: int = 0
    _nonce: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    #: Whether the store answers, as this worker's calls last found it.
    store_state: StoreState = field(init=False)
    #: Whether the store still carries its marker (holds its data), as last read.
    marker: MarkerWatch = field(init=False)

    def __post_init__(self) -> None:
        self.store_state = StoreState(describe_store(self.store), self.clock)
        self.marker = MarkerWatch(self.store)

    _wakeups: dict[str, Wakeup] = field(default_factory=dict)

    def wakeup(self, name: str) -> Wakeup:
        """The nudge of the loop called ``name`` (``claim:<workflow>``, or the topic of the
        timer or trigger loop's notices: ``waits``, ``triggers``), made on first use by
        either side."""
        return self._wakeups.setdefault(name, Wakeup())

    async def rest(self, seconds: float, wakeup: Wakeup | None = None) -> bool:
        """Sleep ``seconds`` on the worker's clock, cut short by the stop or by ``wakeup``;
        True when stopping."""
        waits: list[asyncio.Future[None]] = [asyncio.ensure_future(self.clock.sleep(seconds))]
        if wakeup is not None:
            waits.append(asyncio.ensure_future(wakeup.wait()))
        first = asyncio.ensure_future(asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED))
        try:
            return await self.stop.race(first)
        finally:
            first.cancel()
            for pending in waits:
                pending.cancel()

    def prefer(self, name: str | None = None) -> list[int]:
        """The shards a claim of ``name`` tries first: those of the trigger or bound topic
        partitions this worker owns for it, else its leased shards; starting one further along
        at each claim, so no one of them always goes first."""
        shards = (self.owned.get(name) if name is not None else None) or self.shards
        if not shards:
            return []
        self._claims += 1
        turn = self._claims % len(shards)
        return shards[turn:] + shards[:turn]

    async def io(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Call a store method, on a worker thread when the store may block on I/O, and tell
        :attr:`store_state` whether the store answered."""
        with self._reported(method):
            return await call_store(self.store, method, *args, **kwargs)

    async def io_at(
        self, at: float | None, method: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> tuple[Any, float]:
        """:meth:`io`, made right at ``at`` on the worker's clock (None: now; see
        ``call_store_at``): the answer, and the time the call left for the store."""
        with self._reported(method):
            return await call_store_at(self.store, self.clock, at, method, *args, **kwargs)

    @contextlib.contextmanager
    def _reported(self, method: Callable[..., Any]) -> Iterator[None]:
        """Tell :attr:`store_state` how the store call of ``method`` made inside went: a
        refusal is an answer, the store out of reach is not. A file gone is neither: the worker
        stops on it (its loops end), so no outage begins that it would wait out. Either is a
        store error to the metrics."""
        asked_at = self.clock()
        name = getattr(method, "__name__", "call")
        try:
            yield
        except StoreFault as exc:
            if exc.retriable:  # out of reach, for now: an outage the worker waits out
                self.store_state.failed(exc, asked_at, name)
            metrics.store_error(name)
            raise
        except LockgateError:
            self.store_state.answered(asked_at, name)
            raise
        self.store_state.answered(asked_at, name)

    def new_lease(self) -> str:
        """A fresh lease for one claim: this worker's id, then a suffix unique to this process
        and claim (a random nonce drawn once, and a counter), so a lock holder names the worker
        that holds it and no two claims, even of a restarted worker of the same id, share one."""
        self._leases += 1
        return f"{self.worker_id}/{self._nonce}.{self._leases}"

    async def give_back(self, name: str, run_id: str, lease: str) -> None:
        """Return a claim unrun and uncounted, if ``lease`` still holds it. A store without
        the ``hand_back`` group releases it instead, which also queues a run not parked."""
        if "hand_back" in self.store.capabilities():
            await self.io(self.store.hand_back_run, name, run_id, lease)
        else:
            await self.io(self.store.release_run, name, run_id, lease)
