"""Plain values that cross the store interface."""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from lockgate._errors import InvalidCursorError
from lockgate.journal._events import RunEvent, RunStatus

WaitKind = Literal["start", "sleep", "signal", "pause", "interrupt"]
#: The kinds of wait a signal answers; the wait's ``signal`` names the one it takes.
SIGNAL_WAITS: frozenset[str] = frozenset({"signal", "interrupt"})
#: What the name of the signal that answers an interrupt starts with (``ctx.interrupt``).
INTERRUPT_SIGNAL_PREFIX = "lockgate.interrupt:"


#: The highest submit order a ``list_runs`` cursor may name: SQLite's largest INTEGER, far
#: above any count of runs a store will hold.
MAX_CURSOR_ORDER = 2**63 - 1


def list_cursor(cursor: str) -> int:
    """The submit order a ``list_runs`` cursor names (the pages give out the order of the
    last run shown, a whole number >= 0). Anything else, or a number past what a store can
    hold, is :class:`InvalidCursorError`: a caller's mistake, never a store failure."""
    if not cursor.isascii() or not cursor.isdigit() or len(cursor) > 19:
        raise InvalidCursorError(
            f"list_runs cursor {cursor[:40]!r} is not one this store gave out", cursor=cursor
        )
    order = int(cursor)
    if order > MAX_CURSOR_ORDER:
        raise InvalidCursorError(
            f"list_runs cursor {cursor!r} is past the store's range", cursor=cursor
        )
    return order


def interrupt_signal(wait_id: str) -> str:
    """The signal that answers the interrupt ``wait_id``: one name per interrupt, so an answer
    sent before the run parks on it is buffered for it alone, and no answer meant for one
    interrupt can be taken by another."""
    return f"{INTERRUPT_SIGNAL_PREFIX}{wait_id}"


class WaitOutcome(enum.StrEnum):
    """What a call that ends, opens or answers a wait did."""

    RESOLVED = "resolved"
    PARKED = "parked"
    DUPLICATE = "duplicate"
    SUPERSEDED = "superseded"


class TerminateOutcome(enum.StrEnum):
    TERMINATED = "terminated"
    ALREADY_ENDED = "already_ended"
    NOT_FOUND = "not_found"


@dataclass(frozen=True)
class WaitSpec:
    """An open wait of a parked run: a delayed start, a sleep, a signal wait, a pause or an
    interrupt (``ctx.interrupt``).

    ``due_at`` is when the timer ends it (epoch seconds on the store's clock), None for a wait
    only an answer ends. ``signal`` names the signal a signal wait or an interrupt takes (an
    interrupt's is :func:`interrupt_signal` of its wait id): a store treats the two alike,
    answering either with that signal and timing either out at ``due_at``."""

    kind: WaitKind
    wait_id: str
    call_index: int
    due_at: float | None = None
    signal: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "wait_id": self.wait_id,
            "call_index": self.call_index,
            "due_at": self.due_at,
            "signal": self.signal,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> WaitSpec:
        return cls(
            kind=data["kind"],
            wait_id=str(data["wait_id"]),
            call_index=int(data["call_index"]),
            due_at=data.get("due_at"),
            signal=data.get("signal"),
        )


@dataclass(frozen=True)
class RunControls:
    """What a running attempt checks at each boundary. ``updates_pending`` is None when the
    store cannot tell in the same read (the attempt then looks)."""

    cancel_requested_at: str | None
    pause_requested_at: str | None
    updates_pending: bool | None = None


@dataclass(frozen=True)
class ClaimedRun:
    """A run a claim took, with what its attempt starts from: its journal and its controls,
    read in the same step as the claim where the store can. ``events`` is None when the
    claim could not read the journal (the attempt then loads it), ``controls`` None when it
    could not read the controls (the attempt then polls them): a run once claimed is always
    returned, so it never sits locked with no attempt until its lease lapses."""

    run_id: str
    events: list[RunEvent] | None
    controls: RunControls | None
    #: Where the run's journal starts in an event log (partition, offset), as a lifecycle
    #: store that keeps it for a composite's log answers with the claim (None: not told).
    journal_at: tuple[int, int] | None = None


@dataclass(frozen=True)
class Written:
    """What a lifecycle write left in the run's outbox, as the write answers it: the run's
    last ``run_seq`` after the write, and the epoch stamped on the events it appended (None
    when unfenced). A composite that copied the outbox up to ``last_seq - len(events)`` then
    knows the write's events as the outbox keeps them, with no read of it."""

    last_seq: int
    epoch: str | None


class Claims(list[ClaimedRun]):
    """What a batch claim took: the claimed runs, in the leases' order (a plain list of
    :class:`ClaimedRun` to anyone who only wants those), and ``next_token_in``.

    ``next_token_in`` is set when the claim took fewer runs than it had leases for and a queued
    run it could otherwise have taken was refused for want of a ``Rate`` token: the seconds,
    from the moment the store decided the claim, until the first such token comes. None when
    no refused run waits on a token (the queue ran out, or only a ``Limit`` refused), or when
    the store cannot tell. A claim made that much later finds the token (unless another claim
    took it first)."""

    def __init__(self, runs: Iterable[ClaimedRun] = (), next_token_in: float | None = None):
        super().__init__(runs)
        self.next_token_in = next_token_in

    def __repr__(self) -> str:
        return f"Claims({list(self)!r}, next_token_in={self.next_token_in!r})"


@dataclass(frozen=True)
class RunInfo:
    """A run as the store sees it now."""

    name: str
    run_id: str
    status: RunStatus
    submitted_at: float
    params: dict[str, Any] = field(default_factory=dict)
    owner: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    version: str = ""
    version_behavior: str = "pinned"
    lock_holder: str | None = None
    wait: WaitSpec | None = None
    cancel_requested_at: str | None = None
    #: When the run ended (epoch seconds on the store's clock); None while it is live, or
    #: when the store does not keep it.
    ended_at: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "run_id": self.run_id,
            "status": str(self.status),
            "submitted_at": self.submitted_at,
            "params": self.params,
            "owner": self.owner,
            "metadata": self.metadata,
            "version": self.version,
            "version_behavior": self.version_behavior,
            "lock_holder": self.lock_holder,
            "wait": self.wait.to_dict() if self.wait else None,
            "cancel_requested_at": self.cancel_requested_at,
        }


@dataclass(frozen=True)
class StoreMarker:
    """The record a store carries from the moment it was created (``lockgate store init``, the
    first worker, ``lockgate store rebuild``) until it loses its data: a Valkey namespace's
    ``marker`` hash, a row of an SQLite file. A worker that finds it gone knows the store lost
    what it held, which an empty store cannot tell by itself.

    ``marker_id`` is drawn when the marker is written, so a marker written again (after a loss)
    is told from the first. ``created_at`` is the store's time then; ``layout`` the key layout
    or file format it was written with; ``shard_count`` the store's shards."""

    marker_id: str
    created_at: float
    layout: str
    shard_count: int = 1

    @classmethod
    def from_fields(cls, fields: dict[str, str]) -> StoreMarker:
        """The marker as a backend keeps it: text fields (``id``, ``created_at``, ``layout``,
        ``shard_count``)."""
        return cls(
            marker_id=fields["id"],
            created_at=float(fields["created_at"]),
            layout=fields.get("layout", ""),
            shard_count=int(fields.get("shard_count") or 1),
        )

    def to_fields(self) -> dict[str, str]:
        return {
            "id": self.marker_id,
            "created_at": repr(float(self.created_at)),
            "layout": self.layout,
            "shard_count": str(self.shard_count),
        }
