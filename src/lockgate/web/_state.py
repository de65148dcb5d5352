"""What the API's app holds for every request, its pages' too: the client, the store, the
served workflows and the tokens (``app.state.lockgate``)."""

from __future__ import annotations

from dataclasses import dataclass

from starlette.requests import Request

from lockgate._errors import ErrorCode
from lockgate.client._client import WorkflowClient
from lockgate.stores._base import Store
from lockgate.web._auth import TokenTable
from lockgate.web._problems import ProblemError
from lockgate.workflow._spec import WorkflowSpec


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
