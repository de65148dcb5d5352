"""A worker's health endpoint: a minimal HTTP/1.1 server on asyncio streams.

``GET /livez`` answers 200 while the worker's event loop is serving requests, which is what a
liveness probe needs to know. ``GET /readyz`` answers 200 once the worker is serving (its store
opened and its workflows recorded) and the store answers a ping; 503 while it is starting,
while the store does not answer, while the store is without its marker (it lost its data: see
``worker/_marker.py``), and once the worker is shutting down, so a load balancer or
orchestrator stops counting on it. ``GET /metrics`` answers the Prometheus text format of the
default registry (``docs/metrics.md``), or 404 when prometheus-client is not installed.
Anything else is 404. One request per connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable
from typing import Any

from lockgate.metrics import _hooks as metrics
from lockgate.metrics._exposition import MISSING, exposition
from lockgate.stores._base import Store

log = logging.getLogger("lockgate.worker")

#: Seconds a client gets to send its request, and a ping gets to answer.
REQUEST_TIMEOUT_S = 5.0
PING_TIMEOUT_S = 5.0
#: Header lines read (and ignored) per request before the connection is dropped.
MAX_HEADER_LINES = 100

_REASONS = {200: "OK", 404: "Not Found", 405: "Method Not Allowed", 503: "Service Unavailable"}


#: Why a worker is not ready (``{"status": ..., "error": ...}``), or None when it is, as far
#: as it knows: the store's ping decides then.
NotReady = Callable[[], dict[str, str] | None]


class HealthServer:
    """Serves ``/livez`` and ``/readyz`` for one worker. :meth:`start` binds; :attr:`address`
    is then the ``(host, port)`` it listens on (a real port when asked for port 0).

    ``not_ready`` and ``store`` may be replaced while it serves: a worker whose store is still
    being opened has no store yet, and hands the endpoint over once it has one."""

    def __init__(self, *, worker_id: str, not_ready: NotReady, store: Store | None = None) -> None:
        self._worker_id = worker_id
        self.not_ready = not_ready
        self.store = store
        self._server: asyncio.Server | None = None
        self.address: tuple[str, int] | None = None

    @property
    def url(self) -> str:
        """``http://host:port`` once it listens."""
        if self.address is None:
            raise RuntimeError("the health endpoint is not listening")
        host, port = self.address
        return f"http://{host}:{port}"

    async def start(self, host: str, port: int) -> None:
        self._server = await asyncio.start_server(self._serve, host, port)
        sockname = self._server.sockets[0].getsockname()
        self.address = (str(sockname[0]), int(sockname[1]))
        log.info("health endpoint listening on %s", self.url)

    async def close(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
            await server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(REQUEST_TIMEOUT_S):
                method, path = await _read_request(reader)
            status, payload, content_type = await self._respond(method, path)
            head = (
                f"HTTP/1.1 {status} {_REASONS[status]}\r\n"
                f"Content-Type: {content_type}\r\n"
                f"Content-Length: {len(payload)}\r\n"
                "Connection: close\r\n\r\n"
            ).encode()
            writer.write(head if method == "HEAD" else head + payload)
            await writer.drain()
        except (TimeoutError, OSError, ValueError, asyncio.IncompleteReadError):
            pass  # a client that went away or sent garbage gets nothing more
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    async def _respond(self, method: str, path: str) -> tuple[int, bytes, str]:
        """The status, body and content type for a request."""
        if path.split("?", 1)[0] == "/metrics" and method in ("GET", "HEAD"):
            if not metrics.enabled():
                body = {"status": "not_found", "path": "/metrics", "error": MISSING}
                return 404, json.dumps(body).encode(), "application/json"
            # Rendering takes the registry's locks, which store threads also take: off the
            # loop, as the ping is.
            text, content_type = await asyncio.to_thread(exposition)
            return 200, text, content_type
        status, answer = await self.answer(method, path)
        return status, json.dumps(answer).encode(), "application/json"

    async def answer(self, method: str, path: str) -> tuple[int, dict[str, Any]]:
        """The status and JSON body for a request."""
        route = path.split("?", 1)[0]
        if route not in ("/livez", "/readyz", "/metrics"):
            return 404, {"status": "not_found", "path": route}
        if method not in ("GET", "HEAD"):
            return 405, {"status": "method_not_allowed", "method": method}
        if route == "/livez":
            return 200, {"status": "ok", "worker_id": self._worker_id}
        reason, store = self.not_ready(), self.store
        if reason is not None or store is None:
            return 503, {**(reason or {"status": "starting"}), "worker_id": self._worker_id}
        try:
            # On a thread even for an in-memory store: a hung store must not hang the loop.
            async with asyncio.timeout(PING_TIMEOUT_S):
                await asyncio.to_thread(store.ping)
        except Exception as exc:
            error = str(exc) or type(exc).__name__
            return 503, {"status": "unavailable", "worker_id": self._worker_id, "error": error}
        return 200, {"status": "ok", "worker_id": self._worker_id}


async def _read_request(reader: asyncio.StreamReader) -> tuple[str, str]:
    """The method and path of one request; its headers are read and dropped."""
    parts = (await reader.readline()).decode("latin-1").split()
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        raise ValueError("not an HTTP request line")
    for _ in range(MAX_HEADER_LINES):
        line = await reader.readline()
        if line in (b"\r\n", b"\n", b""):
            return parts[0].upper(), parts[1]
    raise ValueError("too many header lines")
