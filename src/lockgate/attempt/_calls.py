"""The in-body calls of an attempt that reach past its own journal's durable operations:
``continue_as_new``, interrupts, streams, children, fan-outs and signals sent, as the
methods the :class:`~lockgate.workflow._runtime.Runtime` protocol names. Each hands on to the
module that does it (``_chain.py``, ``_interrupt.py``, ``_stream.py``, ``_children.py``,
``_fanout.py``, ``_signal_send.py``); :class:`~lockgate.attempt._attempt.Attempt` takes them
from here, so its own module keeps the operations on its journal."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, NoReturn

from lockgate.attempt._attempt_core import AttemptCore
from lockgate.attempt._chain import continue_as_new
from lockgate.attempt._children import run_child
from lockgate.attempt._fanout import fan_out
from lockgate.attempt._interrupt import interrupt
from lockgate.attempt._signal_send import send_signal
from lockgate.attempt._stream import consume
from lockgate.workflow._interrupt import InterruptResponse
from lockgate.workflow._retry import RetryPolicy
from lockgate.workflow._source import Batch, Source, StreamProgress


class BodyCalls(AttemptCore):
    """What a body asks of other runs, streams and people, through its context."""

    async def continue_as_new(self, params: dict[str, Any]) -> NoReturn:
        await continue_as_new(self, params)

    async def interrupt(
        self, question: dict[str, Any], expects: str, timeout: float | None
    ) -> InterruptResponse:
        return await interrupt(self, question, expects, timeout)

    async def consume(
        self,
        source: Source[Any],
        handler: Callable[[Batch[Any]], Any],
        *,
        name: str,
        max_batches: int | None,
        poll_timeout: float,
        retry: RetryPolicy | None,
    ) -> StreamProgress:
        return await consume(
            self,
            source,
            handler,
            name=name,
            max_batches=max_batches,
            poll_timeout=poll_timeout,
            retry=retry,
        )

    async def run_child(
        self,
        target: object,
        params: object,
        *,
        run_id: str | None,
        parent_close: str,
        timeout: object,
    ) -> Any:
        return await run_child(
            self, target, params, run_id=run_id, parent_close=parent_close, timeout=timeout
        )

    async def fan_out(
        self,
        target: Callable[..., Any] | str,
        items: Iterable[Any],
        *,
        max_in_flight: int,
        parent_close: str,
    ) -> list[Any]:
        return await fan_out(
            self, target, items, max_in_flight=max_in_flight, parent_close=parent_close
        )

    async def signal(self, name: str, run_id: str, signal: str, payload: dict[str, Any]) -> str:
        return await send_signal(self, name, run_id, signal, payload)
