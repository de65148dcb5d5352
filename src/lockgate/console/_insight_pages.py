"""The gates, windows and workers pages: what the store's insight queries report, where the
store has them (``"insight"`` in its capabilities), else a page saying it does not."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request
from starlette.responses import Response

from lockgate.console._sessions import Session
from lockgate.console._web import PREFIX, api_of, render, viewer

insight = APIRouter(prefix=PREFIX, include_in_schema=False)
Viewer = Annotated[Session, Depends(viewer)]
CAPABILITY = "insight"


def _reports(request: Request) -> bool:
    return CAPABILITY in api_of(request).store.capabilities()


@insight.get("/gates")
async def gates(request: Request, session: Viewer) -> Response:
    return render(
        request,
        "gates.html",
        session=session,
        title="Gates",
        reports=_reports(request),
        store=type(api_of(request).store).__name__,
        limits=[],
        rates=[],
    )


@insight.get("/windows")
async def windows(request: Request, session: Viewer) -> Response:
    return render(
        request,
        "windows.html",
        session=session,
        title="Windows",
        reports=_reports(request),
        store=type(api_of(request).store).__name__,
        buffers=[],
    )


@insight.get("/workers")
async def workers(request: Request, session: Viewer) -> Response:
    return render(
        request,
        "workers.html",
        session=session,
        title="Workers",
        reports=_reports(request),
        store=type(api_of(request).store).__name__,
        workers=[],
    )
