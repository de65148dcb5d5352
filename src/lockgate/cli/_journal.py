"""``lockgate journal replay``: the Kafka journal topic read from offsets, folded, printed.

The command opens no store: it reads the topic the ``--journal`` URL (or
``LOCKGATE_JOURNAL_URL``) names through :class:`~lockgate.stores.kafka.JournalReplay`, prints
one line per folded event (``--json``: one JSON object per line), then one summary line. It
formats the fold's records itself rather than through :class:`JournalRecord`: a replay prints
millions of lines, and the payload's JSON text goes out as the record holds it.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import IO, TYPE_CHECKING, Any

from lockgate.cli._exits import FAILED, OK, Failure
from lockgate.cli._params import Subparsers
from lockgate.stores._urls import JOURNAL_URL_ENV
from lockgate.stores.opener._open import is_valkey_url, open_store

if TYPE_CHECKING:  # imported where used: the parser below is built for every command line
    from lockgate.stores.composite._store import CompositeStore
    from lockgate.stores.kafka._fold import Folded, ReplaySummary
    from lockgate.stores.kafka._replay import JournalReplay

#: Seconds between two progress lines on a terminal.
PROGRESS_EVERY = 0.25
#: Skipped records named on stderr, at most (the JSON summary names every one).
SKIPPED_SHOWN = 20
#: Characters of a payload the text output shows.
PAYLOAD_WIDTH = 96


def add_parsers(group: Subparsers, common: list[argparse.ArgumentParser]) -> None:
    """``journal replay``, which opens no store: its own ``--journal`` (the topic read) and
    ``--store`` (asked for epochs only) rather than ``common``'s."""
    journal = group.add_parser("journal", help="the Kafka journal topic itself")
    sub = journal.add_subparsers(dest="journal_command", metavar="COMMAND", required=True)
    p = sub.add_parser(
        "replay",
        help="read the journal topic from an offset or a time, fold it, print each event",
        description="Read {prefix}.journal from a position, fold it as a journal read does "
        "(duplicates and stale epochs dropped), print each event, then a summary line.",
    )
    p.add_argument(
        "--journal",
        metavar="URL",
        help=f"kafka://host:port[,host:port][?topic_prefix=...] (default: ${JOURNAL_URL_ENV})",
    )
    p.add_argument("--partition", type=int, metavar="N", help="only partition N (default: all)")
    start = p.add_mutually_exclusive_group()
    start.add_argument(
        "--from-offset", type=int, metavar="N", help="start at offset N of each partition read"
    )
    start.add_argument(
        "--from-time",
        metavar="ISO8601",
        help="start at the first record at or after this time (UTC when it has no zone)",
    )
    p.add_argument(
        "--until-offset",
        type=int,
        metavar="N",
        help="end offset, exclusive: stop before offset N (default: each partition's end now)",
    )
    p.add_argument("--workflow", dest="name", metavar="NAME", help="only this workflow's runs")
    p.add_argument("--run", dest="run_id", metavar="RUN_ID", help="only this run")
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p.add_argument(
        "--strict",
        action="store_true",
        help="stop at the first record not believed (exit 1) rather than skip and count it",
    )
    p.add_argument(
        "--store",
        metavar="URL",
        help="the valkey:// lifecycle store of the journal: skip records stamped with an epoch "
        "it never issued for their run (default: the topic alone is read)",
    )
    p.set_defaults(run=replay, opens_no_store=True)


def replay(args: argparse.Namespace) -> int:
    from lockgate.stores.kafka._replay import replay_journal

    url = args.journal if args.journal is not None else os.environ.get(JOURNAL_URL_ENV)
    if args.journal is not None and not args.journal.strip():
        raise Failure(f"--journal is empty ({args.journal!r}): give kafka://host:port")
    if not url:
        raise Failure(
            f"no journal given: pass --journal kafka://host:port or set {JOURNAL_URL_ENV}"
        )
    for flag, value in (
        ("--partition", args.partition),
        ("--from-offset", args.from_offset),
        ("--until-offset", args.until_offset),
    ):
        if value is not None and value < 0:
            raise Failure(f"{flag} must be 0 or more, got {value}")
    if (
        args.from_offset is not None
        and args.until_offset is not None
        and args.until_offset < args.from_offset
    ):
        raise Failure(
            f"--until-offset {args.until_offset} is before --from-offset {args.from_offset} "
            "(--until-offset is the end offset, exclusive)"
        )
    # librdkafka's log lines (a refused connection, once per retry) would land on stderr
    # through logging's last resort; the one error line says what went wrong.
    logging.getLogger("lockgate.kafka").addHandler(logging.NullHandler())
    if args.store is not None and not is_valkey_url(args.store):
        raise Failure(
            f"--store must be the journal's valkey:// lifecycle store, not {args.store!r}"
        )
    lifecycle: list[CompositeStore] = []  # opened once the replay found the topic
    source = replay_journal(
        url,
        partition=args.partition,
        from_offset=args.from_offset,
        from_time=_time(args.from_time) if args.from_time is not None else None,
        until_offset=args.until_offset,
        workflow=args.name,
        run_id=args.run_id,
        strict=args.strict,
        issued=_issued(lifecycle) if args.store is not None else None,
    )
    # The loop allocates millions of short-lived objects and frees each by its count: the
    # cyclic collector, triggered by allocations, would only slow it down.
    gc.disable()
    try:
        with source:
            if args.store is not None:
                # After the replay checked the topic: opening the store never creates one.
                lifecycle.append(_lifecycle(args.store, url))
            _print(source, args.json)
    finally:
        gc.enable()
        for store in lifecycle:
            store.close()
    skipped = source.summary.skipped
    for partition, offset, why in skipped[:SKIPPED_SHOWN]:
        print(f"lockgate: skipped record {partition}/{offset}: {why}", file=sys.stderr)
    if len(skipped) > SKIPPED_SHOWN:
        print(f"lockgate: skipped {len(skipped) - SKIPPED_SHOWN} more records", file=sys.stderr)
    return FAILED if skipped else OK


def _lifecycle(store_url: str, journal_url: str) -> CompositeStore:
    """The store ``--store`` names, with the journal: its lifecycle is asked each run's
    highest issued epoch."""
    from lockgate.stores.composite._store import CompositeStore

    store = open_store(store_url, journal=journal_url)
    if not isinstance(store, CompositeStore) or not callable(
        getattr(store.lifecycle, "journal_bounds", None)
    ):
        store.close()
        raise Failure(f"--store {store_url!r} is no Valkey lifecycle store of the journal")
    return store


def _issued(opened: list[CompositeStore]) -> Callable[[str, str], int | None]:
    """The highest epoch the store in ``opened`` issued for a run (None: it knows none)."""

    def issued(name: str, run_id: str) -> int | None:
        found: int | None = opened[0].lifecycle.journal_bounds(name, run_id)[1]  # type: ignore[attr-defined]
        return found

    return issued


def _time(text: str) -> datetime:
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise Failure(
            f"--from-time {text!r} is not an ISO 8601 time (e.g. 2026-01-31T09:30:00Z)"
        ) from None
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def _print(source: JournalReplay, as_json: bool) -> None:
    """Every folded event, then the summary, on stdout (written in big blocks); progress on
    stderr when that is a terminal."""
    out = sys.stdout.buffer
    progress = _Progress(source.summary) if _is_terminal(sys.stderr) else None
    lines = _JsonLines() if as_json else _text_lines
    try:
        for batch in source.folded():
            out.write(lines(batch))
            if progress is not None:
                progress.show()
    finally:
        if progress is not None:
            progress.clear()
    summary = source.summary
    if as_json:
        tail = json.dumps({"summary": summary.to_dict()}, separators=(",", ":"))
    else:
        tail = summary.line()
    out.write(tail.encode() + b"\n")
    out.flush()


def _is_terminal(stream: IO[Any] | None) -> bool:
    try:
        return stream is not None and stream.isatty()
    except (AttributeError, ValueError):
        return False


class _JsonLines:
    """A batch of folded records as JSON lines, the payload's text copied in as the record
    holds it (compact JSON, as every store writes it). What repeats is made once: a run's
    ``{"workflow":...,"run_id":...,"run_seq":``, a kind's ``,"kind":...,"partition":``, a
    second's time text (and the last millisecond's). One loop per batch, one format per
    record: it runs once per event printed."""

    def __init__(self) -> None:
        self._kinds: dict[bytes, bytes] = {}
        self._second = -1
        self._stamp = b""

    def __call__(self, batch: list[Folded]) -> bytes:
        kinds = self._kinds
        lines: list[bytes] = []
        add = lines.append
        last_millis: int | None = -1
        stamp_text = b""
        for run, workflow, run_id, seq, kind, payload, partition, offset, millis, epoch, _ in batch:
            prefix = run.prefix
            if prefix is None:
                prefix = run.prefix = b'{"workflow":%s,"run_id":%s,"run_seq":' % (
                    _json_text(workflow),
                    _json_text(run_id),
                )
            middle = kinds.get(kind)
            if middle is None:
                middle = kinds[kind] = b',"kind":%s,"partition":' % _json_text(kind)
            if millis != last_millis:
                last_millis, stamp_text = millis, self._stamp_text(millis)
            if epoch is None:
                add(
                    b'%s%d%s%d,"offset":%d,"timestamp":%s,"epoch":null,"payload":%s}\n'
                    % (prefix, seq, middle, partition, offset, stamp_text, payload)
                )
            else:
                add(
                    b'%s%d%s%d,"offset":%d,"timestamp":%s,"epoch":%d,"payload":%s}\n'
                    % (prefix, seq, middle, partition, offset, stamp_text, epoch, payload)
                )
        return b"".join(lines)

    def _stamp_text(self, millis: int | None) -> bytes:
        if millis is None:
            return b"null"
        second, rest = divmod(millis, 1000)
        if second != self._second:
            self._second = second
            self._stamp = datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%S").encode()
        return b'"%s.%03dZ"' % (self._stamp, rest)


def _json_text(raw: bytes) -> bytes:
    return json.dumps(raw.decode(errors="replace")).encode()


def _text_lines(batch: list[Folded]) -> bytes:
    """A batch of folded records as lines for people: where each is, whose, what it says."""
    lines = []
    for _run, workflow, run_id, seq, kind, payload, partition, offset, _ms, epoch, _ in batch:
        shown = payload if len(payload) <= PAYLOAD_WIDTH else payload[: PAYLOAD_WIDTH - 3] + b"..."
        fence = b" epoch %d" % epoch if epoch is not None else b""
        lines.append(
            b"%d/%d  %s  %s  #%d  %s%s  %s\n"
            % (partition, offset, workflow, run_id, seq, kind, fence, shown)
        )
    return b"".join(lines)


class _Progress:
    """``records read / total`` on stderr, at most every :data:`PROGRESS_EVERY` seconds, on
    one line that is cleared at the end."""

    def __init__(self, summary: ReplaySummary) -> None:
        self.summary = summary
        self.shown_at = 0.0
        self.shown = False

    def show(self) -> None:
        now = time.monotonic()
        if now - self.shown_at < PROGRESS_EVERY:
            return
        self.shown_at, self.shown = now, True
        summary = self.summary
        share = summary.records / summary.total if summary.total else 1.0
        sys.stderr.write(
            f"\r\x1b[Klockgate: replaying: {summary.records:,} / {summary.total:,} records "
            f"({share:.0%}), {summary.events:,} events"
        )
        sys.stderr.flush()

    def clear(self) -> None:
        if self.shown:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()
