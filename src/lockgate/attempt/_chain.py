"""``ctx.continue_as_new``: ending a run and starting its successor in one store step.

A run that would grow without end (a counter fed by signals for months, a per-key run that
accumulates events) hands its state to a fresh run instead. The successor is a submit path like
any other: its params are checked against the body and its gates are stamped from them. It
records its predecessor and its place in the chain (root and hop) in provenance, and the store
moves to it, in the same step that ends the run ``run:continued``, everything the run held
undelivered: buffered signals and their send keys, pending updates, a latched cancel or pause.
The chain's tail record is then moved forward, so any id of the chain finds the live run in a
constant number of reads (``runs/_chains.py``).
"""

from __future__ import annotations

import logging
from typing import Any, NoReturn

from lockgate._errors import ConfigurationError
from lockgate.attempt._attempt_core import AttemptCore
from lockgate.attempt._unwind import Abort, ReplayExhausted, Unwind
from lockgate.stores._calls import call_store
from lockgate.stores._chains import ChainLink, chain_link, successor_run_id
from lockgate.stores._gates import Gates
from lockgate.stores._records import Continuation
from lockgate.workflow._spec import policy_stamp

log = logging.getLogger("lockgate.chains")


class Continued(Unwind):
    """The run ended ``run:continued``: its successor carries the work on."""

    def __init__(self, successor: ChainLink) -> None:
        super().__init__(successor.run_id)
        self.successor = successor


async def continue_as_new(core: AttemptCore, params: dict[str, Any]) -> NoReturn:
    """End ``core``'s run and start its successor with ``params`` (see the module's doc)."""
    if core.mode == "query":
        raise ReplayExhausted()
    if core.reject_continue_as_new:
        raise Abort(
            ConfigurationError(
                f"run {core.run_id!r} of {core.spec.name!r} called ctx.continue_as_new, which "
                f"this runner refuses (reject_continue_as_new=True)"
            )
        )
    params = core.spec.validate_params(params)
    gates = Gates(**policy_stamp(core.spec, params))
    link = chain_link(core.state.init, core.spec.name, core.run_id)
    successor = link.successor(core.spec.name, successor_run_id(link))
    shard_key = core.state.init.get("shard_key")
    continuation = Continuation(
        params=params,
        version=core.spec.version,
        version_behavior=core.spec.version_behavior,
        gates=gates,
        provenance={
            "source": {
                **_inherited(core.state.init),
                "continued_from": core.run_id,
                **successor.provenance_source(),
            }
        },
        continued=successor.continued_payload(),
        shard_key=shard_key if isinstance(shard_key, str) and shard_key else link.root_run_id,
    )
    await core.flush()
    await _clear_what_was_delivered(core)
    await core.io(
        core.store.continue_run,
        core.spec.name,
        core.run_id,
        core.lease,
        successor.run_id,
        continuation,
    )
    await advance_tail(core, successor)
    raise Continued(successor)


#: Provenance facts that belong to one run, not to the chain it starts: each successor
#: records its own. Anything else (a child's parent, say) carries down the chain.
_OWN_PROVENANCE = frozenset(
    {
        "continued_from",
        "chain_root_name",
        "chain_root_run_id",
        "chain_hop",
        "gated_from",
        "retry_of",
        "retry_root",
        "retry_number",
    }
)


def _inherited(init: dict[str, Any]) -> dict[str, Any]:
    provenance = init.get("provenance")
    source = provenance.get("source") if isinstance(provenance, dict) else None
    if not isinstance(source, dict):
        return {}
    return {k: v for k, v in source.items() if k not in _OWN_PROVENANCE}


async def _clear_what_was_delivered(core: AttemptCore) -> None:
    """Take off the run's inbox what its journal says was delivered already, so the store
    does not move it to the successor to be delivered again: a signal journaled received by
    an attempt that died before popping it, and an update journaled applied but not settled."""
    name, run_id = core.spec.name, core.run_id
    for record in list(core.state.calls.values()):
        if record.outcome == "received" and record.signal_id:
            await core.io(core.store.pop_signal_match, name, run_id, record.name, record.signal_id)
    if not core.state.journaled_update_outcomes or "updates" not in core.store.capabilities():
        return
    for update in await core.io(core.store.peek_pending_updates, name, run_id):
        update_id = str(update["update_id"])
        journaled = core.state.journaled_update_outcomes.get(update_id)
        if journaled is not None:
            outcome = {k: v for k, v in journaled.items() if k != "update_id"}
            await core.settle(update_id, outcome)


async def advance_tail(core: AttemptCore, link: ChainLink) -> None:
    """Move the chain's tail record to ``link``. The run has ended already, so a failure here
    loses nothing: a resolve follows ``run:continued`` from wherever the record stands."""
    if "chains" not in core.store.capabilities():
        return
    try:
        await call_store(core.store, core.store.advance_chain_tail, link)
    except Exception as exc:
        log.warning(
            "chain of %s: its tail record stays behind hop %d: %s", link.root_run_id, link.hop, exc
        )


async def close_if_chained(core: AttemptCore) -> None:
    """Record a chain's last link as final once it ends another way than continuing."""
    if "chains" not in core.store.capabilities():
        return
    link = chain_link(core.state.init, core.spec.name, core.run_id)
    if link.hop == 0:
        return
    try:
        await call_store(core.store, core.store.close_chain, link)
    except Exception as exc:
        log.warning("chain of %s: its end was not recorded: %s", link.root_run_id, exc)
