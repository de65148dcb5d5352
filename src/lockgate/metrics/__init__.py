"""Prometheus metrics of workers: counters, histograms and gauges in prometheus-client's
default registry (``pip install 'lockgate[metrics]'``), served by a worker's health endpoint
at ``/metrics``, by ``--metrics-port``, and by the HTTP API. See ``docs/metrics.md``."""

from lockgate.metrics._exposition import MetricsServer, exposition
from lockgate.metrics._hooks import enabled

__all__ = ["MetricsServer", "enabled", "exposition"]
