"""Finding the live run of a chain from any of its ids (``resolve_continuation``).

A run ends ``run:continued`` when it hands its work on: to a ``continue_as_new`` successor, or
to a successor stamped with newer gates before its body ran. Callers keep the id they were
given, so every client call that talks to a run resolves it first. The chain's tail record
(``stores/_chains.py``), keyed by the root, makes that a constant number of reads however long
the chain is:

- a run that has not continued (nearly every run): one read, its last event;
- the root of a chain: that read, the tail record, and the tail's last event;
- a run in the middle: also the run's ``run:init``, which names the root.

The record may lag one hop behind (a worker that died between ending the run and moving the
record), a gates hand-on is not recorded at all, and a store without the ``chains`` group keeps
no record; from wherever the record stands (or from the id given), the resolve follows
``run:continued`` links, one last-event read per link.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from lockgate._errors import ContinuationChainError
from lockgate.journal._events import EventKind, RunEvent
from lockgate.stores._base import Store
from lockgate.stores._chains import CONTINUE_REASON, ChainLink, chain_link
from lockgate.stores._types import RunInfo

#: Links a resolve follows at most: past the tail record that is a hop or two, but a store that
#: keeps no record is walked hop by hop. Only a corrupt journal (links in a loop) gets this far.
MAX_LINKS_FOLLOWED = 10_000_000

#: How a store method is called: ``await io(store.method, *args, **kwargs)``.
Io = Callable[..., Awaitable[Any]]


def resolve_continuation(store: Any, name: str, run_id: str) -> tuple[str, str, RunEvent | None]:
    """``(name, run_id)`` resolved to the live tail of its chain: ``(tail_name, tail_run_id,
    tail_last_event)``, the last event None when the tail has none yet (an unknown id
    resolves to itself, with None). Raises :class:`ContinuationChainError` only for a chain
    that cannot be followed: a ``run:continued`` or record that does not parse, or links
    that go on past :data:`MAX_LINKS_FOLLOWED`."""
    last: RunEvent | None = store.get_last_event(name, run_id)
    if last is None or last.kind != EventKind.RUN_CONTINUED:
        return name, run_id, last
    recorded = _recorded_tail(store, name, run_id)
    if recorded is not None:
        name, run_id = recorded.name, recorded.run_id
        last = store.get_last_event(name, run_id)
    hop = recorded.hop if recorded is not None else -1
    for _ in range(MAX_LINKS_FOLLOWED):
        if last is None or last.kind != EventKind.RUN_CONTINUED:
            return name, run_id, last
        hop = _check_hop(last, name, run_id, hop)
        name, run_id = _successor(last, name, run_id)
        last = store.get_last_event(name, run_id)
    raise ContinuationChainError(
        f"run {run_id!r} of {name!r} is still followed by more runs after "
        f"{MAX_LINKS_FOLLOWED} links: the chain's links go round in a loop",
        reason="too_long",
    )


def _recorded_tail(store: Any, name: str, run_id: str) -> ChainLink | None:
    """The chain's tail record when it names a later hop than ``run_id``'s, else None."""
    if "chains" not in store.capabilities():
        return None
    tail: ChainLink | None = store.get_chain_tail(name, run_id)
    if tail is not None:
        return tail if tail.hop > 0 else None
    opening = store.load_run(name, run_id, max_events=1)
    if not opening or opening[0].kind != EventKind.RUN_INIT:
        return None
    link = chain_link(opening[0].payload, name, run_id)
    if (link.root_name, link.root_run_id) == (name, run_id):
        return None  # a root with no record (it continued, the record not yet written)
    tail = store.get_chain_tail(link.root_name, link.root_run_id)
    return tail if tail is not None and tail.hop > link.hop else None


def _check_hop(last: RunEvent, name: str, run_id: str, hop: int) -> int:
    """The hop a ``continue_as_new`` link names, which must be past ``hop`` (the one before);
    a gates hand-on names none and keeps ``hop``."""
    if last.payload.get("reason") != CONTINUE_REASON:
        return hop
    link = ChainLink.from_continued_payload(last.payload)
    if link.hop <= hop:
        raise ContinuationChainError(
            f"run {run_id!r} of {name!r} continues as hop {link.hop}, not past hop {hop}",
            reason="hop_not_increasing",
        )
    return link.hop


def _successor(last: RunEvent, name: str, run_id: str) -> tuple[str, str]:
    successor_name = last.payload.get("name", name)
    successor_id = last.payload.get("run_id")
    if not isinstance(successor_id, str) or not successor_id or not isinstance(successor_name, str):
        raise ContinuationChainError(
            f"run {run_id!r} of {name!r} ended run:continued without naming its successor",
            reason="unreadable_link",
        )
    return successor_name, successor_id


async def live_tail(io: Io, store: Store, name: str, run_id: str) -> tuple[str, RunInfo | None]:
    """The run carrying ``run_id``'s work: itself, or the live end of the chain it started
    (``resolve_continuation``, a constant number of reads); with what the store says of it
    (None: no such run)."""
    _, tail, _ = await io(resolve_continuation, store, name, run_id)
    info: RunInfo | None = await io(store.get_run, name, tail)
    return tail, info
