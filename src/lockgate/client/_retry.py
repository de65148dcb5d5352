"""Retrying a run that ended without completing: a new run of the same workflow with the same
params and metadata, whose ``run:init`` names the run it retries.

The retry starts from the top, with a journal of its own: steps the failed run completed run
again (they are the workflow's to make idempotent, as after any crash). Its id is the first
run's id followed by ``.retry{n}``, ``n`` counting the retries of that first run, so a retry of
the same run asked twice (a double click, a client that timed out) is one run. A bound run's
retry keeps its record (``ctx.record``) and its partition's shard.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lockgate._errors import DuplicateRunError, RunNotRetriable
from lockgate.journal._events import EventKind, RunStatus
from lockgate.workflow._spec import get_workflow

if TYPE_CHECKING:
    from lockgate.client._client import RunHandle, WorkflowClient

#: The ``provenance.source`` keys a retry's ``run:init`` holds.
RETRY_OF = "retry_of"
RETRY_ROOT = "retry_root"
RETRY_NUMBER = "retry_number"


async def retry_run(client: WorkflowClient, name: str, run_id: str) -> RunHandle:
    """See :meth:`WorkflowClient.retry`."""
    info = await client._info(name, run_id)
    if not info.status.is_terminal:
        raise RunNotRetriable(
            f"run {run_id} of {name!r} has not ended ({info.status}): only an ended run is "
            f"retried; cancel or terminate it first"
        )
    if info.status == RunStatus.COMPLETE:
        raise RunNotRetriable(f"run {run_id} of {name!r} completed: there is nothing to retry")
    init = await _opening(client, name, run_id)
    source: dict[str, Any] = (init.get("provenance") or {}).get("source") or {}
    root = str(source.get(RETRY_ROOT) or run_id)
    number = int(source.get(RETRY_NUMBER) or 0) + 1
    retry_id = f"{root}.retry{number}"
    spec = get_workflow(name)
    params = dict(info.params)
    if spec is not None:
        params = spec.validate_params(params)
    shard_key = init.get("shard_key")
    try:
        return await client._queue(
            name,
            retry_id,
            params,
            spec,
            metadata=dict(info.metadata),
            owner=info.owner,
            provenance={"source": {RETRY_OF: run_id, RETRY_ROOT: root, RETRY_NUMBER: number}},
            shard_key=shard_key if isinstance(shard_key, str) else None,
        )
    except DuplicateRunError:
        return client.handle(name, retry_id)  # retried already: that retry is this one


async def _opening(client: WorkflowClient, name: str, run_id: str) -> dict[str, Any]:
    """The run's ``run:init`` payload."""
    opening = await client._io(client.store.load_run, name, run_id, max_events=1)
    if opening and opening[0].kind == EventKind.RUN_INIT:
        return dict(opening[0].payload)
    return {}
