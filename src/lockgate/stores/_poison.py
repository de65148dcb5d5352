"""Poison runs: how a store judges a run whose holder's lease lapsed (its worker died or froze)
against the poison policy of the worker that finds the lapse.

Every crash counted is a time on the store's clock kept with the run. Crashes older than the
policy's ``retry_ttl_s`` are forgotten; progress does not reset them (a body that finishes a
step and then takes its worker down each time still keeps taking workers down). The crash that
brings the run past ``max_retries`` crashes inside the window ends it with ``run:error`` code
``quarantined`` instead of requeueing it: its slot and lock are freed, and a retry
(``lockgate runs retry``) starts it again from its journal.

A lapse of a lease whose worker saw its own event loop blocked (``note_loop_blocked``, with no
heartbeat since) is a *loop-blocked* lapse: counted as a crash only when the policy's
``counts_loop_blocked`` says so; otherwise it is requeued like any other lapse, which the
store's ``max_retries`` (lapses since the run's last progress) still counts.

Memory and SQLite share :func:`judge_lapse`; the Valkey script ``_lib.lua`` (``lapse``) is the
same rule in Lua.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from lockgate.journal._events import EventKind, RunEvent


@dataclass(frozen=True)
class PoisonPolicy:
    """A worker's poison rule, passed to the store calls that count a lapsed lease
    (``recover_pending_runs``, ``claim_run``): quarantine a run at its crash number
    ``max_retries + 1`` within ``retry_ttl_s`` seconds. Built from ``WorkerOptions``."""

    max_retries: int = 3
    retry_ttl_s: float = 3600.0
    counts_loop_blocked: bool = True

    def script_args(self) -> tuple[str, str, str]:
        """The policy as a Valkey script's arguments."""
        return (
            str(self.max_retries),
            repr(float(self.retry_ttl_s)),
            "1" if self.counts_loop_blocked else "0",
        )


#: The ``script_args`` of no policy: lapses are requeued as before, nothing is counted.
NO_POLICY_ARGS = ("", "", "")


@dataclass(frozen=True)
class Lapse:
    """What one lapse does to a run: the crash times to keep, the ``run:error`` payload that
    quarantines it (or None), and what its ``run:requeued`` adds when it is requeued."""

    crashes: list[float]
    quarantine: dict[str, Any] | None
    requeued: dict[str, Any]


def judge_lapse(
    crashes: Sequence[float], now: float, policy: PoisonPolicy | None, *, loop_blocked: bool
) -> Lapse:
    """Count a lapsed lease found at ``now`` against ``policy``; see the module docstring."""
    if policy is None:
        return Lapse(list(crashes), None, {"loop_blocked": True} if loop_blocked else {})
    kept = [at for at in crashes if at > now - policy.retry_ttl_s]
    counted = policy.counts_loop_blocked or not loop_blocked
    requeued: dict[str, Any] = {"loop_blocked": True} if loop_blocked else {}
    if not counted:
        return Lapse(kept, None, requeued)
    kept.append(now)
    if len(kept) > policy.max_retries:
        return Lapse(kept, quarantine_payload(kept, policy, loop_blocked=loop_blocked), {})
    requeued.update(crash_at=now, crashes=len(kept))
    return Lapse(kept, None, requeued)


def quarantine_payload(
    crashes: Sequence[float], policy: PoisonPolicy, *, loop_blocked: bool
) -> dict[str, Any]:
    """The ``run:error`` that quarantines a run after ``crashes`` (the last one now)."""
    message = (
        f"quarantined: the run took its worker down {len(crashes)} times within "
        f"{policy.retry_ttl_s:g}s (poison_max_retries={policy.max_retries})"
    )
    return {
        "code": "quarantined",
        "message": message,
        "error": {"type": "lockgate:quarantined", "message": message, "code": "quarantined"},
        "detail": {
            "crashes": len(crashes),
            "first_crash_at": crashes[0],
            "last_crash_at": crashes[-1],
            "window_s": policy.retry_ttl_s,
            "max_retries": policy.max_retries,
            "loop_blocked": loop_blocked,
        },
    }


def crashes_in(events: Iterable[RunEvent]) -> list[float]:
    """The crash times a journal records (the ``crash_at`` of its counted lapses): what a
    lifecycle tier rebuilt from the journal keeps for the run."""
    return [
        float(e.payload["crash_at"])
        for e in events
        if e.kind == EventKind.RUN_REQUEUED and isinstance(e.payload.get("crash_at"), int | float)
    ]
