"""Mounting the console on the API's app."""

from __future__ import annotations

from urllib.parse import quote

from fastapi import FastAPI, Request
from starlette.responses import Response

from lockgate.console._actions import actions
from lockgate.console._insight_pages import insight
from lockgate.console._pages import pages
from lockgate.console._web import (
    PREFIX,
    ConsoleState,
    Refused,
    SignInRequired,
    current,
    redirect,
    render,
)
from lockgate.web._auth import TokenTable


def mount_console(app: FastAPI, tokens: TokenTable) -> None:
    """Serve the console under ``/console`` of ``app`` (an app of ``create_app``): its routes
    go before the API's, so ``/console/...`` is never read as a workflow named ``console``."""
    app.state.lockgate_console = ConsoleState(tokens=tokens)
    for router in (pages, actions, insight):
        app.include_router(router)

    async def on_sign_in(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, SignInRequired)
        return redirect(request, f"{PREFIX}/sign-in?next={quote(exc.next_path, safe='/')}")

    async def on_refused(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, Refused)
        try:
            session = current(request)
        except Refused:  # the refusal is the request's host itself: show no session
            session = None
        return render(
            request,
            "not_found.html",
            status=exc.status,
            # A session without 'read' is still shown, so that it can sign out.
            session=session,
            title=f"{exc.status}",
            message=exc.message,
        )

    app.add_exception_handler(SignInRequired, on_sign_in)
    app.add_exception_handler(Refused, on_refused)
