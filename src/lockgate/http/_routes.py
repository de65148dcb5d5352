"""The API's routes. Every one is a thin layer over :class:`WorkflowClient`."""

from __future__ import annotations

import asyncio
import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Header, Path, Query, Response
from fastapi.responses import JSONResponse

from lockgate._errors import (
    DurableInterrupt,
    DurableInvocationCancelled,
    DurableInvocationError,
    DurableInvocationTimeout,
    ErrorCode,
    RunFinishedError,
    RunNotFoundError,
    UpdateTimeout,
)
from lockgate._names import MAX_NAME_LENGTH
from lockgate.http._models import (
    Accepted,
    Event,
    Events,
    Health,
    Interrupt,
    Problem,
    Queried,
    QueryRequest,
    Reason,
    Result,
    ResumeRequest,
    Run,
    RunDetail,
    RunPage,
    Signalled,
    Submitted,
    Terminated,
    Triggered,
    Updated,
)
from lockgate.http._state import requested_by, require, state
from lockgate.journal._events import RunStatus
from lockgate.metrics import _hooks as metrics
from lockgate.stores._calls import call_store
from lockgate.stores._types import RunInfo
from lockgate.web._auth import TokenEntry
from lockgate.web._paths import SEGMENT
from lockgate.web._problems import ProblemError
from lockgate.web._state import ApiState
from lockgate.workflow._spec import readable

#: Longest long poll of ``/result`` and wait of ``/updates``, in seconds.
MAX_WAIT_S = 60.0
#: Store pages a filtered ``GET /{name}/runs`` reads at most before it answers.
MAX_PAGES = 20
PING_TIMEOUT_S = 5.0

Api = Annotated[ApiState, Depends(state)]
# SEGMENT: a name or id holding "/" comes percent-encoded as one segment (web/_paths.py).
Name = Annotated[
    str, Path(min_length=1, max_length=MAX_NAME_LENGTH, description="workflow"), SEGMENT
]
RunId = Annotated[str, Path(min_length=1, max_length=MAX_NAME_LENGTH), SEGMENT]
Handler = Annotated[str, Path(min_length=1, max_length=MAX_NAME_LENGTH), SEGMENT]
IdemKey = Annotated[
    str | None, Header(alias="Idempotency-Key", min_length=1, max_length=MAX_NAME_LENGTH)
]
Reader = Annotated[TokenEntry | None, Depends(require("read"))]
Writer = Annotated[TokenEntry | None, Depends(require("write"))]
Admin = Annotated[TokenEntry | None, Depends(require("admin"))]
JsonObject = Annotated[dict[str, Any] | None, Body()]

_PROBLEM = {"content": {"application/problem+json": {"schema": Problem.model_json_schema()}}}
_ERRORS: dict[int | str, dict[str, Any]] = {
    status: {**_PROBLEM, "description": what}
    for status, what in (
        (400, "bad input"),
        (401, "missing or unknown token"),
        (403, "the token lacks the scope"),
        (404, "unknown workflow or run"),
        (409, "conflict: idempotency, or the run has ended"),
        (413, "body over the workflow's payload cap"),
        (422, "a field that does not fit"),
        (503, "the store is unreachable; retry after Retry-After"),
    )
}

runs = APIRouter(responses=_ERRORS)


async def _run(api: ApiState, name: str, run_id: str) -> RunInfo:
    """The run, or :class:`RunNotFoundError` (404)."""
    info = await call_store(api.store, api.store.get_run, name, run_id)
    if info is None:
        raise RunNotFoundError(name, run_id)
    assert isinstance(info, RunInfo)
    return info


async def _live(api: ApiState, name: str, run_id: str, what: str) -> None:
    """409 when the run (or the successor carrying its work) has ended."""
    await _run(api, name, run_id)
    status = await api.client.status(name, run_id)
    if status.is_terminal:
        raise RunFinishedError(
            f"run {run_id!r} of {name!r} has ended ({status}); nothing to {what}"
        )


probes = APIRouter()


@probes.get("/livez", response_model=Health, tags=["probes"])
async def livez() -> Health:
    """The process answers."""
    return Health(status="ok")


@probes.get(
    "/readyz",
    response_model=Health,
    tags=["probes"],
    responses={503: {"model": Health, "description": "the store does not answer"}},
)
async def readyz(api: Api) -> Any:
    """The store answers a ping."""
    try:
        async with asyncio.timeout(PING_TIMEOUT_S):
            await asyncio.to_thread(api.store.ping)
    except Exception as exc:  # no answer, whatever the store raised: not ready
        metrics.store_error("http:readyz")
        body = Health(status="unavailable", error=str(exc) or type(exc).__name__)
        return JSONResponse(body.model_dump(), status_code=503, headers={"Retry-After": "1"})
    return Health(status="ok")


@runs.post(
    "/{name}/runs",
    response_model=Submitted,
    status_code=201,
    tags=["runs"],
    responses={200: {"model": Submitted, "description": "an Idempotency-Key repeat: the run"}},
)
async def submit(
    api: Api,
    _: Writer,
    name: Name,
    response: Response,
    params: JsonObject = None,
    idempotency_key: IdemKey = None,
    delay: Annotated[float | None, Query(ge=0, le=365 * 86400)] = None,
) -> Submitted:
    """Start a run with the body as its params. A repeat with the same ``Idempotency-Key``
    and body returns the first run (200); the same key with another body is 409."""
    api.spec(name)
    fresh = uuid.uuid4().hex
    handle = await api.client.submit(
        name, params or {}, idempotency_key=idempotency_key, delay=delay, run_id=fresh
    )
    if handle.run_id != fresh:
        response.status_code = 200
    return Submitted(name=name, run_id=handle.run_id, created=handle.run_id == fresh)


@runs.post("/{name}/events", response_model=Triggered, status_code=202, tags=["triggers"])
async def trigger(
    api: Api,
    _: Writer,
    name: Name,
    event: Annotated[dict[str, Any], Body()],
    key: Annotated[str | None, Query(min_length=1, max_length=MAX_NAME_LENGTH)] = None,
) -> Triggered:
    """Send an event to the workflow's ``Collect`` or ``Debounce`` buffer."""
    if api.spec(name).trigger is None:
        raise ProblemError(
            404, str(ErrorCode.NOT_FOUND), f"workflow {name!r} has no Collect or Debounce trigger"
        )
    fired = await api.client.trigger(name, event, key=key)
    return Triggered(run_id=fired.run_id if fired is not None else None)


@runs.get("/{name}/runs", response_model=RunPage, tags=["runs"])
async def list_runs(
    api: Api,
    _: Reader,
    name: Name,
    status: RunStatus | None = None,
    cursor: Annotated[str | None, Query(min_length=1, max_length=1000)] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> RunPage:
    """Runs of the workflow, newest first, ``limit`` at a time; ``status`` filters them."""
    api.spec(name)
    found: list[Run] = []
    for _page in range(MAX_PAGES):
        page, cursor = await call_store(
            api.store, api.store.list_runs, name, limit=limit, cursor=cursor
        )
        found.extend(Run.of(info) for info in page if status is None or info.status == status)
        if found or cursor is None:
            break
    return RunPage(runs=found, next_cursor=cursor)


@runs.get("/{name}/runs/{run_id}", response_model=RunDetail, tags=["runs"])
async def show(api: Api, _: Reader, name: Name, run_id: RunId) -> RunDetail:
    """The run now: its status, the gates it was stamped with, and why it waits."""
    api.spec(name)
    info = await _run(api, name, run_id)
    opening = await call_store(api.store, api.store.load_run, name, run_id, max_events=1)
    gates = opening[0].payload.get("gates") if opening else None
    waiting = await api.client.why_waiting(name, run_id)
    return RunDetail(
        run=Run.of(info),
        gates=readable(gates) if isinstance(gates, dict) else {},
        why_waiting=readable(waiting),
    )


@runs.get("/{name}/runs/{run_id}/events", response_model=Events, tags=["runs"])
async def events(
    api: Api,
    _: Reader,
    name: Name,
    run_id: RunId,
    after: Annotated[int, Query(ge=0, description="only events with run_seq above this")] = 0,
) -> Events:
    """The run's journal, oldest first."""
    api.spec(name)
    journal = await api.client.events(name, run_id)
    return Events(events=[Event.of(e) for e in journal if (e.run_seq or 0) > after])


@runs.get("/{name}/runs/{run_id}/result", response_model=Result, tags=["runs"])
async def result(
    api: Api,
    _: Reader,
    name: Name,
    run_id: RunId,
    wait: Annotated[float, Query(ge=0, le=MAX_WAIT_S, description="long poll, seconds")] = 0,
) -> Result:
    """The run's outcome, waiting up to ``wait`` seconds for it to end. ``done`` is false
    when it had not ended by then."""
    api.spec(name)
    try:
        value = await api.client.result(name, run_id, timeout=wait)
    except DurableInvocationTimeout:
        pass
    except DurableInterrupt as question:
        return Result(
            run_id=question.run_id,
            status=str(RunStatus.INTERRUPTED),
            done=False,
            interrupt=Interrupt(wait_id=question.wait_id, payload=readable(question.payload)),
        )
    except (DurableInvocationCancelled, DurableInvocationError) as failed:
        status = await api.client.status(name, run_id)
        error = readable({"detail": str(failed), **failed.error})
        return Result(run_id=run_id, status=str(status), done=True, error=error)
    else:
        return Result(
            run_id=run_id, status=str(RunStatus.COMPLETE), done=True, result=readable(value)
        )
    status = await api.client.status(name, run_id)
    return Result(run_id=run_id, status=str(status), done=False)


@runs.post("/{name}/runs/{run_id}/signals/{signal}", response_model=Signalled, tags=["talk"])
async def signal(
    api: Api,
    _: Writer,
    name: Name,
    run_id: RunId,
    signal: Handler,
    payload: JsonObject = None,
    idempotency_key: IdemKey = None,
) -> Signalled:
    """Send a signal with the body as its payload; ``Idempotency-Key`` is its signal id."""
    api.spec(name)
    outcome = await api.client.signal(name, run_id, signal, payload, signal_id=idempotency_key)
    return Signalled.model_validate({"outcome": outcome})


@runs.post(
    "/{name}/runs/{run_id}/updates/{update}",
    response_model=Updated,
    tags=["talk"],
    responses={202: {"model": Updated, "description": "not applied within timeout; queued"}},
)
async def update(
    api: Api,
    _: Writer,
    name: Name,
    run_id: RunId,
    update: Handler,
    response: Response,
    payload: JsonObject = None,
    idempotency_key: IdemKey = None,
    timeout: Annotated[float, Query(gt=0, le=MAX_WAIT_S)] = 30.0,
) -> Updated:
    """Deliver an update, wait up to ``timeout`` for a worker to apply it, and answer its
    handler's value (200), or 202 when it is still queued. ``Idempotency-Key`` is its update
    id: a repeat answers the settled outcome without applying it again."""
    api.spec(name)
    update_id = idempotency_key or uuid.uuid4().hex
    try:
        value = await api.client.update(
            name, run_id, update, payload, update_id=update_id, timeout=timeout
        )
    except UpdateTimeout:
        response.status_code = 202
        return Updated(update_id=update_id, done=False)
    return Updated(update_id=update_id, done=True, result=readable(value))


@runs.post("/{name}/runs/{run_id}/queries/{query}", response_model=Queried, tags=["talk"])
async def query(
    api: Api,
    _: Writer,
    name: Name,
    run_id: RunId,
    query: Handler,
    body: Annotated[QueryRequest | None, Body()] = None,
) -> Queried:
    """Call the run's ``ctx.on_query`` handler against its journal (replayed here; no step
    runs)."""
    api.spec(name)
    asked = body or QueryRequest()
    await _run(api, name, run_id)
    value = await api.client.query(name, run_id, query, *asked.args, **asked.kwargs)
    return Queried(result=readable(value))


@runs.post(
    "/{name}/runs/{run_id}/cancel", response_model=Accepted, status_code=202, tags=["operate"]
)
async def cancel(
    api: Api, who: Admin, name: Name, run_id: RunId, body: Annotated[Reason | None, Body()] = None
) -> Accepted:
    """Ask the run to stop at its next boundary; it ends cancelled."""
    api.spec(name)
    await _live(api, name, run_id, "cancel")
    reason = body.reason if body else None
    await api.client.cancel(name, run_id, reason=reason, requested_by=requested_by(who))
    return Accepted(run_id=run_id, accepted="cancel")


@runs.post(
    "/{name}/runs/{run_id}/terminate",
    response_model=Terminated,
    tags=["operate"],
    responses={501: {**_PROBLEM, "description": "the store cannot terminate runs"}},
)
async def terminate(
    api: Api, who: Admin, name: Name, run_id: RunId, body: Annotated[Reason | None, Body()] = None
) -> Terminated:
    """End the run now, with no worker involved; open children follow their policy."""
    api.spec(name)
    reason = body.reason if body else None
    done = await api.client.terminate(name, run_id, reason=reason, requested_by=requested_by(who))
    return Terminated.model_validate(
        {"run_id": done.run_id, "outcome": str(done.outcome), "ended": done.ended}
    )


@runs.post(
    "/{name}/runs/{run_id}/pause", response_model=Accepted, status_code=202, tags=["operate"]
)
async def pause(api: Api, _: Admin, name: Name, run_id: RunId) -> Accepted:
    """Ask the run to park at its next boundary until ``/unpause``."""
    api.spec(name)
    await _live(api, name, run_id, "pause")
    await api.client.pause(name, run_id)
    return Accepted(run_id=run_id, accepted="pause")


@runs.post(
    "/{name}/runs/{run_id}/unpause", response_model=Accepted, status_code=202, tags=["operate"]
)
async def unpause(api: Api, _: Admin, name: Name, run_id: RunId) -> Accepted:
    """Lift a pause and queue the run."""
    api.spec(name)
    await _live(api, name, run_id, "unpause")
    await api.client.unpause(name, run_id)
    return Accepted(run_id=run_id, accepted="unpause")


@runs.post(
    "/{name}/runs/{run_id}/resume", response_model=Accepted, status_code=202, tags=["operate"]
)
async def resume(
    api: Api, _: Admin, name: Name, run_id: RunId, body: Annotated[ResumeRequest, Body()]
) -> Accepted:
    """Answer the run's ``ctx.interrupt`` (``client.resume``); ``wait_id`` names the question
    answered, by default the one the run waits on now."""
    api.spec(name)
    await api.client.resume(name, run_id, body.action, body.value, wait_id=body.wait_id)
    return Accepted(run_id=run_id, accepted="resume")
