"""How the metrics are served: the text format of the default registry, for the worker's
health endpoint (and any server that mounts it), and a prometheus-client HTTP server of its
own for ``--metrics-port``."""

from __future__ import annotations

import threading
from typing import Any

from lockgate._errors import ConfigurationError
from lockgate.metrics._hooks import enabled

MISSING = "metrics need prometheus-client: pip install 'lockgate[metrics]'"


def _require() -> None:
    if not enabled():
        raise ConfigurationError(MISSING)


def exposition() -> tuple[bytes, str]:
    """The default registry in Prometheus' text format, and its content type."""
    _require()
    from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST


class MetricsServer:
    """prometheus-client's HTTP server on its own thread, serving the default registry at
    every path (``/metrics`` included). :attr:`address` is where it listens (a real port when
    asked for 0)."""

    def __init__(self, host: str, port: int) -> None:
        _require()
        from prometheus_client import start_http_server

        self._server: Any
        self._thread: threading.Thread
        self._server, self._thread = start_http_server(port, addr=host)
        bound = self._server.server_address
        self.address: tuple[str, int] = (str(bound[0]), int(bound[1]))

    @property
    def url(self) -> str:
        host, port = self.address
        return f"http://{host}:{port}/metrics"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5.0)
