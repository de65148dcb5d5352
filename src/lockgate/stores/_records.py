"""What every backend writes the same way: the payloads of store-written events, the rules of
requeue budgets, and how a run's status is derived from what the store holds."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypedDict

from lockgate._errors import IdempotencyConflict
from lockgate.journal._events import EventKind, RunEvent, RunStatus
from lockgate.stores._gates import Gates

WAIT_STATUS = {
    "start": RunStatus.SLEEPING,
    "sleep": RunStatus.SLEEPING,
    "signal": RunStatus.SIGNAL_WAITING,
    "pause": RunStatus.PAUSED,
    "interrupt": RunStatus.INTERRUPTED,
}

#: Events that count as progress: each resets a run's requeue budgets.
PROGRESS_KINDS = frozenset({EventKind.STEP_DONE, EventKind.RUN_UPDATE_COMPLETED})


def derive_status(
    *,
    terminal: RunStatus | None,
    lock_live: bool,
    lock_set: bool,
    wait_kind: str | None,
    queued: bool,
) -> RunStatus:
    """A run's status from the facts a store keeps (see ``LifecycleStore.get_run``)."""
    if terminal is not None:
        return terminal
    if lock_live:
        return RunStatus.IN_PROGRESS
    if wait_kind is not None and not queued:
        return WAIT_STATUS[wait_kind]
    if lock_set and not queued:
        return RunStatus.IN_PROGRESS  # its holder's lease lapsed; awaiting recovery
    return RunStatus.PENDING


def with_payload(event: RunEvent, payload: dict[str, Any]) -> RunEvent:
    return RunEvent(
        event.kind, payload, event.run_id, event.schema_version, event.run_seq, dict(event.headers)
    )


class CreateOptions(TypedDict, total=False):
    """The keywords of :meth:`~lockgate.stores.LifecycleStore.create_run` after the submit
    and the run id, for what passes them on to a backend's variant of it; each means what
    ``create_run`` says, with its default."""

    headers: dict[str, str] | None
    idempotency_key: str | None
    idempotency_body_hash: str | None
    idempotency_ttl: int


@dataclass(frozen=True)
class Submit:
    """One submit's fields, as every store records them in ``run:init``."""

    name: str
    params: dict[str, Any]
    metadata: dict[str, Any] | None
    owner: str | None
    version: str
    version_behavior: str
    concurrency_key: str | None
    concurrency_max: int | None
    rate_key: str | None
    rate_per_second: float | None
    rate_burst: int | None
    provenance: dict[str, Any] | None
    start_at: float | None
    #: Submitted by name before any worker recorded the workflow's policy: the gates are not
    #: known, so none is enforced and the first worker to claim it hands it on with its own.
    gates_unknown: bool = False
    #: What the run's shard is hashed from when it has no gate: a bound run's topic partition,
    #: so the runs of one partition share a shard (None: its run id).
    shard_key: str | None = None
    #: Events journaled right after ``run:init``, in the same step: a retry's copy of what the
    #: run it retries recorded (see ``runs/_retry.py``).
    seed: tuple[RunEvent, ...] = ()

    @property
    def gates(self) -> Gates:
        return Gates(
            self.concurrency_key,
            self.concurrency_max,
            self.rate_key,
            self.rate_per_second,
            self.rate_burst,
        )

    def init_payload(self, now: float) -> dict[str, Any]:
        gates = {"unknown": True} if self.gates_unknown else gates_payload(self.gates)
        payload: dict[str, Any] = {
            "name": self.name,
            "params": dict(self.params),
            "metadata": dict(self.metadata or {}),
            "owner": self.owner,
            "version": self.version,
            "version_behavior": self.version_behavior,
            "submitted_at": now,
            "gates": gates,
        }
        if self.provenance:
            payload["provenance"] = dict(self.provenance)
        if self.start_at is not None:
            payload["start_at"] = self.start_at
        if self.shard_key is not None:
            payload["shard_key"] = self.shard_key
        return payload

    def opening_events(
        self, run_id: str, now: float, headers: dict[str, str] | None
    ) -> list[RunEvent]:
        """``run:init``, the seed, and the delayed start's ``run:sleeping`` when it starts
        later."""
        events = [
            RunEvent(
                EventKind.RUN_INIT, self.init_payload(now), run_id, headers=dict(headers or {})
            )
        ]
        events.extend(
            RunEvent(e.kind, dict(e.payload), run_id, headers=dict(e.headers)) for e in self.seed
        )
        if self.delayed(now):
            assert self.start_at is not None
            events.append(
                RunEvent(
                    EventKind.RUN_SLEEPING,
                    {
                        "call_index": -1,
                        "wait_id": "start",
                        "wake_at": self.start_at,
                        "name": "start",
                    },
                    run_id,
                )
            )
        return events

    def delayed(self, now: float) -> bool:
        return self.start_at is not None and self.start_at > now

    def keep_key_for(self, ttl: float, now: float) -> float:
        """Seconds from ``now`` an idempotency key of this submit is kept: ``ttl`` past the
        run's start, so a key is never forgotten before its delayed run begins."""
        return ttl + max(0.0, (self.start_at or now) - now)


def idempotency_conflict(name: str, key: str, first_run_id: str) -> IdempotencyConflict:
    """The refusal of a key reused for a request other than the one that first used it."""
    return IdempotencyConflict(
        f"idempotency key {key!r} of {name!r} was first used for a different request (run "
        f"{first_run_id!r}); that run is unchanged"
    )


def successor_submit(
    name: str,
    run_id: str,
    params: dict[str, Any],
    metadata: dict[str, Any] | None,
    owner: str | None,
    *,
    version: str,
    version_behavior: str,
    gates: Gates,
    init: dict[str, Any] | None = None,
) -> Submit:
    """The submit of the run ``run_id`` is handed on to (see ``ControlStore.hand_on_run``).

    The successor takes the run's place whole: what the run's ``run:init`` (``init``) records
    of where it comes from (a chain's root and hop, a child's parent) carries over, with
    ``gated_from`` naming the run, and so does its shard key. A run that was no hop of a chain
    becomes its successor's chain root (hop 0), so a chain the successor starts is keyed by
    the id its callers hold."""
    source: dict[str, Any] = dict(init_source(init))
    if "chain_hop" not in source:
        source.update(chain_root_name=name, chain_root_run_id=run_id, chain_hop=0)
    source["gated_from"] = run_id
    shard_key = (init or {}).get("shard_key")
    return Submit(
        name,
        params,
        metadata,
        owner,
        version,
        version_behavior,
        gates.concurrency_key,
        gates.concurrency_max,
        gates.rate_key,
        gates.rate_per_second,
        gates.rate_burst,
        {"source": source},
        None,
        shard_key=shard_key if isinstance(shard_key, str) and shard_key else None,
    )


def init_source(init: dict[str, Any] | None) -> dict[str, Any]:
    """``provenance.source`` of a ``run:init`` payload ({} when it records none)."""
    provenance = (init or {}).get("provenance")
    source = provenance.get("source") if isinstance(provenance, dict) else None
    return dict(source) if isinstance(source, dict) else {}


@dataclass(frozen=True)
class Continuation:
    """What a run continued as new (``ctx.continue_as_new``) is followed by: its successor's
    params and stamp (version, gates: a successor is a submit path like any other), the
    provenance naming its place in the chain, and the ``run:continued`` that ends the run."""

    params: dict[str, Any]
    version: str
    version_behavior: str
    gates: Gates
    provenance: dict[str, Any]
    continued: dict[str, Any]
    #: Where the successor is placed when it has no gate: the run's own place, so each hop of
    #: a chain lands in the shard of the one before and the hand-over is one step.
    shard_key: str | None = None

    def submit(self, name: str, metadata: dict[str, Any] | None, owner: str | None) -> Submit:
        """The successor's submit: the run's metadata and owner carry over."""
        gates = self.gates
        return Submit(
            name,
            dict(self.params),
            metadata,
            owner,
            self.version,
            self.version_behavior,
            gates.concurrency_key,
            gates.concurrency_max,
            gates.rate_key,
            gates.rate_per_second,
            gates.rate_burst,
            dict(self.provenance),
            None,
            shard_key=self.shard_key,
        )


#: How a run handed on builds its successor: from the run's params, metadata, owner and
#: ``run:init`` payload, the successor's submit and the ``run:continued`` that ends the run.
SuccessorPlan = Callable[
    [dict[str, Any], dict[str, Any] | None, str | None, dict[str, Any]],
    tuple[Submit, dict[str, Any]],
]


def gated_successor(
    name: str, run_id: str, successor_id: str, *, version: str, version_behavior: str, gates: Gates
) -> SuccessorPlan:
    """The plan of a hand-on to new gates (see ``ControlStore.hand_on_run``)."""

    def plan(
        params: dict[str, Any],
        metadata: dict[str, Any] | None,
        owner: str | None,
        init: dict[str, Any],
    ) -> tuple[Submit, dict[str, Any]]:
        submit = successor_submit(
            name,
            run_id,
            params,
            metadata,
            owner,
            version=version,
            version_behavior=version_behavior,
            gates=gates,
            init=init,
        )
        return submit, continued_payload(name, successor_id, gates)

    return plan


def continued_successor(name: str, continuation: Continuation) -> SuccessorPlan:
    """The plan of a ``continue_as_new`` (see ``ControlStore.continue_run``)."""

    def plan(
        params: dict[str, Any],
        metadata: dict[str, Any] | None,
        owner: str | None,
        init: dict[str, Any],
    ) -> tuple[Submit, dict[str, Any]]:
        return continuation.submit(name, metadata, owner), dict(continuation.continued)

    return plan


def handed_on_to(last: RunEvent | None, successor_id: str) -> bool:
    """Whether a run's last event already hands it on to ``successor_id`` (a repeated call)."""
    return (
        last is not None
        and last.kind == EventKind.RUN_CONTINUED
        and last.payload.get("run_id") == successor_id
    )


def gates_payload(gates: Gates) -> dict[str, Any]:
    """Gates as ``run:init`` names them: ``{}`` for none, else ``concurrency`` and ``rate``."""
    named: dict[str, Any] = {}
    if gates.concurrency_key is not None:
        named["concurrency"] = {"key": gates.concurrency_key, "max": gates.concurrency_max}
    if gates.rate_key is not None:
        named["rate"] = {
            "key": gates.rate_key,
            "per_second": gates.rate_per_second,
            "burst": gates.rate_burst,
        }
    return named


def continued_payload(name: str, successor_id: str, gates: Gates) -> dict[str, Any]:
    """The ``run:continued`` that ends a run handed on to ``successor_id``."""
    return {
        "name": name,
        "run_id": successor_id,
        "reason": "gates",
        "gates": gates_payload(gates),
    }


def requeue_outcome(
    reason: str,
    owner_gone: int,
    store_requeues: int,
    max_retries: int,
    max_store_requeues: int,
    extra: dict[str, Any] | None = None,
) -> tuple[int, int, str, dict[str, Any]]:
    """Count one requeue against its budget: the new counters, and the event to journal
    (``run:requeued``, with ``extra`` in its payload, or ``run:error`` once the budget is
    spent)."""
    if reason == "store_unavailable":
        store_requeues += 1
        count, over, code = store_requeues, store_requeues > max_store_requeues, reason
    else:
        owner_gone += 1
        count, over, code = owner_gone, owner_gone > max_retries, "max_retries"
    if over:
        payload = {
            "code": code,
            "message": f"run requeued too often ({reason})",
            "error": {"type": "lockgate:requeue_budget", "message": reason, "code": code},
        }
        return owner_gone, store_requeues, EventKind.RUN_ERROR, payload
    requeued = {"reason": reason, "count": count, **(extra or {})}
    return owner_gone, store_requeues, EventKind.RUN_REQUEUED, requeued


def terminated_payload(
    now: str, reason: str | None, requested_by: str | None, cause: dict[str, Any] | None
) -> dict[str, Any]:
    return {
        "code": "terminated",
        "message": f"terminated: {reason or 'no reason given'}",
        "error": {"type": "lockgate:terminated", "message": reason or "", "code": "terminated"},
        "detail": {
            "terminated_at": now,
            "reason": reason,
            "requested_by": requested_by,
            "cause": cause,
        },
    }
