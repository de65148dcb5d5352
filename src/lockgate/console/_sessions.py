"""Console sessions: a bearer token exchanged for a cookie, and the CSRF token of each session.

The cookie holds an opaque random id, never the token. Sessions live in this process's memory
(id -> the token's entry, a CSRF token, an expiry): a restart signs everyone out, and a server
run as many processes keeps one table per process (sign in again when a request lands on
another). A session is renewed on each request, lives at most :data:`SESSION_TTL_S` from its
last use, and at most :data:`MAX_SESSIONS` are kept (the one used longest ago goes first)."""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import Response

from lockgate.web._auth import SCOPES, TokenEntry

COOKIE = "lockgate_console"
COOKIE_PATH = "/console"
SESSION_TTL_S = 12 * 3600.0
MAX_SESSIONS = 10_000


@dataclass
class Session:
    """One signed-in browser. ``entry`` is None for the anonymous session of a server without
    tokens, which may do everything (as the API without tokens allows everything)."""

    session_id: str
    entry: TokenEntry | None
    csrf: str
    expires_at: float
    scopes: frozenset[str] = field(default_factory=frozenset)

    @property
    def label(self) -> str:
        return self.entry.label if self.entry is not None else "anonymous"

    def can(self, scope: str) -> bool:
        return scope in self.scopes

    def csrf_matches(self, presented: str | None) -> bool:
        return bool(presented) and hmac.compare_digest(self.csrf, presented or "")


class Sessions:
    """The session table. Thread-safe: handlers run on the loop, but the table is cheap to
    guard and may be shared by apps on several threads (tests)."""

    def __init__(self, *, ttl: float = SESSION_TTL_S, most: int = MAX_SESSIONS) -> None:
        self.ttl = ttl
        self.most = most
        self._table: OrderedDict[str, Session] = OrderedDict()
        self._lock = threading.Lock()

    def open(self, entry: TokenEntry | None) -> Session:
        """A new session (a new id every sign-in, so an id seen before it is worth nothing)."""
        scopes = entry.scopes if entry is not None else frozenset(SCOPES)
        session = Session(
            session_id=secrets.token_urlsafe(32),
            entry=entry,
            csrf=secrets.token_urlsafe(32),
            expires_at=time.monotonic() + self.ttl,
            scopes=scopes,
        )
        with self._lock:
            self._table[session.session_id] = session
            while len(self._table) > self.most:
                self._table.popitem(last=False)
        return session

    def get(self, session_id: str | None) -> Session | None:
        """The live session of ``session_id``, renewed; None when unknown or expired."""
        if not session_id:
            return None
        now = time.monotonic()
        with self._lock:
            session = self._table.get(session_id)
            if session is None:
                return None
            if session.expires_at <= now:
                del self._table[session_id]
                return None
            session.expires_at = now + self.ttl
            self._table.move_to_end(session_id)
            return session

    def close(self, session_id: str | None) -> None:
        with self._lock:
            self._table.pop(session_id or "", None)


def set_cookie(response: Response, request: Request, session: Session) -> None:
    """The session cookie: HttpOnly, SameSite=Strict, Path=/console, Secure over https. No
    Max-Age: a browser session cookie, the server's expiry governs."""
    response.set_cookie(
        COOKIE,
        session.session_id,
        path=COOKIE_PATH,
        httponly=True,
        samesite="strict",
        secure=_https(request),
    )


def clear_cookie(response: Response, request: Request) -> None:
    response.delete_cookie(
        COOKIE, path=COOKIE_PATH, httponly=True, samesite="strict", secure=_https(request)
    )


def _https(request: Request) -> bool:
    return request.url.scheme == "https"


def same_origin(request: Request) -> bool:
    """False when the request's ``Origin`` (or, without one, ``Referer``) names another host
    than the one it was sent to; a request naming none passes (SameSite=Strict and the CSRF
    token are the other two locks)."""
    origin = request.headers.get("origin")
    if origin is None:
        referer = request.headers.get("referer")
        if not referer:
            return True
        origin = referer
    if origin == "null":
        return False
    parts = urlsplit(origin)
    host = request.headers.get("host", "")
    return bool(parts.netloc) and parts.netloc.lower() == host.lower()
