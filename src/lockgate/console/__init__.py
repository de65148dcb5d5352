"""lockgate's web console: server-rendered pages under ``/console`` of the HTTP API
(``create_app(..., console=True)``), on the same tokens. See docs/console.md."""

from __future__ import annotations

try:
    import jinja2  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        f"lockgate.console needs the 'http' extra: pip install 'lockgate[http]' ({exc})"
    ) from exc

from lockgate.console._mount import mount_console

__all__ = ["mount_console"]
