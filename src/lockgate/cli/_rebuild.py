"""``lockgate store rebuild``: restore a Valkey store's tier from its Kafka journal topic after
Valkey lost it (see ``stores/composite/_rebuild`` and docs/kafka.md)."""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import TYPE_CHECKING

from lockgate._output import out
from lockgate.cli._exits import FAILED, OK, Failure
from lockgate.cli._params import Subparsers
from lockgate.stores._urls import JOURNAL_URL_ENV, STORE_URL_ENV
from lockgate.stores.opener._open import is_valkey_url, open_store

if TYPE_CHECKING:
    from lockgate.stores.composite._rebuild import Progress

NEEDS = (
    "store rebuild needs --journal kafka://HOST:PORT (or $LOCKGATE_JOURNAL_URL) and a "
    "valkey:// --store: it restores a Valkey store's lost state from its Kafka journal"
)


def add_rebuild_parser(sub: Subparsers, common: list[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "rebuild",
        parents=common,
        help="restore a Valkey store's runs from its Kafka journal, after Valkey lost them",
    )
    # Checked before the store is opened (opens_store): without a journal there is nothing to
    # rebuild from, and the one line says so, whatever the store URL names.
    p.set_defaults(run=store_rebuild, opens_store=True)


def _progress() -> Progress | None:
    """Progress on stderr when it is a terminal, at most five times a second."""
    if not sys.stderr.isatty():
        return None
    shown = [0.0]

    def show(read: int, total: int) -> None:
        now = time.monotonic()
        if read < total and now - shown[0] < 0.2:
            return
        shown[0] = now
        end = "\n" if read >= total else ""
        print(f"\rlockgate: read {read} of {total} records", end=end, file=sys.stderr, flush=True)

    return show


async def store_rebuild(args: argparse.Namespace) -> int:
    """Open the composite store, rebuild it, print the report. (A coroutine only because the
    dispatcher runs commands that open their own store that way; the rebuild blocks.)"""
    from lockgate.stores.composite._rebuild import rebuild_lifecycle
    from lockgate.stores.composite._store import CompositeStore

    url = args.store if args.store is not None else os.environ.get(STORE_URL_ENV)
    journal = args.journal if args.journal is not None else os.environ.get(JOURNAL_URL_ENV)
    if not journal or not url or not is_valkey_url(url):
        raise Failure(NEEDS)
    store = open_store(url, journal=journal)
    try:
        if not isinstance(store, CompositeStore):
            raise Failure(NEEDS)
        report = rebuild_lifecycle(store, progress=_progress())
    finally:
        store.close()
    for line in report.lines():
        out(line)
    # Everything restorable was restored; 1 tells a script that the report names records
    # skipped or runs whose journals could not be restored.
    return FAILED if report.skipped or report.refused else OK
