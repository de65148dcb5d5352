"""The console's read-only pages: the workflows overview, the runs list, search and a run."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, Depends, Query, Request
from starlette.responses import Response

from lockgate._errors import LockgateError
from lockgate.console._queries import (
    MAX_GATE_READS,
    MAX_LIST_READS,
    OVERVIEW_BUFFERS,
    OVERVIEW_RUNS,
    PAGE_ROWS,
    BadQuery,
    RunFilter,
    buffer_summary,
    list_page,
    parse_since,
    parse_status,
    workflow_stats,
)
from lockgate.console._sessions import Session
from lockgate.console._timeline import timeline
from lockgate.console._web import (
    PREFIX,
    Refused,
    Segment,
    api_of,
    redirect,
    render,
    run_path,
    static_file,
    viewer,
)
from lockgate.journal._events import EventKind, RunEvent, RunStatus
from lockgate.runs._chains import resolve_continuation
from lockgate.stores._calls import call_store
from lockgate.stores._types import RunInfo
from lockgate.workflow._record import RECORD_METADATA
from lockgate.workflow._spec import WorkflowSpec

#: Journal events a run page shows at most (the first ones; the run's end is always shown).
MAX_TIMELINE = 1000
#: What a query string's field may hold.
Field = Annotated[str | None, Query(max_length=1000)]

pages = APIRouter(prefix=PREFIX, include_in_schema=False)
Viewer = Annotated[Session, Depends(viewer)]


@pages.get("")
async def root(request: Request) -> Response:
    return redirect(request, PREFIX + "/")


@pages.get("/static/{asset}")
async def static(asset: str) -> Response:
    found = static_file(asset)
    if found is None:
        raise Refused(404, f"no asset {asset!r}")
    body, kind = found
    return Response(body, media_type=kind, headers={"Cache-Control": "public, max-age=300"})


@pages.get("/")
async def overview(request: Request, session: Viewer) -> Response:
    """Per served workflow: counts by status, the last hour's throughput and failure rate,
    and p50/p95 duration, from its newest runs; a Collect or Debounce workflow's open buffers
    (a triggered workflow's events wait in them, runs only once they fire)."""
    api = api_of(request)
    names = sorted(api.served)
    stats = await asyncio.gather(*(workflow_stats(api.store, name) for name in names))
    triggered = [name for name in names if api.served[name].trigger is not None]
    held = await asyncio.gather(*(buffer_summary(api.store, name) for name in triggered))
    return render(
        request,
        "overview.html",
        session=session,
        title="Workflows",
        stats=stats,
        statuses=[s.value for s in RunStatus],
        looked_at=OVERVIEW_RUNS,
        buffers=dict(zip(triggered, held, strict=True)),
        buffers_read=OVERVIEW_BUFFERS,
        kafka_journal=_has_kafka_journal(api.store),
    )


def _has_kafka_journal(store: object) -> bool:
    from lockgate.streams._topics import kafka_journal  # the Kafka modules only when asked

    return kafka_journal(store) is not None


@pages.get("/runs")
async def runs(
    request: Request,
    session: Viewer,
    workflow: Field = None,
    status: Field = None,
    owner: Field = None,
    gate: Field = None,
    since: Field = None,
    cursor: Field = None,
) -> Response:
    """Runs, newest first per workflow, filtered, a page at a time."""
    api = api_of(request)
    chosen = (workflow or "").strip() or None
    form = {
        "workflow": chosen or "",
        "status": status or "",
        "owner": owner or "",
        "gate": gate or "",
        "since": since or "",
    }
    try:
        if chosen is not None and chosen not in api.served:
            raise BadQuery(f"no workflow {chosen!r} is served here")
        query = RunFilter(
            workflow=chosen,
            status=parse_status(status),
            owner=(owner or "").strip() or None,
            gate=(gate or "").strip() or None,
            since=parse_since(since),
        )
        names = [chosen] if chosen is not None else sorted(api.served)
        page = await list_page(api.store, names, query, cursor)
    except BadQuery as exc:
        return render(
            request,
            "runs.html",
            status=400,
            session=session,
            title="Runs",
            form=form,
            statuses=[s.value for s in RunStatus],
            error=str(exc),
            page=None,
            next_query="",
            limits=_limits(),
        )
    following = {k: v for k, v in form.items() if v}
    if page.next_cursor:
        following["cursor"] = page.next_cursor
    return render(
        request,
        "runs.html",
        session=session,
        title="Runs",
        form=form,
        statuses=[s.value for s in RunStatus],
        error=None,
        page=page,
        next_query="&".join(f"{k}={_q(v)}" for k, v in following.items())
        if page.next_cursor
        else "",
        limits=_limits(),
    )


def _limits() -> dict[str, int]:
    return {"rows": PAGE_ROWS, "list_reads": MAX_LIST_READS, "gate_reads": MAX_GATE_READS}


def _q(value: str) -> str:
    return quote(value, safe="")


@pages.get("/search")
async def search(request: Request, session: Viewer, q: Field = None) -> Response:
    """A run id, of any served workflow, to the page of the run that carries its work now
    (a chain's root or a run that handed on leads to the live one)."""
    api = api_of(request)
    run_id = (q or "").strip()
    if not run_id:
        return redirect(request, PREFIX + "/runs")
    for name in sorted(api.served):
        info = await call_store(api.store, api.store.get_run, name, run_id)
        if info is None:
            continue
        try:
            tail_name, tail_id, _ = await call_store(
                api.store, resolve_continuation, api.store, name, run_id
            )
        except LockgateError:
            tail_name, tail_id = name, run_id  # a chain that cannot be followed: the run itself
        return redirect(request, f"{PREFIX}/runs/{_q(tail_name)}/{_q(tail_id)}")
    return render(
        request,
        "not_found.html",
        status=404,
        session=session,
        title="Not found",
        message=f"no run {run_id!r} in any workflow served here",
    )


def gate_lines(spec: WorkflowSpec | None, gates: dict[str, Any]) -> list[str]:
    """The run's stamped gates (its ``run:init``'s) as lines such as
    ``Limit tenant=acme (max 2)``, naming the parameter the workflow keys on."""
    lines = []
    limit, rate = gates.get("concurrency"), gates.get("rate")
    if isinstance(limit, dict):
        param = _key_param(spec.concurrency.key if spec and spec.concurrency else None)
        lines.append(f"Limit {param}={limit.get('key')} (max {limit.get('max')})")
    if isinstance(rate, dict):
        param = _key_param(spec.rate_limit.key if spec and spec.rate_limit else None)
        lines.append(
            f"Rate {param}={rate.get('key')} ({rate.get('per_second')}/s, "
            f"burst {rate.get('burst')})"
        )
    return lines


def _key_param(key: Any) -> str:
    return key if isinstance(key, str) else "key"


@pages.get("/runs/{name}/{run_id}")
async def run_page(request: Request, session: Viewer, name: Segment, run_id: Segment) -> Response:
    """A run: params, outcome, gates and why it waits, its journal, and (admin) actions."""
    api = api_of(request)
    if name not in api.served:
        raise Refused(404, f"no workflow {name!r} is served here")
    info = await call_store(api.store, api.store.get_run, name, run_id)
    if info is None:
        raise Refused(404, f"no run {run_id!r} of {name!r}")
    assert isinstance(info, RunInfo)
    events: list[RunEvent] = await call_store(
        api.store, api.store.load_run, name, run_id, max_events=MAX_TIMELINE
    )
    cut = len(events) >= MAX_TIMELINE
    last = await call_store(api.store, api.store.get_last_event, name, run_id) if cut else None
    last = last or (events[-1] if events else None)
    if cut and last is not None and last.run_seq != events[-1].run_seq:
        events.append(last)
    opening = events[0] if events and events[0].kind == EventKind.RUN_INIT else None
    stamped = opening.payload.get("gates") if opening else None
    gates = stamped if isinstance(stamped, dict) else {}
    try:
        waiting = await api.client.why_waiting(name, run_id)
    except LockgateError as exc:
        waiting = f"cannot tell: {exc}"
    outcome = last if last is not None and last.is_terminal else None
    return render(
        request,
        "run.html",
        session=session,
        title=f"{name} {run_id}",
        info=info,
        gates=gate_lines(api.served.get(name), gates),
        waiting=waiting,
        groups=timeline(events),
        shown_events=len(events),
        cut=cut,
        outcome=outcome,
        successor=outcome.payload if outcome and outcome.kind == EventKind.RUN_CONTINUED else None,
        live=not info.status.is_terminal,
        duration=(info.ended_at - info.submitted_at) if info.ended_at is not None else None,
        run_path=run_path(name, run_id),
        record=record_of(info),
    )


def record_of(info: RunInfo) -> dict[str, Any] | None:
    """Where the record a bound run was started for was read (topic, partition, offset, key,
    timestamp), as its consumer put it in the run's metadata; None for a run no record started."""
    meta = info.metadata.get(RECORD_METADATA)
    if not isinstance(meta, dict) or not {"topic", "partition", "offset"} <= meta.keys():
        return None
    stamp = meta.get("timestamp_ms")
    return {
        "topic": meta["topic"],
        "partition": meta["partition"],
        "offset": meta["offset"],
        "key": meta.get("key"),
        "timestamp": stamp / 1000 if isinstance(stamp, int | float) else None,
    }
