"""What a request's handler works with: the client, the store and the served workflows."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from lockgate._errors import ErrorCode
from lockgate.client._client import WorkflowClient
from lockgate.http._auth import TokenEntry, TokenTable
from lockgate.http._limits import TOKEN_STATE
from lockgate.stores._base import Store
from lockgate.workflow._spec import WorkflowSpec


class ProblemError(Exception):
    """A refusal the API decides itself (not one from the client): answered as a problem."""

    def __init__(self, status: int, code: str, detail: str, *, field: str | None = None) -> None:
        super().__init__(detail)
        self.status = status
        self.code = code
        self.detail = detail
        self.field = field


@dataclass(frozen=True)
class ApiState:
    store: Store
    client: WorkflowClient
    served: dict[str, WorkflowSpec]
    tokens: TokenTable

    def spec(self, name: str) -> WorkflowSpec:
        """The served workflow ``name``; 404 for one the server does not serve."""
        spec = self.served.get(name)
        if spec is None:
            raise ProblemError(
                404, str(ErrorCode.NOT_FOUND), f"no workflow {name!r} is served here", field="name"
            )
        return spec


def state_of(request: Request) -> ApiState:
    found = request.app.state.lockgate
    assert isinstance(found, ApiState)
    return found


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
