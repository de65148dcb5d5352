"""Prometheus metrics of workers: counters, histograms and gauges in prometheus-client's
default registry (``pip install 'lockgate[metrics]'``), served by a worker's health endpoint
at ``/metrics``, by ``--metrics-port``, and by the HTTP API. See ``docs/metrics.md``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lockgate._lazy import lazy_exports

if TYPE_CHECKING:
    from lockgate.metrics._exposition import MetricsServer, exposition
    from lockgate.metrics._hooks import enabled

__all__ = ["MetricsServer", "enabled", "exposition"]


if not TYPE_CHECKING:  # a type checker sees the imports above, not a __getattr__
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "lockgate.metrics._exposition": ("MetricsServer", "exposition"),
            "lockgate.metrics._hooks": ("enabled",),
        },
    )
