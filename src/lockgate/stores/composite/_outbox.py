"""What a :class:`~lockgate.stores.CompositeStore` needs of its two backends: a lifecycle
backend's outbox of each live run's events (and writes that answer what they left there), an
event log that keeps copies once per ``run_seq``; and an event as an outbox keeps it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from lockgate.journal._events import EPOCH_HEADER, RunEvent, as_stored
from lockgate.stores._types import RunControls, Written


@runtime_checkable
class Outbox(Protocol):
    """What a lifecycle backend offers a composite: each live run's events, to copy, and
    writes that answer what they left there (:class:`Written`), so that the composite knows
    their events as kept without reading them back."""

    def events_after(self, name: str, run_id: str, after_seq: int) -> list[RunEvent]: ...

    def drop_outbox(self, name: str, run_id: str) -> None: ...

    def append_written(
        self, name: str, run_id: str, events: list[RunEvent], *, fence: str | None = None
    ) -> Written: ...

    def append_and_poll_written(
        self, name: str, run_id: str, events: list[RunEvent], *, fence: str
    ) -> tuple[RunControls, Written]: ...

    def finish_if_quiet_written(
        self, name: str, run_id: str, events: list[RunEvent], *, fence: str
    ) -> tuple[RunControls | None, Written]: ...


@runtime_checkable
class CopyingLog(Protocol):
    """What an event log offers a composite: copies kept by ``run_seq``, once each."""

    def append_copies(self, name: str, run_id: str, events: Sequence[RunEvent]) -> None: ...


def as_kept(event: RunEvent, run_seq: int, epoch: str | None) -> RunEvent:
    """``event`` as a lifecycle's outbox keeps it once appended at ``run_seq``: its payload as
    JSON gives it back, its headers stamped with the fencing ``epoch`` of a fenced write."""
    payload = as_stored(event.payload)
    headers = {**event.headers, EPOCH_HEADER: epoch} if epoch is not None else dict(event.headers)
    return RunEvent(event.kind, payload, event.run_id, event.schema_version, run_seq, headers)
