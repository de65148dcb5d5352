"""``create_app``: the API as an ASGI application (FastAPI)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from lockgate import __version__
from lockgate._errors import (
    ConfigurationError,
    ErrorCode,
    LockgateError,
    StoreFault,
)
from lockgate.client._client import WorkflowClient
from lockgate.http._limits import (
    CONSOLE_PREFIX,
    ENVELOPE_BYTES,
    BodyTooLarge,
    RequestGate,
    too_large,
)
from lockgate.http._metrics import RequestMetrics, exposition
from lockgate.http._routes import probes, runs
from lockgate.metrics import _hooks as metrics
from lockgate.stores._base import Store
from lockgate.web._auth import TokenTable
from lockgate.web._paths import SegmentPaths, segment
from lockgate.web._problems import ProblemError, from_error, problem
from lockgate.web._state import ApiState
from lockgate.workflow._spec import DEFAULT_PAYLOAD_CAP, WorkflowSpec

#: The body cap of a workflow with no payload cap (``max_event_payload_bytes=None``), and of a
#: path that names no served workflow.
DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024

DESCRIPTION = """lockgate's HTTP API: start runs, send trigger events, and read, talk to and
operate runs of the workflows this server serves. Errors are RFC 9457 problem+json with
lockgate's error `code`. See docs/http.md."""


def _spec_of(workflow: Any) -> WorkflowSpec:
    spec = workflow if isinstance(workflow, WorkflowSpec) else None
    spec = spec or getattr(workflow, "__lockgate_workflow__", None)
    if not isinstance(spec, WorkflowSpec):
        raise TypeError(f"{workflow!r} is neither a @workflow function nor a WorkflowSpec")
    return spec


def create_app(
    store: Store,
    *,
    workflows: Iterable[Any] = (),
    tokens: TokenTable | None = None,
    client: WorkflowClient | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    console: bool = True,
) -> FastAPI:
    """The API over ``store`` for ``workflows`` (``@workflow`` functions or their specs; a
    name not among them is 404). ``tokens`` (a :class:`TokenTable`) turns on bearer
    authentication; without it every request is allowed, so bind such an app to loopback.
    ``client`` defaults to a :class:`WorkflowClient` on ``store`` that gathers concurrent
    submits into group commits (``group_submits=True``). ``console`` serves the web console
    under ``/console`` (docs/console.md), signed in with the same tokens. The app never runs
    a workflow body: workers do. The store is the caller's to close."""
    served = {spec.name: spec for spec in map(_spec_of, workflows)}
    if console and CONSOLE_PREFIX.strip("/") in served:
        # Its API paths (/console/runs...) would be the console's, which signs in its own way.
        raise ConfigurationError(
            f"a workflow named {CONSOLE_PREFIX.strip('/')!r} cannot be served beside the "
            "console: rename it, or serve without the console (create_app(console=False), "
            "lockgate serve --no-console)"
        )
    table = tokens if tokens is not None else TokenTable()
    client = client or WorkflowClient(store, group_submits=True)
    api = ApiState(store=store, client=client, served=served, tokens=table)
    app = FastAPI(
        title="lockgate",
        version=__version__,
        description=DESCRIPTION,
        docs_url=None,
        redoc_url=None,
    )
    app.state.lockgate = api
    app.include_router(probes)
    app.add_api_route(
        "/metrics",
        _metrics,
        methods=["GET"],
        tags=["probes"],
        response_class=Response,
        responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}},
        summary="Prometheus metrics",
    )
    if console:
        from lockgate.console import mount_console

        mount_console(app, table)
    app.include_router(runs)
    _add_handlers(app)
    app.add_middleware(
        RequestGate,
        tokens=table,
        body_limit=_body_limit(served, max_body_bytes),
        own_auth=CONSOLE_PREFIX if console else None,
    )
    app.add_middleware(RequestMetrics, routes=lambda: app.router.routes)
    app.add_middleware(SegmentPaths)  # outermost: every layer sees the path it routes on
    return app


async def _metrics() -> Response:
    """The default prometheus-client registry, as Prometheus scrapes it."""
    return Response(exposition(), media_type="text/plain; version=0.0.4; charset=utf-8")


def _body_limit(served: dict[str, WorkflowSpec], most: int) -> Callable[[str], int]:
    def limit(path: str) -> int:
        spec = served.get(segment(path.lstrip("/").split("/", 1)[0]))
        cap = spec.max_event_payload_bytes if spec is not None else DEFAULT_PAYLOAD_CAP
        return most if cap is None else min(most, cap + ENVELOPE_BYTES)

    return limit


def _add_handlers(app: FastAPI) -> None:
    async def on_problem(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ProblemError)
        return problem(exc.status, exc.code, exc.detail, field=exc.field)

    async def on_error(request: Request, exc: Exception) -> Response:
        if isinstance(exc, StoreFault):
            metrics.store_error(f"http:{getattr(request.scope.get('route'), 'name', 'unmatched')}")
        return from_error(exc)

    async def on_invalid(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        errors = exc.errors()
        first = errors[0] if errors else {}
        where = ".".join(str(part) for part in first.get("loc", ()))
        detail = f"{where}: {first.get('msg', 'invalid')}" if where else "invalid request"
        return problem(422, str(ErrorCode.INVALID_REQUEST), detail, field=where or None)

    async def on_http(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        if isinstance(exc, BodyTooLarge):
            response: Response = too_large(exc.limit)
            return response
        code = {404: str(ErrorCode.NOT_FOUND), 405: "method_not_allowed"}.get(
            exc.status_code, str(ErrorCode.INVALID_REQUEST)
        )
        return problem(exc.status_code, code, str(exc.detail), headers=dict(exc.headers or {}))

    app.add_exception_handler(ProblemError, on_problem)
    app.add_exception_handler(LockgateError, on_error)
    app.add_exception_handler(ValueError, on_error)
    app.add_exception_handler(RequestValidationError, on_invalid)
    app.add_exception_handler(StarletteHTTPException, on_http)
