"""The README's demo: a durable workflow that survives losing its process mid-run."""

from lockgate.demo._demo import main

__all__ = ["main"]
