"""lockgate's HTTP API (``lockgate serve``): :func:`create_app` builds it as an ASGI app.

Needs the ``http`` extra (``pip install 'lockgate[http]'``)."""

from __future__ import annotations

try:
    import fastapi  # noqa: F401
    import prometheus_client  # noqa: F401
    import uvicorn  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        f"lockgate.http needs the 'http' extra: pip install 'lockgate[http]' ({exc})"
    ) from exc

from lockgate.http._app import create_app
from lockgate.web._auth import TokenTable, hash_token

__all__ = ["TokenTable", "create_app", "hash_token"]
