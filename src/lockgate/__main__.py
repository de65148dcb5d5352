"""``python -m lockgate``: the ``lockgate`` command line."""

from lockgate.cli import run

run()
