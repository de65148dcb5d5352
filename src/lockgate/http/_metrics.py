"""HTTP request metrics, on prometheus-client's default registry.

``lockgate_http_requests_total{route,method,status}`` counts answered requests and
``lockgate_http_request_duration_seconds{route,method}`` times them. ``route`` is the route's
template (``/{name}/runs/{run_id}``), never the raw path, so a label's values stay bounded;
a path no route matches is ``<unmatched>``."""

from __future__ import annotations

import time
from collections.abc import Callable

import prometheus_client
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

UNMATCHED = "<unmatched>"

REQUESTS = prometheus_client.Counter(
    "lockgate_http_requests_total",
    "HTTP requests answered by the lockgate API, by route template, method and status.",
    ("route", "method", "status"),
)
DURATION = prometheus_client.Histogram(
    "lockgate_http_request_duration_seconds",
    "Seconds the lockgate API took to answer a request, by route template and method.",
    ("route", "method"),
)


def exposition() -> bytes:
    """The default registry in the Prometheus text format."""
    return prometheus_client.generate_latest()


class RequestMetrics:
    """ASGI middleware counting and timing every request, the gate's refusals included."""

    def __init__(self, app: ASGIApp, *, routes: Callable[[], list[BaseRoute]]) -> None:
        self.app = app
        self.routes = routes

    def _template(self, scope: Scope) -> str:
        route = scope.get("route")
        path = getattr(route, "path", None)
        if isinstance(path, str):
            return path
        for candidate in self.routes():  # refused before routing: find what it would match
            match, _ = candidate.matches(scope)
            if match == Match.FULL:
                found = getattr(candidate, "path", None)
                if isinstance(found, str):
                    return found
        return UNMATCHED

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            route, method = self._template(scope), scope["method"]
            REQUESTS.labels(route, method, str(status)).inc()
            DURATION.labels(route, method).observe(time.perf_counter() - started)
