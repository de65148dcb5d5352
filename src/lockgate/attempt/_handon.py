"""Handing on a run stamped with out-of-date gates, before its body runs.

A run carries the gates it was stamped with at submit. When the worker that claims it declares
other ones (the decorator changed since, or the run was submitted by name before any policy was
recorded) and its version ranks at least as new as the run's, the run is handed on: one
successor stamped with the worker's gates and version takes its place, and the run ends
``run:continued``. A run whose body has started keeps its gates.
"""

from __future__ import annotations

import logging
from typing import Any

from lockgate._errors import DuplicateRunError, LockgateError
from lockgate.attempt._attempt_core import AttemptCore
from lockgate.stores._gates import Gates
from lockgate.stores._records import gates_payload
from lockgate.workflow._spec import policy_stamp

log = logging.getLogger("lockgate.flow")


def successor_id(run_id: str) -> str:
    """The id of the run ``run_id`` is handed on to: fixed, so a retried hand-on finds it."""
    return f"{run_id}.g"


async def hand_on_if_regated(core: AttemptCore) -> str | None:
    """Hand the claimed run on when its stamped gates are out of date; return the successor's
    id, or None when the run keeps its gates and its body should run here."""
    if core.mode != "live" or core.lease is None:
        return None
    if _is_retry(core.state.init):
        # A retry carries its failed run's journal on; a successor would start it afresh.
        return None
    if "hand_on" not in core.store.capabilities():
        return None
    gates = _own_gates(core)
    if gates is None or not await _ranks_forward(core):
        return None
    successor = successor_id(core.run_id)
    try:
        await core.io(
            core.store.hand_on_run,
            core.spec.name,
            core.run_id,
            core.lease,
            successor,
            version=core.spec.version,
            version_behavior=core.spec.version_behavior,
            gates=gates,
        )
    except DuplicateRunError:
        log.warning(
            "run %s of %s: its gates are out of date, but the successor id %r is another "
            "run's; it runs with the gates it was stamped with",
            core.run_id,
            core.spec.name,
            successor,
        )
        return None
    log.info(
        "run %s of %s: stamped gates %s differ from this worker's %s; handed on to %s",
        core.run_id,
        core.spec.name,
        core.state.init.get("gates"),
        gates_payload(gates),
        successor,
    )
    return successor


def _is_retry(init: dict[str, Any]) -> bool:
    source = (init.get("provenance") or {}).get("source")
    return isinstance(source, dict) and "retry_of" in source


def _own_gates(core: AttemptCore) -> Gates | None:
    """This worker's gates for the run when they differ from those it was stamped with."""
    stamped: Any = core.state.init.get("gates")
    try:
        own = Gates(**policy_stamp(core.spec, core.params))
    except LockgateError as exc:
        log.warning(
            "run %s of %s: this worker cannot resolve its gate keys (%s); it keeps the gates "
            "it was stamped with",
            core.run_id,
            core.spec.name,
            exc,
        )
        return None
    named = gates_payload(own)
    if isinstance(stamped, dict) and stamped.get("unknown"):
        # Nothing was enforced; a worker declaring no gates has nothing to add.
        return own if named else None
    return own if named != (stamped or {}) else None


async def _ranks_forward(core: AttemptCore) -> bool:
    """A hand-on only goes forward: the worker's version ranks above the run's, or level with
    it for a run that is not itself a hand-on (so two builds of one version that declare other
    gates cannot pass a run back and forth). A version never ranked counts as the oldest."""
    theirs = str(core.state.init.get("version") or "")
    provenance = core.state.init.get("provenance")
    source = provenance.get("source") if isinstance(provenance, dict) else None
    handed_on = isinstance(source, dict) and "gated_from" in source
    if theirs == core.spec.version:
        return not handed_on
    if not theirs:
        return True  # submitted by name before any worker said which version serves it
    if "versions" not in core.store.capabilities():
        return False
    # A worker registered its version at start; an inline runner does it here (idempotent).
    own_rank = await core.io(core.store.register_version, core.spec.name, core.spec.version)
    their_rank = await core.io(core.store.version_rank, core.spec.name, theirs)
    if their_rank is None or own_rank > their_rank:
        return True
    return bool(own_rank == their_rank and not handed_on)
