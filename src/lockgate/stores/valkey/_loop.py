"""Valkey operations written once, run from a thread or natively on an event loop.

An operation the worker calls on its hot path (a claim, a fenced append, a terminal, a
heartbeat, ...) is a generator of the requests it sends (:class:`Script`, :class:`Commands`):
it yields one, is sent the server's answer (or has the store's error thrown in), and returns its
result. A store method so written carries :func:`operation`: called, it is driven by
``ValkeyRequests._run`` with the blocking client; the event-loop runtime takes the generator itself
(:func:`operation_of`, through ``Store.coroutine_for``) and ``ValkeyRequests._arun`` drives it with
an asyncio client on the running loop, so the worker's attempts wait on Valkey without a thread
each (a thread hop per call cost more than the call itself).

Asyncio clients belong to one event loop. :class:`LoopClients` keeps one per loop and closes it
when the loop shuts down (``asyncio.run`` closes a loop's async generators first; a small one
per client is the hook), or when the store is closed on that loop.

On one server (not a cluster) the loop's client pipelines automatically (:class:`LoopClient`):
the commands asked for during one pass of the loop (a worker's attempts all reaching the store
at once) go out in pipelines of up to ``pipeline_size``, one write and one read for each, and
each asker gets its own reply or error. Valkey runs them in order, each on its own, exactly as
if they had been sent one by one; only the client's and the server's per-call overhead is
shared.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import AsyncGenerator, Callable, Generator
from dataclasses import dataclass
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

try:
    from redis.exceptions import ResponseError
except ImportError:  # pragma: no cover - the extra is missing; no store is built then
    ResponseError = Exception  # type: ignore[assignment,misc]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Script:
    """Run the store's Lua script ``name`` with ``args`` on ``shard``'s keys (None: the
    namespace-wide ones); answered with the script's reply."""

    name: str
    args: tuple[Any, ...]
    shard: int | None = None


@dataclass(frozen=True, slots=True)
class Commands:
    """Send ``commands`` together (one round trip, no atomicity); answered with the list of
    their replies, in order."""

    commands: tuple[tuple[Any, ...], ...]
    what: str


Request = Script | Commands
#: An operation: yields requests, is sent their answers, returns its result.
Op = Generator[Request, Any, T]
#: Commands waiting to be sent, each with the future its asker awaits.
Batch = list[tuple[tuple[Any, ...], asyncio.Future[Any]]]


class Driver(Protocol):
    """What runs an operation with a blocking client: the Valkey store."""

    def _run(self, op: Op[T]) -> T: ...


S = TypeVar("S", bound=Driver)
P = ParamSpec("P")


def operation(op: Callable[Concatenate[S, P], Op[T]]) -> Callable[Concatenate[S, P], T]:
    """A store method written as an operation: called, it runs ``op`` with the store's
    blocking client (``_run``); :func:`operation_of` hands ``op`` itself to the event-loop
    runtime, which runs it with the loop's client."""

    @functools.wraps(op)
    def blocking(self: S, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return self._run(op(self, *args, **kwargs))

    blocking.__operation__ = op  # type: ignore[attr-defined]
    return blocking


def operation_of(method: Callable[..., Any]) -> Callable[..., Op[Any]] | None:
    """The operation behind a bound store method made with :func:`operation`, else None (a
    method a subclass overrides without one keeps its override)."""
    found: Callable[..., Op[Any]] | None = getattr(
        getattr(method, "__func__", None), "__operation__", None
    )
    return found


def command(*args: Any) -> Commands:
    """One command, as a request (answered with a one-item list)."""
    return Commands((args,), str(args[0]))


class LoopClient:
    """An asyncio client of one event loop, sending commands one by one or, with
    ``pipelined``, gathered into pipelines per pass of the loop."""

    #: The most commands one pipeline carries. More asked at once go as several pipelines,
    #: on as many connections, so the first replies come back (and their askers go on)
    #: while the server still runs the rest: the worker and the server work side by side
    #: instead of in turns.
    pipeline_size = 8

    def __init__(self, client: Any, *, pipelined: bool, timeout: float | None = None) -> None:
        self.client = client
        self._pipelined = pipelined
        #: With ``pipelined``: how long one pipeline may take, written and answered, before
        #: its askers are failed with :class:`TimeoutError` (the client itself is made with no
        #: socket timeout: one deadline per pipeline costs less than one per reply).
        self._timeout = timeout
        self._queue: Batch = []
        self._flush_soon = False
        # The pipelines in flight (held here: the loop keeps only weak references to tasks).
        self._sending: set[asyncio.Task[None]] = set()
        # Connections a pipeline was answered on, kept for the next ones rather than given back
        # to the pool (whose checks on each take cost more than a small pipeline's send). One
        # that breaks goes back to the pool; closing the client closes them all.
        self._idle: list[Any] = []

    async def send(self, *args: Any) -> Any:
        """One command's reply; its error raised."""
        if not self._pipelined:
            return await self.client.execute_command(*args)
        return await self._enqueue(args)

    async def send_all(self, commands: tuple[tuple[Any, ...], ...]) -> list[Any]:
        """The replies of ``commands``, sent together; the first error among them raised."""
        if not self._pipelined:
            pipe = self.client.pipeline(transaction=False)
            for sent in commands:
                pipe.execute_command(*sent)
            return list(await pipe.execute())
        asked = [self._enqueue(sent) for sent in commands]
        replies = await asyncio.gather(*asked, return_exceptions=True)
        for reply in replies:
            if isinstance(reply, BaseException):
                raise reply
        return replies

    def _enqueue(self, args: tuple[Any, ...]) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[Any] = loop.create_future()
        self._queue.append((args, answer))
        if not self._flush_soon:
            self._flush_soon = True
            loop.call_soon(self._flush)
        return answer

    def _flush(self) -> None:
        self._flush_soon = False
        queued, self._queue = self._queue, []
        for start in range(0, len(queued), self.pipeline_size):
            task = asyncio.ensure_future(
                self._send_batch(queued[start : start + self.pipeline_size])
            )
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)

    async def _send_batch(self, batch: Batch) -> None:
        """Write the batch's commands at once on one connection, then read the replies one by
        one, answering each asker as its reply arrives: a refused command fails only its
        asker, and a connection that breaks fails only the askers not answered yet (whose
        commands may or may not have run, as for a command sent alone)."""
        batch = [(args, answer) for args, answer in batch if not answer.done()]  # not cancelled
        if not batch:
            return
        if self._timeout is None:
            await self._send_batch_on(batch)
            return
        try:
            async with asyncio.timeout(self._timeout):
                await self._send_batch_on(batch)
        except TimeoutError as exc:  # an OSError: the askers retry, as for a socket timeout
            _fail_unanswered(batch, exc)

    async def _send_batch_on(self, batch: Batch) -> None:
        pool = self.client.connection_pool
        connection = self._idle.pop() if self._idle else None
        if connection is None:
            try:
                connection = await pool.get_connection()
            except BaseException as exc:
                _fail_unanswered(batch, exc)
                _raise_if_not_exception(exc)
                return
        try:
            await connection.send_packed_command(
                connection.pack_commands([args for args, _ in batch])
            )
            for args, answer in batch:
                try:
                    reply = await self.client.parse_response(connection, args[0])
                except ResponseError as refused:  # this command's own error; the rest follow
                    if not answer.done():
                        answer.set_exception(refused)
                    continue
                if not answer.done():  # else its asker was cancelled while it ran
                    answer.set_result(reply)
        except BaseException as exc:
            _fail_unanswered(batch, exc)
            broken, connection = connection, None
            try:
                await broken.disconnect()  # what is left on it is not to be read by another
            finally:
                await pool.release(broken)  # the pool connects it again when next taken
            _raise_if_not_exception(exc)
        finally:
            if connection is not None:
                self._idle.append(connection)

    async def aclose(self) -> None:
        await self.client.aclose()


class LoopClients:
    """One :class:`LoopClient` per event loop, made by ``make`` on first use in that loop."""

    def __init__(self, make: Callable[[], LoopClient]) -> None:
        self._make = make
        self._lock = threading.Lock()
        # Each loop's client, and the async generator that closes it when the loop shuts down
        # (held here: the loop itself only keeps a weak reference to it). The generator holds
        # its loop, so an entry goes when its loop shuts down or is found closed, not by
        # itself.
        self._clients: dict[
            asyncio.AbstractEventLoop, tuple[LoopClient, AsyncGenerator[None, None]]
        ] = {}
        # Clients being closed on their loop, held until they are.
        self._closing: set[asyncio.Future[None]] = set()

    def running(self) -> LoopClient | None:
        """The running loop's client once it has one (no await: the hot path's look)."""
        held = self._clients.get(asyncio.get_running_loop())
        return held[0] if held is not None else None

    async def client(self) -> LoopClient:
        loop = asyncio.get_running_loop()
        held = self._clients.get(loop)
        if held is not None:
            return held[0]
        with self._lock:
            # Loops closed without shutting their async generators down: their clients'
            # sockets went with them.
            for closed in [other for other in self._clients if other.is_closed()]:
                del self._clients[closed]
        client = self._make()
        closer = self._close_at_shutdown(loop, client)
        with self._lock:
            self._clients[loop] = (client, closer)
        await closer.__anext__()  # started: the loop now closes it at shutdown_asyncgens
        return client

    async def _close_at_shutdown(
        self, loop: asyncio.AbstractEventLoop, client: LoopClient
    ) -> AsyncGenerator[None, None]:
        try:
            yield
        finally:
            with self._lock:
                self._clients.pop(loop, None)
            await client.aclose()

    def close(self) -> None:
        """Close the clients of loops still running: on this thread's loop, as a task; on
        another thread's, through that loop. Those of loops that stopped were closed when
        their loops shut down."""
        with self._lock:
            held = list(self._clients.items())
            self._clients.clear()
        try:
            current: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            current = None
        for loop, (client, _) in held:
            if loop.is_closed():
                continue
            if loop is current:
                closing = loop.create_task(client.aclose())
                self._closing.add(closing)
                closing.add_done_callback(self._closing.discard)
            elif loop.is_running():
                asyncio.run_coroutine_threadsafe(client.aclose(), loop)


def _fail_unanswered(batch: Batch, exc: BaseException) -> None:
    """Give ``exc`` to every asker of ``batch`` not answered yet (each then retries its own
    command, as it would have alone)."""
    failure = exc if isinstance(exc, Exception) else ConnectionError(repr(exc))
    for _, answer in batch:
        if not answer.done():
            answer.set_exception(failure)


def _raise_if_not_exception(exc: BaseException) -> None:
    """Re-raise a cancellation or an exit: those are not the askers' to handle."""
    if not isinstance(exc, Exception):
        raise exc
