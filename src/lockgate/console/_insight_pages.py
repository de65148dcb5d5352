"""The gates, windows and workers pages: what the store's insight queries report
(``stores/_insight.py``) where the store has them (the ``insight`` and ``workers`` groups of
its capabilities), else a page saying plainly that it does not."""

from __future__ import annotations

import time
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from starlette.responses import Response

from lockgate.console._partitions import kafka_report
from lockgate.console._sessions import Session
from lockgate.console._web import PREFIX, api_of, render, viewer
from lockgate.stores._calls import call_store

insight = APIRouter(prefix=PREFIX, include_in_schema=False)
Viewer = Annotated[Session, Depends(viewer)]
#: Keys (or buffers) a page asks the store for per workflow.
PER_WORKFLOW = 50


def _reports(request: Request, group: str) -> bool:
    return group in api_of(request).store.capabilities()


def _common(request: Request, session: Session, title: str, group: str) -> dict[str, Any]:
    return {
        "session": session,
        "title": title,
        "reports": _reports(request, group),
        "store": type(api_of(request).store).__name__,
        "per_workflow": PER_WORKFLOW,
    }


@insight.get("/gates")
async def gates(request: Request, session: Viewer) -> Response:
    """Per workflow, each Limit key in use (running of max, queued behind it) and each Rate
    key's bucket (tokens, next token), the hottest first, as the store orders them."""
    common = _common(request, session, "Gates", "insight")
    limits: list[dict[str, Any]] = []
    rates: list[dict[str, Any]] = []
    if common["reports"]:
        api = api_of(request)
        now = time.time()
        for name in sorted(api.served):
            spec = api.served[name]
            if spec.concurrency is not None:
                used = await call_store(api.store, api.store.limit_usage, name, limit=PER_WORKFLOW)
                limits.extend({"name": name, "usage": u} for u in used)
            if spec.rate_limit is not None:
                used = await call_store(api.store, api.store.rate_usage, name, limit=PER_WORKFLOW)
                rates.extend(
                    {
                        "name": name,
                        "usage": u,
                        "next_in": max(0.0, u.next_token_at - now)
                        if u.next_token_at is not None
                        else None,
                    }
                    for u in used
                )
        limits.sort(key=lambda row: (-row["usage"].queued, -row["usage"].running))
        rates.sort(key=lambda row: (-row["usage"].queued, row["usage"].tokens))
    return render(request, "gates.html", limits=limits, rates=rates, **common)


@insight.get("/windows")
async def windows(request: Request, session: Viewer) -> Response:
    """Open Collect and Debounce buffers: key, events held, due time; with a Kafka journal,
    each consumed topic's partitions: owner, committed offset, lag."""
    common = _common(request, session, "Windows", "insight")
    buffers: list[dict[str, Any]] = []
    if common["reports"]:
        api = api_of(request)
        for name in sorted(api.served):
            if api.served[name].trigger is None:
                continue
            held = await call_store(api.store, api.store.open_buffers, name, limit=PER_WORKFLOW)
            buffers.extend({"name": name, "buffer": b} for b in held)
        buffers.sort(key=lambda row: (row["buffer"].due_at is None, row["buffer"].due_at or 0.0))
    kafka = await kafka_report(request)
    return render(request, "windows.html", buffers=buffers, kafka=kafka, **common)


@insight.get("/workers")
async def workers(request: Request, session: Viewer) -> Response:
    """Live workers: slots in use, shards or partitions owned, version, last heartbeat."""
    common = _common(request, session, "Workers", "workers")
    found: list[Any] = []
    if common["reports"]:
        api = api_of(request)
        found = await call_store(api.store, api.store.live_workers)
    return render(request, "workers.html", workers=found, **common)
