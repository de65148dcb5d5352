"""What every console page shares: its state on the app, the signed-in viewer, the templates,
form reading and the refusals a page answers with (as HTML, never problem+json)."""

from __future__ import annotations

import importlib.resources
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any
from urllib.parse import parse_qsl, quote

import jinja2
from fastapi import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from lockgate import __version__
from lockgate.console._sessions import COOKIE, Session, Sessions, same_origin, set_cookie
from lockgate.console._timeline import span, when
from lockgate.web._auth import TokenTable
from lockgate.web._hosts import is_loopback
from lockgate.web._paths import SEGMENT
from lockgate.web._state import ApiState, state_of
from lockgate.workflow._spec import readable_text

if TYPE_CHECKING:
    from lockgate.streams._group_view import GroupViewer

PREFIX = "/console"
#: A name or id in a console path: one holding "/" comes percent-encoded (web/_paths.py).
Segment = Annotated[str, SEGMENT]
#: Bytes a console form may hold (a signal's payload is the biggest field).
MAX_FORM_BYTES = 256 * 1024
FRESH_SESSION = "lockgate_console_fresh"


class SignInRequired(Exception):
    """No valid session: answered 303 to the sign-in page, which comes back to ``next``."""

    def __init__(self, next_path: str) -> None:
        super().__init__(next_path)
        self.next_path = next_path


class Refused(Exception):
    """A page's refusal, shown as an HTML page with ``status``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass
class ConsoleState:
    tokens: TokenTable
    sessions: Sessions = field(default_factory=Sessions)
    templates: jinja2.Environment = field(default_factory=lambda: _environment())
    #: What the windows page asks Kafka through, made on its first visit (a Kafka journal).
    kafka: GroupViewer | None = None


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("lockgate.console", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["when"] = when
    env.filters["span"] = span
    env.filters["q"] = lambda value: quote(str(value), safe="")
    return env


def console_of(request: Request) -> ConsoleState:
    found = request.app.state.lockgate_console
    assert isinstance(found, ConsoleState)
    return found


def api_of(request: Request) -> ApiState:
    return state_of(request)


def _here(request: Request) -> str:
    query = request.url.query
    return request.url.path + (f"?{query}" if query else "")


def current(request: Request) -> Session | None:
    """The request's live session, or for a server without tokens a fresh anonymous one
    (its cookie is set on the answer). None: sign-in needed."""
    console = console_of(request)
    if not console.tokens:
        _loopback_only(request)
    session = console.sessions.get(request.cookies.get(COOKIE))
    if session is None and not console.tokens:
        session = console.sessions.open(None)
        request.scope.setdefault("state", {})[FRESH_SESSION] = session
    return session


async def viewer(request: Request) -> Session:
    """The dependency of every page: a session with the ``read`` scope."""
    session = current(request)
    if session is None:
        raise SignInRequired(_here(request))
    if not session.can("read"):
        raise Refused(403, "this token lacks the 'read' scope the console needs")
    return session


async def read_form(request: Request) -> dict[str, str]:
    """The urlencoded form of a POST (the last value of a repeated field); an empty body is
    an empty form (whose missing CSRF token then refuses it)."""
    body = await request.body()
    if not body:
        return {}
    kind = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        raise Refused(415, "console forms are sent as application/x-www-form-urlencoded")
    if len(body) > MAX_FORM_BYTES:
        raise Refused(413, f"the form is over {MAX_FORM_BYTES} bytes")
    try:
        return dict(parse_qsl(body.decode("utf-8"), keep_blank_values=True))
    except UnicodeDecodeError as exc:
        raise Refused(400, "the form is not UTF-8") from exc


async def checked_post(request: Request, scope: str | None) -> tuple[Session, dict[str, str]]:
    """A POST's session and form after the three locks: same origin, a session with
    ``scope`` (any session when None), and the session's CSRF token in field ``csrf``. Each
    refusal is 403."""
    if not same_origin(request):
        raise Refused(403, "this form was sent from another site")
    if not console_of(request).tokens:
        _loopback_only(request)
    session = console_of(request).sessions.get(request.cookies.get(COOKIE))
    if session is None:
        if console_of(request).tokens:
            raise SignInRequired(PREFIX + "/")
        raise Refused(403, "no console session: open the page again and resend")
    form = await read_form(request)
    if not session.csrf_matches(form.get("csrf")):
        raise Refused(403, "the form's CSRF token is missing or is not this session's")
    if scope is not None and not session.can(scope):
        raise Refused(403, f"this token lacks the {scope!r} scope")
    return session, form


def _loopback_only(request: Request) -> None:
    """Without tokens anyone who reaches the console may act: it answers only a request sent
    to a loopback name, so a page of another site cannot reach it through a name that it
    points at this machine (DNS rebinding)."""
    host = request.headers.get("host", "")
    name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
    if not is_loopback(name):
        raise Refused(
            403,
            f"with no token configured the console answers only loopback addresses, not "
            f"{host!r}: serve with --tokens to reach it by this name",
        )


def render(
    request: Request,
    template: str,
    *,
    status: int = 200,
    session: Session | None = None,
    **ctx: Any,
) -> HTMLResponse:
    api = api_of(request)
    page = console_of(request).templates.get_template(template)
    html = page.render(
        request=request,
        session=session,
        csrf=session.csrf if session is not None else "",
        admin=session is not None and session.can("admin"),
        reader=session is not None and session.can("read"),
        signed_in=session is not None and session.entry is not None,
        workflows=sorted(api.served),
        version=__version__,
        prefix=PREFIX,
        **ctx,
    )
    # readable_text: a run stored with a lone surrogate must not fail the page showing it.
    response = HTMLResponse(readable_text(html), status_code=status, headers=_SECURITY_HEADERS)
    _set_fresh(request, response)
    return response


def redirect(request: Request, to: str) -> Response:
    response = RedirectResponse(to, status_code=303)
    _set_fresh(request, response)
    return response


def _set_fresh(request: Request, response: Response) -> None:
    fresh = request.scope.get("state", {}).get(FRESH_SESSION)
    if isinstance(fresh, Session):
        set_cookie(response, request, fresh)


#: No script or style from elsewhere, no framing, no referrer leaving the console.
_SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "frame-ancestors 'none'; form-action 'self'; base-uri 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


def static_file(name: str) -> tuple[bytes, str] | None:
    """An asset shipped in the package, with its media type; None for an unknown name."""
    kinds = {".css": "text/css; charset=utf-8", ".js": "text/javascript; charset=utf-8"}
    kind = next((v for k, v in kinds.items() if name.endswith(k)), None)
    if kind is None or "/" in name or name.startswith("."):
        return None
    resource = importlib.resources.files("lockgate.console") / "static" / name
    if not resource.is_file():
        return None
    return resource.read_bytes(), kind


def run_path(name: str, run_id: str) -> str:
    """The run page's path, its name and id quoted (an id holding ``%41`` names itself, not
    ``A``): links to a run and to its actions are built from this, never from the decoded
    request path."""
    return f"{PREFIX}/runs/{quote(name, safe='')}/{quote(run_id, safe='')}"


def safe_next(text: str | None) -> str:
    """Where sign-in may send the browser on: a console path, never another site."""
    if text and text.startswith(PREFIX) and not text.startswith("//") and "\\" not in text:
        return text
    return PREFIX + "/"
