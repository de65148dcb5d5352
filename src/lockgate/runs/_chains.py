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
from typing import Any, TypeVar

from lockgate._errors import ContinuationChainError, RunNotFoundError
from lockgate.journal._events import EventKind, RunEvent, RunStatus
from lockgate.stores._base import Store
from lockgate.stores._calls import call_store
from lockgate.stores._chains import CONTINUE_REASON, ChainLink, chain_link
from lockgate.stores._types import RunInfo

#: Links a resolve follows at most: past the tail record that is a hop or two, but a store that
#: keeps no record is walked hop by hop. Only a corrupt journal (links in a loop) gets this far.
MAX_LINKS_FOLLOWED = 10_000_000

#: Times :func:`live_run` may find its tail moved on again before it gives up.
MAX_CHAIN_HOPS = 64

T = TypeVar("T")

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


async def tail_info(io: Io, store: Store, name: str, run_id: str) -> tuple[str, RunInfo | None]:
    """The run carrying ``run_id``'s work: itself, or the live end of the chain it started
    (``resolve_continuation``, a constant number of reads); with what the store says of it
    (None: no such run)."""
    _, tail, _ = await io(resolve_continuation, store, name, run_id)
    info: RunInfo | None = await io(store.get_run, name, tail)
    return tail, info


async def run_info(store: Store, name: str, run_id: str) -> RunInfo:
    """What the store says of the run ``run_id``; :class:`RunNotFoundError` for none."""
    info = await call_store(store, store.get_run, name, run_id)
    if info is None:
        raise RunNotFoundError(name, run_id)
    assert isinstance(info, RunInfo)
    return info


async def live_run(store: Store, name: str, run_id: str) -> tuple[str, RunInfo]:
    """The run that carries ``run_id``'s work now: itself, or the live end of the chain it
    started or joined (a ``continue_as_new`` successor, or one it was handed on to), found in
    a constant number of reads (``resolve_continuation``). :class:`RunNotFoundError` for an
    unknown run."""
    for _ in range(MAX_CHAIN_HOPS):
        _, tail, _ = await call_store(store, resolve_continuation, store, name, run_id)
        info = await run_info(store, name, tail)
        if info.status != RunStatus.CONTINUED:
            return tail, info
        run_id = tail  # it continued between the two reads: follow it on
    raise ContinuationChainError(
        f"run {run_id!r} of {name!r} kept moving on while it was being resolved",
        reason="too_long",
    )


async def on_live_run(
    store: Store,
    name: str,
    run_id: str,
    act: Callable[[str], Awaitable[T]],
    *,
    landed: Callable[[T], bool] | None = None,
) -> T:
    """Apply ``act`` to the run carrying ``run_id``'s work. The run may move on between
    finding it and acting on it (a hand-on, or a ``continue_as_new``): the store moves
    what ``act`` left on it (a buffered signal, a latched cancel) to the successor, or
    ``act`` found it ended; either way, act again on the new tail. ``landed`` says from
    ``act``'s answer that it took effect where it was kept (a signal buffered), which
    spares the look again: the store moves it with the run if the run moves on."""
    tail, info = await live_run(store, name, run_id)
    while True:
        result = await act(tail)
        if info.status.is_terminal:
            return result  # it ended for good: nothing follows it
        if landed is not None and landed(result):
            return result  # kept where it was sent: a hand-over moves it with the run
        moved, info = await live_run(store, name, tail)
        if moved == tail:
            return result
        tail = moved
