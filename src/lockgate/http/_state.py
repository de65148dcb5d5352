"""The dependencies of the API's routes: the app's state (:class:`ApiState`), and the scope a
route requires of the request's token."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from lockgate.http._limits import TOKEN_STATE
from lockgate.web._auth import TokenEntry
from lockgate.web._problems import ProblemError
from lockgate.web._state import ApiState, state_of


async def state(request: Request) -> ApiState:
    """The dependency: async, so FastAPI calls it on the loop, not on a thread."""
    return state_of(request)


_bearer = HTTPBearer(auto_error=False, description="a token from --tokens or $LOCKGATE_HTTP_TOKENS")


def require(scope: str) -> Callable[..., Any]:
    """A dependency refusing (403) a token without ``scope``. The token itself was checked
    (401) by the request gate, before routing; neither looks at the run."""

    async def check(
        request: Request,
        _credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    ) -> TokenEntry | None:
        if not state_of(request).tokens:
            return None
        entry = request.scope.get("state", {}).get(TOKEN_STATE)
        if not isinstance(entry, TokenEntry):  # mounted without the gate in front of it
            raise ProblemError(401, "unauthenticated", "a valid bearer token is required")
        if scope not in entry.scopes:
            raise ProblemError(
                403, "forbidden", f"this token lacks the {scope!r} scope", field="Authorization"
            )
        return entry

    return check


def requested_by(entry: TokenEntry | None) -> str:
    return f"http:{entry.label}" if entry is not None else "http"
