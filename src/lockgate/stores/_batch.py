"""Group commit: many submits made in one store call, each with its own answer.

A server taking many submits at once (``lockgate serve``) gathers those that arrive together
and hands them to a store that can write them in one transaction (:class:`GroupCommitStore`),
paying one trip to the store thread and one commit for the gathering instead of one for each.
Every submit keeps the contract of :meth:`~lockgate.stores.LifecycleStore.submit_run`: what it
alone is refused for (a taken run id, an idempotency conflict) is its own answer, and leaves
the others be.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypedDict, Unpack, runtime_checkable

from lockgate._errors import LockgateError
from lockgate._names import check_new_run
from lockgate.journal._events import RunEvent
from lockgate.stores._records import Submit


@dataclass(frozen=True)
class NewRun:
    """One submit, as :meth:`~lockgate.stores.LifecycleStore.create_run` takes it."""

    submit: Submit
    run_id: str
    headers: dict[str, str] | None = None
    idempotency_key: str | None = None
    idempotency_body_hash: str | None = None
    idempotency_ttl: int = 86_400


class SubmitOptions(TypedDict, total=False):
    """The keywords of :meth:`~lockgate.stores.LifecycleStore.submit_run` after its name, run
    id and params, written once for what passes them on (:func:`new_run`, the client's
    queueing in ``runs/_submit.py``); each means what ``submit_run`` says, with its default."""

    metadata: dict[str, Any] | None
    owner: str | None
    idempotency_key: str | None
    idempotency_body_hash: str | None
    idempotency_ttl: int
    version: str
    version_behavior: str
    concurrency_key: str | None
    concurrency_max: int | None
    rate_key: str | None
    rate_per_second: float | None
    rate_burst: int | None
    provenance: dict[str, Any] | None
    headers: dict[str, str] | None
    start_at: float | None
    gates_unknown: bool
    shard_key: str | None
    seed: Sequence[RunEvent]


def new_run(
    name: str, run_id: str, params: dict[str, Any], **options: Unpack[SubmitOptions]
) -> NewRun:
    """The submit :meth:`~lockgate.stores.LifecycleStore.submit_run` makes of its arguments
    (the same keywords, with the same defaults); a name, id or key the naming rules refuse
    raises :class:`~lockgate.InvalidNameError` here, before anything reaches the store."""
    idempotency_key = options.get("idempotency_key")
    check_new_run(name, run_id, idempotency_key)
    submit = Submit(
        name,
        params,
        options.get("metadata"),
        options.get("owner"),
        options.get("version", ""),
        options.get("version_behavior", "pinned"),
        options.get("concurrency_key"),
        options.get("concurrency_max"),
        options.get("rate_key"),
        options.get("rate_per_second"),
        options.get("rate_burst"),
        options.get("provenance"),
        options.get("start_at"),
        options.get("gates_unknown", False),
        options.get("shard_key"),
        tuple(options.get("seed", ())),
    )
    return NewRun(
        submit,
        run_id,
        options.get("headers"),
        idempotency_key,
        options.get("idempotency_body_hash"),
        options.get("idempotency_ttl", 86_400),
    )


@runtime_checkable
class GroupCommitStore(Protocol):
    """A store that writes many submits in one step."""

    def create_runs(self, runs: Sequence[NewRun]) -> list[str | LockgateError]:
        """:meth:`~lockgate.stores.LifecycleStore.create_run` for each of ``runs``, in order,
        atomically as a whole: each answer is the run's id, or the error that submit alone
        was refused with (nothing of it written). A failure of the store itself raises, and
        writes none of them."""
        ...
