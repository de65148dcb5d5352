"""A client's submits gathered into group commits (``WorkflowClient(group_submits=True)``).

Submits made while the store is busy with earlier ones wait together and go to it as one
:meth:`~lockgate.stores._batch.GroupCommitStore.create_runs` call: one trip to the store thread
and one transaction for the group. No submit waits for a timer or a size: the first goes at
once, and what arrives while a group is in the store goes in the next. A submit alone pays
nothing for it; a server taking many at once pays a fraction of the commits.
"""

from __future__ import annotations

import asyncio
import copy

from lockgate._errors import StoreUnavailable
from lockgate.stores._base import Store
from lockgate.stores._batch import GroupCommitStore, NewRun
from lockgate.stores._calls import call_store

#: Most submits in one group: a bound on one transaction's length.
MAX_GROUP = 256


class SubmitGroup:
    """The submits of one client and event loop waiting for the store."""

    def __init__(self, store: Store) -> None:
        assert isinstance(store, GroupCommitStore)
        self._store: Store = store
        self._create_runs = store.create_runs
        self._waiting: list[tuple[NewRun, asyncio.Future[str]]] = []
        self._sending: asyncio.Task[None] | None = None

    async def create(self, run: NewRun) -> str:
        """Create ``run`` with the next group; its id, or the error it alone was refused."""
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._waiting.append((run, future))
        if self._sending is None or self._sending.done():
            self._sending = asyncio.get_running_loop().create_task(self._send())
        return await future

    async def _send(self) -> None:
        """Send groups until nothing waits."""
        try:
            while self._waiting:
                group, self._waiting = self._waiting[:MAX_GROUP], self._waiting[MAX_GROUP:]
                # A caller that stopped waiting is not sent: it was told it was cancelled.
                group = [(run, future) for run, future in group if not future.done()]
                if group:
                    await self._send_group(group)
        finally:
            # Cancelled itself (the loop is closing): no waiter is left hanging.
            for _, future in self._waiting:
                future.cancel()
            self._waiting = []

    async def _send_group(self, group: list[tuple[NewRun, asyncio.Future[str]]]) -> None:
        try:
            answers = await call_store(self._store, self._create_runs, [run for run, _ in group])
            if len(answers) != len(group):
                raise StoreUnavailable(
                    f"the store answered {len(answers)} of a group of {len(group)} submits"
                )
        except asyncio.CancelledError:
            for _, future in group:
                future.cancel()
            raise
        except Exception as exc:
            # The store failed the whole group: each submit is told, as it would have been
            # on its own, with an error of its own (one exception shared by many callers
            # would gather their tracebacks).
            for _, future in group:
                if not future.done():
                    future.set_exception(_copy(exc))
            return
        for (_, future), answer in zip(group, answers, strict=True):
            if future.done():  # its caller stopped waiting
                continue
            if isinstance(answer, str):
                future.set_result(answer)
            else:
                future.set_exception(answer)


def _copy(exc: Exception) -> Exception:
    """A fresh error like ``exc``, caused by it: every caller gets its own."""
    try:
        fresh = copy.copy(exc)
    except Exception:  # an exception type that cannot be copied: share it
        return exc
    fresh.__cause__, fresh.__traceback__ = exc, None
    return fresh
