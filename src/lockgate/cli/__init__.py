"""The ``lockgate`` command line: workers, runs and stores from a shell."""

from lockgate.cli._main import main, run

__all__ = ["main", "run"]
