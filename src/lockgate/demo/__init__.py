"""The demos: orders on an SQLite file, served by worker processes, one of which dies mid-run
(``lockgate demo``), and a stream on Kafka and Valkey, served by two workers, one of which is
killed mid-stream (``lockgate demo --kafka``)."""

from lockgate.demo._demo import main, run_demo
from lockgate.demo._kafka import run_kafka_demo

__all__ = ["main", "run_demo", "run_kafka_demo"]
