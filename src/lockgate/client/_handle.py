"""What a caller holds of one run: :class:`RunHandle`, the client's methods bound to it, and
:class:`TerminateResult`, what ``terminate`` did."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lockgate.journal._events import RunEvent, RunStatus
from lockgate.runs._family import CloseResult
from lockgate.stores._types import TerminateOutcome

if TYPE_CHECKING:
    from lockgate.client._client import WorkflowClient
    from lockgate.client._interrupts import InterruptHandler
    from lockgate.workflow._interrupt import InterruptAction


@dataclass(frozen=True)
class TerminateResult:
    """What ``terminate`` did: ``TERMINATED`` when this call ended the run, ``ALREADY_ENDED``
    when its journal had already ended (a repeat, or a run that finished first). ``run_id``
    is the run it acted on: the successor of a run that was handed on. ``children`` counts
    the open children (grandchildren too) the cascade closed, and ``ended`` names each run
    it terminated, as ``(name, run_id)``: the store wrote their terminal, no worker did."""

    outcome: TerminateOutcome
    children: CloseResult
    run_id: str
    ended: tuple[tuple[str, str], ...] = ()


class RunHandle:
    """One run. Each method is the client's method of the same name, bound to this run."""

    def __init__(self, client: WorkflowClient, name: str, run_id: str) -> None:
        self.client = client
        self.name = name
        self.run_id = run_id

    def __repr__(self) -> str:
        return f"RunHandle(name={self.name!r}, run_id={self.run_id!r})"

    async def status(self) -> RunStatus:
        return await self.client.status(self.name, self.run_id)

    async def why_waiting(self) -> str | None:
        return await self.client.why_waiting(self.name, self.run_id)

    async def result(
        self, *, timeout: float | None = None, on_interrupt: InterruptHandler | None = None
    ) -> Any:
        return await self.client.result(
            self.name, self.run_id, timeout=timeout, on_interrupt=on_interrupt
        )

    async def resume(
        self, action: InterruptAction | str, value: Any = None, *, wait_id: str | None = None
    ) -> None:
        await self.client.resume(self.name, self.run_id, action, value, wait_id=wait_id)

    async def events(self) -> list[RunEvent]:
        return await self.client.events(self.name, self.run_id)

    async def signal(
        self, signal: str, payload: dict[str, Any] | None = None, *, signal_id: str | None = None
    ) -> str:
        return await self.client.signal(
            self.name, self.run_id, signal, payload, signal_id=signal_id
        )

    async def query(self, query: str, *args: Any, **kwargs: Any) -> Any:
        return await self.client.query(self.name, self.run_id, query, *args, **kwargs)

    async def update(
        self,
        update: str,
        payload: dict[str, Any] | None = None,
        *,
        update_id: str | None = None,
        timeout: float = 30.0,
    ) -> Any:
        return await self.client.update(
            self.name, self.run_id, update, payload, update_id=update_id, timeout=timeout
        )

    async def cancel(self, *, reason: str | None = None, requested_by: str | None = None) -> None:
        await self.client.cancel(self.name, self.run_id, reason=reason, requested_by=requested_by)

    async def terminate(
        self, *, reason: str | None = None, requested_by: str | None = None
    ) -> TerminateResult:
        return await self.client.terminate(
            self.name, self.run_id, reason=reason, requested_by=requested_by
        )

    async def retry(self) -> RunHandle:
        return await self.client.retry(self.name, self.run_id)

    async def pause(self) -> None:
        await self.client.pause(self.name, self.run_id)

    async def unpause(self) -> None:
        await self.client.unpause(self.name, self.run_id)
