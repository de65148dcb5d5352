"""What any caller does to a run through the store, below both the client and the attempt
runtime: functions of a store (and a clock) that return ids, not handles.

- ``_submit.py``: the checked and stamped submit, made here alone (``submit_run``,
  ``queue_run``); ``known`` decides once whether a workflow is imported here or known from
  the record its workers left (``_recorded.py``); ``_grouping.py`` sends a grouping client's
  submits together;
- ``_chains.py``: following any id of a chain to its live run;
- ``_signals.py``: a signal sent to a run's live run, once per signal id;
- ``_family.py``: the family of a run (its open children, the terminate cascade, the notice
  a child's end sends its parent);
- ``_retry.py``: a failed run retried from where it stopped;
- ``_interrupts.py``: an interrupt a run asked, answered.

``client/`` wraps these in handles; ``attempt/`` calls them from a body. Nothing here imports
either. The package exports no names of its own: its public values (``CloseResult``,
``resolve_continuation``, ``RetryPlan``, ``ExistingRetry``) are exported by
``lockgate.client`` and ``lockgate``.
"""

from __future__ import annotations

__all__: list[str] = []
