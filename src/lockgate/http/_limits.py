"""The gate every request passes before the app reads it: its token, then its body's size.

Both are checked here, in front of routing and body parsing, so an unauthenticated caller or
an oversized body costs the server no read of the body: a ``Content-Length`` over the cap is
refused before a byte of the body is read, and a streamed body (chunked, or lying about its
length) is counted as it arrives and refused at the first chunk that passes the cap."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from lockgate._errors import ErrorCode
from lockgate.web._auth import TokenTable
from lockgate.web._problems import problem

#: Paths served to anyone: probes, the metrics scrape and the API's own description.
OPEN_PATHS = frozenset({"/livez", "/readyz", "/metrics", "/openapi.json"})
#: Room for what a body holds around the payload the cap counts (a query's args, spacing).
ENVELOPE_BYTES = 64 * 1024
TOKEN_STATE = "lockgate_token"
#: Where the console is served: it signs its browsers in with a cookie of its own, so no
#: bearer token is asked for here (``lockgate.console``).
CONSOLE_PREFIX = "/console"


class BodyTooLarge(HTTPException):
    """Raised from ``receive`` when a streamed body passes the cap; answered 413."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"the request body is over {limit} bytes")
        self.limit = limit


def too_large(limit: int, length: int | None = None) -> Any:
    said = f"the request body ({length} bytes) is" if length is not None else "the request body is"
    return problem(
        413,
        str(ErrorCode.PAYLOAD_TOO_LARGE),
        f"{said} over this workflow's limit of {limit} bytes "
        f"(max_event_payload_bytes and {ENVELOPE_BYTES} bytes of envelope)",
        field="body",
        # Close behind the answer: kept alive, the server would read the rest of the body.
        headers={"Connection": "close"},
    )


class RequestGate:
    """ASGI middleware: 401 for a missing or unknown token (before anything else, so it says
    nothing about runs or workflows), then 413 for a body over ``body_limit(path)``. Paths
    under ``own_auth`` (the console) check their own sessions instead of a bearer token."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        tokens: TokenTable,
        body_limit: Callable[[str], int],
        own_auth: str | None = None,
    ) -> None:
        self.app = app
        self.tokens = tokens
        self.body_limit = body_limit
        self.own_auth = own_auth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        if self.tokens and path not in OPEN_PATHS and not self._owns_auth(path):
            entry = self.tokens.authenticate(headers.get("authorization"))
            if entry is None:
                response = problem(
                    401,
                    "unauthenticated",
                    "a valid bearer token is required (Authorization: Bearer TOKEN)",
                    field="Authorization",
                    headers={"WWW-Authenticate": 'Bearer realm="lockgate"', "Connection": "close"},
                )
                await response(scope, receive, send)
                return
            scope.setdefault("state", {})[TOKEN_STATE] = entry
        if scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        limit = self.body_limit(path)
        declared = headers.get("content-length")
        if declared is not None and declared.strip().isdigit() and int(declared) > limit:
            await too_large(limit, int(declared))(scope, receive, send)
            return
        await self.app(scope, _counting(receive, limit), send)

    def _owns_auth(self, path: str) -> bool:
        """Whether ``path`` is under the prefix that checks its own sign-in (the console)."""
        own = self.own_auth
        return own is not None and (path == own or path.startswith(own + "/"))


def _counting(receive: Receive, limit: int) -> Receive:
    seen = 0

    async def counted() -> Message:
        nonlocal seen
        message = await receive()
        if message["type"] == "http.request":
            seen += len(message.get("body", b""))
            if seen > limit:
                raise BodyTooLarge(limit)
        return message

    return counted
