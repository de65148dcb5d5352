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
from typing import Any, Protocol, runtime_checkable

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


def new_run(
    name: str,
    run_id: str,
    params: dict[str, Any],
    *,
    metadata: dict[str, Any] | None = None,
    owner: str | None = None,
    idempotency_key: str | None = None,
    idempotency_body_hash: str | None = None,
    idempotency_ttl: int = 86_400,
    version: str = "",
    version_behavior: str = "pinned",
    concurrency_key: str | None = None,
    concurrency_max: int | None = None,
    rate_key: str | None = None,
    rate_per_second: float | None = None,
    rate_burst: int | None = None,
    provenance: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
    start_at: float | None = None,
    gates_unknown: bool = False,
    shard_key: str | None = None,
    seed: Sequence[RunEvent] = (),
) -> NewRun:
    """The submit :meth:`~lockgate.stores.LifecycleStore.submit_run` makes of its arguments
    (the same keywords); a name, id or key the naming rules refuse raises
    :class:`~lockgate.InvalidNameError` here, before anything reaches the store."""
    check_new_run(name, run_id, idempotency_key)
    submit = Submit(
        name,
        params,
        metadata,
        owner,
        version,
        version_behavior,
        concurrency_key,
        concurrency_max,
        rate_key,
        rate_per_second,
        rate_burst,
        provenance,
        start_at,
        gates_unknown,
        shard_key,
        tuple(seed),
    )
    return NewRun(submit, run_id, headers, idempotency_key, idempotency_body_hash, idempotency_ttl)


@runtime_checkable
class GroupCommitStore(Protocol):
    """A store that writes many submits in one step."""

    def create_runs(self, runs: Sequence[NewRun]) -> list[str | LockgateError]:
        """:meth:`~lockgate.stores.LifecycleStore.create_run` for each of ``runs``, in order,
        atomically as a whole: each answer is the run's id, or the error that submit alone
        was refused with (nothing of it written). A failure of the store itself raises, and
        writes none of them."""
        ...
