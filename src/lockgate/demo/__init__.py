"""The demos: orders on an SQLite file, served by worker processes, one of which dies mid-run
(``lockgate demo``), and a stream on Kafka and Valkey, served by two workers, one of which is
killed mid-stream (``lockgate demo --kafka``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lockgate._lazy import lazy_exports

if TYPE_CHECKING:
    from lockgate.demo._demo import main, run_demo
    from lockgate.demo._kafka import run_kafka_demo

__all__ = ["main", "run_demo", "run_kafka_demo"]


if not TYPE_CHECKING:  # a type checker sees the imports above, not a __getattr__
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "lockgate.demo._demo": ("main", "run_demo"),
            "lockgate.demo._kafka": ("run_kafka_demo",),
        },
    )
