"""Journal records a read did not believe: counted, and said once per run.

A read of the journal topic drops a record of a run when its epoch is above the highest the
lifecycle store issued for the run (``reason="epoch"``), or, with a journal key, when its
``lg-mac`` is missing or wrong (``reason="mac"``), or when one of its ``lg-*`` headers is
not UTF-8 (``reason="header"``). Each one counts in
``lockgate_journal_records_dropped_total``; the first for a run in this process is one error
line naming the run, so a forged topic is said without a line per read.
"""

from __future__ import annotations

import logging

from lockgate.metrics import _hooks as metrics

_log = logging.getLogger("lockgate.stores")

#: Runs a process remembers having said; past it the memory starts over.
SAID_KEPT = 100_000


class Doubts:
    """The runs of ``topic`` with a record not believed, already said in the log."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self._said: set[tuple[str, str]] = set()

    def dropped(self, run: tuple[str, str], reason: str, count: int = 1, detail: str = "") -> None:
        """``count`` records of ``run`` not believed for ``reason`` (``epoch``, ``mac`` or
        ``header``; ``detail`` says what is wrong with a MAC or a header)."""
        for _ in range(count):
            metrics.journal_record_dropped(run[0], reason)
        if run in self._said:
            return
        if len(self._said) >= SAID_KEPT:
            self._said.clear()
        self._said.add(run)
        why = {
            "epoch": "stamped with an epoch the lifecycle store never issued for it, or with "
            "none where lockgate always stamps one",
            "mac": f"whose MAC does not verify ({detail})",
        }.get(reason, f"that lockgate did not write ({detail})")
        _log.error(
            "journal topic %r holds a record of run %r of %r %s: it is dropped from every read "
            "(only lockgate workers may write to the journal topic; see docs/kafka.md)",
            self.topic,
            run[1],
            run[0],
            why,
        )
