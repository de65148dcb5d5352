"""The worker's sampled gauges: how many runs of its workflows wait behind each kind of gate,
and how many trigger buffers are open, asked of the store every ``metrics_interval``.

The cost of a sample is bounded whatever the queue's length: per workflow, one count of its
queued runs, at most ``LIST_MOST`` runs listed (newest first) and ``EXPLAIN_MOST`` of the
queued ones among them asked why they wait, and one read of at most ``BUFFERS_MOST`` open
buffers. Below those bounds the gauges are exact; past them ``gate="limit"`` and
``gate="rate"`` count the newest queued runs only, and ``gate="none"`` the rest of the queue.
"""

from __future__ import annotations

from lockgate.journal._events import RunStatus
from lockgate.metrics import _hooks as metrics
from lockgate.worker._runtime import Runtime
from lockgate.workflow._spec import WorkflowSpec

#: Runs listed per workflow and sample, and queued runs explained among them, at most.
LIST_MOST = 1_000
EXPLAIN_MOST = 200
#: Runs per page of a listing.
PAGE = 200
#: Open trigger buffers counted per workflow and sample, at most.
BUFFERS_MOST = 10_000
#: Later than any buffer's due time: every open buffer is due by then.
_AFTER_ALL = 1e18


async def sample_gauges(rt: Runtime) -> bool:
    """Sample the queue and trigger gauges of every workflow the worker serves."""
    for name, spec in rt.specs.items():
        await _sample_queue(rt, name, spec)
        if spec.trigger is not None and "triggers" in rt.store.capabilities():
            open_keys = await rt.io(rt.store.due_triggers, name, _AFTER_ALL, BUFFERS_MOST)
            metrics.buffers_open(name, len(open_keys))
    return False


async def _sample_queue(rt: Runtime, name: str, spec: WorkflowSpec) -> None:
    pending: int = await rt.io(rt.store.get_pending_count, name)
    gates = {"limit": 0, "rate": 0}
    if pending and (spec.concurrency is not None or spec.rate_limit is not None):
        for run_id in await _queued_ids(rt, name, min(pending, EXPLAIN_MOST)):
            reason = await rt.io(rt.store.explain_wait, name, run_id)
            if reason is not None and reason.gate in gates:
                gates[reason.gate] += 1
    none = max(0, pending - gates["limit"] - gates["rate"])
    metrics.queued(name, limit=gates["limit"], rate=gates["rate"], none=none)


async def _queued_ids(rt: Runtime, name: str, most: int) -> list[str]:
    """Up to ``most`` queued runs of ``name`` among its newest ``LIST_MOST``."""
    found: list[str] = []
    cursor: str | None = None
    listed = 0
    while listed < LIST_MOST and len(found) < most:
        page, cursor = await rt.io(rt.store.list_runs, name, limit=PAGE, cursor=cursor)
        listed += len(page)
        found.extend(info.run_id for info in page if info.status == RunStatus.PENDING)
        if cursor is None or not page:
            break
    return found[:most]
