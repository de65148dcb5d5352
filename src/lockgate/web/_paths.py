"""Names and ids that hold ``/`` in a path: the naming rule allows them, and a client sends
them percent-encoded (``order%2F7``).

A server decodes the path before routing, so ``/w/runs/a%2Fb/events`` would route as the run
``a`` of ``w`` with ``b/events`` after it, and a run ``a/events`` could not be told from the
events of ``a``. :class:`SegmentPaths` routes on the path as sent instead: it decodes each
segment of the raw path by itself, and a segment that decodes to something holding ``/`` or
``%`` is kept encoded (``quote(..., safe="")``), so the router sees it as one segment. Every
path parameter then goes through :func:`segment`, which undoes that (a segment without ``%`` is
left as it is, so a plain id costs nothing)."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, unquote

from pydantic import AfterValidator
from starlette.types import ASGIApp, Receive, Scope, Send


def _routable(raw_path: bytes) -> str:
    """The path to route on: ``raw_path`` decoded segment by segment, a segment holding
    ``/`` or ``%`` once decoded kept encoded."""
    decoded = (unquote(part) for part in raw_path.decode("latin-1").split("/"))
    return "/".join(quote(p, safe="") if "/" in p or "%" in p else p for p in decoded)


def segment(value: str) -> str:
    """A path parameter as the client meant it (see the module docstring)."""
    return unquote(value) if "%" in value else value


#: Put on a path parameter's annotation: ``Annotated[str, Path(...), SEGMENT]``.
SEGMENT = AfterValidator(segment)


class SegmentPaths:
    """ASGI middleware: route on the path as sent (see the module docstring). A request
    whose raw path holds no ``%`` is passed on untouched."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        raw: Any = scope.get("raw_path")
        if scope["type"] == "http" and isinstance(raw, bytes) and b"%" in raw:
            scope = {**scope, "path": _routable(raw.split(b"?", 1)[0])}
        await self.app(scope, receive, send)
