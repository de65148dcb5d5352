"""Serving the API with uvicorn on a socket bound here (so port 0 is known before serving)."""

from __future__ import annotations

import contextlib
import signal
import socket
from types import FrameType
from typing import Any

from lockgate._errors import ConfigurationError


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port``; :class:`ConfigurationError` when it cannot be."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise ConfigurationError(f"cannot resolve host {host!r}: {exc}") from exc
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        raise ConfigurationError(f"cannot listen on {host}:{port}: {exc.strerror}") from exc
    sock.set_inheritable(True)
    return sock


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}"


async def serve_app(app: Any, sock: socket.socket, *, log_level: str = "warning") -> None:
    """Serve ``app`` on ``sock`` until SIGINT or SIGTERM (uvicorn's own handling)."""
    import uvicorn

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            # As uvicorn does, less raising the signal again once it has shut down: a stop
            # asked for is a clean exit (0), as a worker's is.
            if self.should_exit and sig == signal.SIGINT:
                self.force_exit = True
            self.should_exit = True

    config = uvicorn.Config(
        app, log_level=log_level, access_log=False, lifespan="off", timeout_keep_alive=30
    )
    server = Server(config)
    try:
        await server.serve(sockets=[sock])
    finally:
        with contextlib.suppress(OSError):
            sock.close()
