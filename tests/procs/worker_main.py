"""A worker process for tests: ``python tests/procs/worker_main.py --store PATH [options]``.

Builds the store ``--store`` names (an SQLite file as a path or an ``sqlite:///`` URL, or a
``valkey://``/``redis://`` URL, namespace in its query; ``--journal`` a Kafka journal URL for
it, ``LOCKGATE_JOURNAL_URL`` by default) and a WorkflowWorker
serving ``WORKFLOWS`` of the module ``--workflows`` names (``workflows``, beside this file, by
default), then serves until SIGTERM or SIGINT. Logs go to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
import os
import sys
from typing import Any

from lockgate.stores import SQLiteStore, Store
from lockgate.stores.opener._open import open_store
from lockgate.worker import WorkerOptions, WorkflowWorker


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--store", default=os.environ.get("LOCKGATE_TEST_STORE"))
    parser.add_argument("--journal", default=os.environ.get("LOCKGATE_JOURNAL_URL"))
    parser.add_argument("--workflows", default="workflows")
    parser.add_argument("--worker-id")
    parser.add_argument("--lock-ttl", type=float, default=1.5)
    parser.add_argument("--heartbeat", type=float, default=0.3)
    parser.add_argument("--synchronous", choices=("full", "normal"), default="normal")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--poll", type=float, default=0.02)
    parser.add_argument("--timer-poll", type=float, default=0.1)
    parser.add_argument("--orphan-scan", type=float, default=0.25)
    parser.add_argument("--grace", type=float, default=10.0)
    parser.add_argument("--health-port", type=int)
    args = parser.parse_args(argv)
    if not args.store:
        parser.error("--store (or LOCKGATE_TEST_STORE) is required")
    return args


def open_test_store(url: str, **options: Any) -> Store:
    """A store from a test's ``--store``: an SQLite path or URL, or a Valkey URL."""
    journal = options.pop("journal", None)
    if url.startswith(("valkey://", "redis://")):
        options.pop("synchronous", None)
        return open_store(url, journal=journal, **options)
    if url.startswith("sqlite:"):
        return SQLiteStore.from_url(url, **options)
    return SQLiteStore(url, **options)


def build(args: argparse.Namespace) -> WorkflowWorker:
    store = open_test_store(
        args.store,
        lock_ttl=args.lock_ttl,
        heartbeat_interval=args.heartbeat,
        synchronous=args.synchronous,
        journal=args.journal,
    )
    module = importlib.import_module(args.workflows)
    return WorkflowWorker(
        workflows=module.WORKFLOWS,
        store=store,
        worker_id=args.worker_id,
        options=WorkerOptions(
            max_concurrent_runs=args.concurrency,
            claim_poll_interval=args.poll,
            timer_poll_interval_s=args.timer_poll,
            orphan_scan_interval=args.orphan_scan,
            shutdown_grace=args.grace,
            health_port=args.health_port,
        ),
    )


def main(argv: list[str]) -> int:
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format=f"%(asctime)s {os.getpid()} %(name)s %(levelname)s %(message)s",
    )
    worker = build(parse(argv))
    asyncio.run(worker.run())
    worker.store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
