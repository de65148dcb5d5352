"""Signing in and out, and the actions on a run: each asked on a confirm page, then POSTed
with the session's CSRF token, by an ``admin`` session only."""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from starlette.responses import Response

from lockgate._errors import LockgateError
from lockgate.console._sessions import COOKIE, Session, clear_cookie, same_origin, set_cookie
from lockgate.console._web import (
    PREFIX,
    Refused,
    Segment,
    api_of,
    checked_post,
    console_of,
    read_form,
    redirect,
    render,
    run_path,
    safe_next,
    viewer,
)
from lockgate.web._problems import status_for

ACTIONS = ("signal", "cancel", "terminate", "pause", "resume")
#: What each action's confirm page says it does.
MEANING = {
    "signal": "send the run a signal",
    "cancel": "ask the run to stop at its next boundary; it ends cancelled",
    "terminate": "end the run now, with no worker involved",
    "pause": "ask the run to park at its next boundary until resumed",
    "resume": "lift the run's pause and queue it again",
}
MAX_REASON = 1000

actions = APIRouter(prefix=PREFIX, include_in_schema=False)
Viewer = Annotated[Session, Depends(viewer)]


@actions.get("/sign-in")
async def sign_in_page(
    request: Request, next: Annotated[str | None, Query(max_length=2000)] = None
) -> Response:
    return render(request, "sign_in.html", title="Sign in", next=safe_next(next), error=None)


@actions.post("/sign-in")
async def sign_in(request: Request) -> Response:
    """A valid token opens a session and sets its cookie; a bad one is 401 with the form."""
    if not same_origin(request):
        raise Refused(403, "this form was sent from another site")
    form = await read_form(request)
    console = console_of(request)
    target = safe_next(form.get("next"))
    if not console.tokens:
        return redirect(request, target)
    entry = console.tokens.authenticate(f"Bearer {form.get('token', '')}")
    if entry is None:
        return render(
            request,
            "sign_in.html",
            status=401,
            title="Sign in",
            next=target,
            error="That token is not one this server accepts.",
        )
    console.sessions.close(request.cookies.get(COOKIE))
    session = console.sessions.open(entry)
    response = redirect(request, target)
    set_cookie(response, request, session)
    return response


@actions.post("/sign-out")
async def sign_out(request: Request) -> Response:
    # Any session may end itself: one whose token lacks 'read' sees no page but this.
    session, _ = await checked_post(request, None)
    console_of(request).sessions.close(session.session_id)
    response = redirect(request, PREFIX + "/sign-in")
    clear_cookie(response, request)
    return response


def _check_action(request: Request, name: str, action: str) -> None:
    if action not in ACTIONS:
        raise Refused(404, f"no action {action!r}; actions are {', '.join(ACTIONS)}")
    if name not in api_of(request).served:
        raise Refused(404, f"no workflow {name!r} is served here")


@actions.get("/runs/{name}/{run_id}/confirm/{action}")
async def confirm(
    request: Request, session: Viewer, name: Segment, run_id: Segment, action: str
) -> Response:
    """Are you sure? The form that POSTs the action."""
    _check_action(request, name, action)
    if not session.can("admin"):
        raise Refused(403, "actions need the 'admin' scope")
    return render(
        request,
        "confirm.html",
        session=session,
        title=f"{action} {run_id}",
        name=name,
        run_id=run_id,
        action=action,
        meaning=MEANING[action],
        run_path=run_path(name, run_id),
    )


@actions.post("/runs/{name}/{run_id}/{action}")
async def act(request: Request, name: Segment, run_id: Segment, action: str) -> Response:
    """Do the action, then back (303) to the run's page."""
    session, form = await checked_post(request, "admin")
    _check_action(request, name, action)
    try:
        await _do(request, session, name, run_id, action, form)
    except LockgateError as exc:
        raise Refused(status_for(exc) or 500, f"could not {action} the run: {exc}") from exc
    return redirect(request, run_path(name, run_id))


async def _do(
    request: Request, session: Session, name: str, run_id: str, action: str, form: dict[str, str]
) -> None:
    client = api_of(request).client
    who = f"console:{session.label}"
    reason = form.get("reason", "").strip()[:MAX_REASON] or None
    if action == "cancel":
        await client.cancel(name, run_id, reason=reason, requested_by=who)
    elif action == "terminate":
        await client.terminate(name, run_id, reason=reason, requested_by=who)
    elif action == "pause":
        await client.pause(name, run_id)
    elif action == "resume":
        await client.unpause(name, run_id)
    else:
        signal = form.get("signal", "").strip()
        if not signal:
            raise Refused(400, "name the signal to send")
        await client.signal(name, run_id, signal, _payload(form.get("payload", "")))


def _payload(text: str) -> dict[str, Any] | None:
    if not text.strip():
        return None
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise Refused(400, f"the payload is not JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise Refused(400, "the payload must be a JSON object")
    return value
