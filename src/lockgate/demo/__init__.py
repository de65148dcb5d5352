"""The demo: orders on an SQLite file, served by worker processes, one of which dies mid-run."""

from lockgate.demo._demo import main, run_demo

__all__ = ["main", "run_demo"]
