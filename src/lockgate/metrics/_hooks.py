"""The calls the engine makes where something worth counting happens: small, and no-ops when
prometheus-client is not installed, so the core never needs it.

Each hook names what happened in the engine's words; which metric it moves, and how, is
decided here and in ``_definitions``. A hook never raises: a metric must not break a worker.
"""

from __future__ import annotations

import contextlib
import importlib.util
from types import ModuleType

if importlib.util.find_spec("prometheus_client") is not None:
    from lockgate.metrics import _definitions

    _defs: ModuleType | None = _definitions
else:  # pragma: no cover - exercised where the extra is missing
    _defs = None

#: The attempt outcomes after which the run is over; only these count as runs ended.
_ENDING = frozenset({"completed", "failed", "cancelled"})


def enabled() -> bool:
    """Whether metrics are recorded (prometheus-client is installed)."""
    return _defs is not None


def claimed(workflow: str, runs: int, seconds: float) -> None:
    """A claim of ``workflow`` took ``runs`` runs (0: it came back empty) in ``seconds``."""
    if _defs is not None:
        _defs.CLAIM_LATENCY.labels(workflow).observe(seconds)
        if runs:
            _defs.RUNS_CLAIMED.labels(workflow).inc(runs)


def attempt_started(workflow: str) -> None:
    if _defs is not None:
        _defs.ATTEMPTS_RUNNING.labels(workflow).inc()


def attempt_ended(workflow: str, outcome: str | None, seconds: float) -> None:
    """An attempt of ``workflow`` ended with ``outcome`` (None: its task died or was cancelled
    without saying) after ``seconds``."""
    if _defs is None:
        return
    _defs.ATTEMPTS_RUNNING.labels(workflow).dec()
    _defs.ATTEMPT_DURATION.labels(workflow).observe(seconds)
    if outcome is None:
        return
    _defs.ATTEMPTS.labels(workflow, outcome).inc()
    if outcome in _ENDING:
        _defs.RUNS_ENDED.labels(workflow, outcome).inc()


def requeued(workflow: str, reason: str, runs: int = 1) -> None:
    """``runs`` runs of ``workflow`` were put back in the queue for ``reason``."""
    if _defs is not None and runs:
        _defs.RUNS_REQUEUED.labels(workflow, reason).inc(runs)


def queued(workflow: str, *, limit: int, rate: int, none: int) -> None:
    """A sample of the queue of ``workflow``: how many runs wait behind each kind of gate."""
    if _defs is not None:
        _defs.RUNS_QUEUED.labels(workflow, "limit").set(limit)
        _defs.RUNS_QUEUED.labels(workflow, "rate").set(rate)
        _defs.RUNS_QUEUED.labels(workflow, "none").set(none)


def buffers_open(workflow: str, count: int, *, source: str = "store") -> None:
    """``count`` buffers of ``workflow`` are open: in the store (``source="store"``), or in
    this process's consumer of its trigger topic (``"topic"``)."""
    if _defs is not None:
        _defs.TRIGGER_BUFFERS_OPEN.labels(workflow, source).set(count)


def fired_late(workflow: str, seconds: float) -> None:
    """A trigger buffer of ``workflow`` fired ``seconds`` after it fell due."""
    if _defs is not None:
        _defs.TRIGGER_FIRE_DELAY.labels(workflow).observe(max(0.0, seconds))


def consumer_lag(topic: str, partition: int, group: str, lag: int | None) -> None:
    """The lag of ``group`` on ``partition`` of ``topic``; None: the partition is no longer
    this process's (its series is dropped)."""
    if _defs is None:
        return
    if lag is None:
        with contextlib.suppress(KeyError):
            _defs.CONSUMER_LAG.remove(topic, str(partition), group)
        return
    _defs.CONSUMER_LAG.labels(topic, str(partition), group).set(lag)


def store_error(operation: str) -> None:
    """A store call ``operation`` got no answer."""
    if _defs is not None:
        _defs.STORE_ERRORS.labels(operation).inc()


def store_retried(backend: str) -> None:
    """A store of ``backend`` tries a call again."""
    if _defs is not None:
        _defs.STORE_RETRIES.labels(backend).inc()


def journal_record_dropped(workflow: str, reason: str) -> None:
    """A read of the journal topic did not believe a record of ``workflow``, for ``reason``
    (``epoch``, ``mac`` or ``header``)."""
    if _defs is not None:
        _defs.JOURNAL_RECORDS_DROPPED.labels(workflow, reason).inc()
