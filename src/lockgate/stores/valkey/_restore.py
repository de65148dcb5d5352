"""Restoring a run the Valkey tier lost, from what its journal says (``lockgate store rebuild``).

The journal side (``stores/composite/_rebuild``) reads and folds each run's journal into a
:class:`JournaledRun`; this module lays it out as the Valkey store keeps a run (its hash
fields, outbox, wait, queue entry), and ``restore_run.lua`` writes it in one step, or nothing
when the run exists. What Valkey kept and no journal holds is not here: see
``docs/kafka.md``, "Rebuilding Valkey from the journal".
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from lockgate.journal._events import RunEvent, RunStatus
from lockgate.stores._gates import fair_bucket
from lockgate.stores._records import Submit
from lockgate.stores._types import WaitSpec
from lockgate.stores.valkey._lifecycle import run_fields

Mode = Literal["queue", "wait", "ended"]


@dataclass
class JournaledRun:
    """One run as its journal tells it, everything a restore writes.

    ``status`` is what the run is restored as: a terminal status, or ``pending`` (queued,
    claimable at once), ``sleeping`` / ``signal_waiting`` / ``paused`` (parked on ``wait``).
    ``outbox`` is the whole journal of a live run (empty for one that ended). ``epoch`` is the
    highest fencing epoch its journal holds and ``last_seq`` its highest ``run_seq``, so the
    next claim and append come after every event already journaled."""

    name: str
    run_id: str
    shard: int
    submit: Submit
    submitted_at: float
    status: RunStatus
    last_seq: int
    epoch: int
    journal_at: tuple[int, int]
    wait: WaitSpec | None = None
    ended_at: float | None = None
    continued_to: str | None = None
    cancel: tuple[str, Any] | None = None  # (requested at, detail) of a latched cancel
    pause_at: str | None = None
    owner_gone: int = 0
    store_requeues: int = 0
    #: Counted crashes (``crash_at`` of its requeues; see ``stores/_poison.py``).
    crashes: list[float] = field(default_factory=list)
    idempotency: tuple[str, str, float] | None = None  # key, body hash, expires at
    outbox: Sequence[RunEvent] = field(default_factory=list)

    @property
    def mode(self) -> Mode:
        if self.status.is_terminal:
            return "ended"
        return "wait" if self.status != RunStatus.PENDING else "queue"


def _dumps(value: Any) -> str:
    return json.dumps(value, allow_nan=False, separators=(",", ":"))


def hash_fields(run: JournaledRun) -> list[Any]:
    """The run's hash fields (a flat list) as a submit writes them, then what its life since
    set: its counters, latches, terminal and journal position."""
    flat = run_fields(run.submit, fair_bucket(run.submit.owner, run.submit.gates))
    extra: dict[str, Any] = {
        "submitted_at": repr(float(run.submitted_at)),
        "last_seq": run.last_seq,
        "epoch": run.epoch,
        "owner_gone": run.owner_gone,
        "store_requeues": run.store_requeues,
        "journal_at": f"{run.journal_at[0]}:{run.journal_at[1]}",
    }
    if run.crashes:
        extra["crashes"] = _dumps(run.crashes)
    if run.idempotency is not None:
        extra["idem"] = run.idempotency[0]
    if run.cancel is not None:
        extra["cancel_at"], extra["cancel_detail"] = run.cancel[0], _dumps(run.cancel[1] or {})
    if run.pause_at is not None:
        extra["pause_at"] = run.pause_at
    if run.status.is_terminal:
        extra["terminal"] = run.status.value
        extra["ended_at"] = repr(float(run.ended_at or 0.0))
        if run.continued_to is not None:
            extra["continued_to"] = run.continued_to
    for key, value in extra.items():
        flat.extend([key, value])
    return flat


def restore_args(run: JournaledRun) -> tuple[str, ...]:
    """The ``restore_run`` script's arguments for ``run``."""
    outbox = [
        [
            str(e.run_seq),
            e.kind,
            _dumps(e.payload),
            e.schema_version,
            _dumps(dict(e.headers)),
        ]
        for e in (run.outbox if run.mode != "ended" else ())
    ]
    wait = run.wait
    return (
        run.name,
        run.run_id,
        _dumps(hash_fields(run)),
        _dumps(outbox),
        _dumps(wait.to_dict()) if wait is not None else "",
        repr(float(wait.due_at)) if wait is not None and wait.due_at is not None else "",
        run.mode,
        repr(float(run.ended_at or 0.0)),
    )
