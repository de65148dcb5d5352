"""``lockgate serve``: the HTTP API over a store, for the workflows of a module."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from lockgate._output import note
from lockgate.cli._exits import OK, Failure
from lockgate.cli._load import load_workflows
from lockgate.cli._params import Subparsers, port
from lockgate.stores.opener._open import open_store

if TYPE_CHECKING:
    import asyncio


async def serve(args: argparse.Namespace) -> int:
    """Import the module for its declarations, open the store and serve until interrupted.
    Refuses (exit 2) a non-loopback host when no token is configured, unless ``--insecure``."""
    import asyncio

    try:
        from lockgate.http import TokenTable, create_app
        from lockgate.http._serve import bind, serve_app, url_of
        from lockgate.web._hosts import is_loopback
    except ImportError as exc:
        raise Failure(str(exc)) from exc
    from lockgate._repeats import log_to_stderr

    workflows = load_workflows(args.target)
    tokens = TokenTable.load(args.tokens)
    if not tokens and not args.insecure and not is_loopback(args.host):
        raise Failure(
            f"no token configured (--tokens FILE or $LOCKGATE_HTTP_TOKENS): refusing to serve "
            f"{args.host}, which is not loopback; give --insecure to serve it anyway"
        )
    sock = bind(args.host, args.port)
    # A server creates a store that does not exist yet, as a worker does.
    store = await asyncio.to_thread(
        open_store, args.store, option_defaults={"create": True}, journal=args.journal
    )
    # lockgate's own lines (uvicorn keeps its loggers to itself), repeats collapsed.
    repeats = log_to_stderr(args.log_level)
    try:
        app = create_app(store, workflows=workflows, tokens=tokens, console=args.console)
        auth = f"{len(tokens.entries)} token(s)" if tokens else "no authentication"
        console = f"; the console is at {url_of(sock)}/console/" if args.console else ""
        note(f"serving the HTTP API on {url_of(sock)} ({auth}, pid {os.getpid()}){console}")
        await serve_app(app, sock, log_level=args.log_level)
    finally:
        sock.close()
        store.close()
        if repeats is not None:
            repeats.flush()
    return OK


def add_parsers(group: Subparsers, common: list[argparse.ArgumentParser]) -> None:
    p = group.add_parser("serve", parents=common, help="serve the HTTP API until interrupted")
    p.add_argument(
        "target",
        metavar="MODULE[:ATTR]",
        help="module whose @workflow functions to serve, or MODULE:ATTR naming one or a list",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    p.add_argument("--port", type=port, default=8080, help="port; 0: a free one (8080)")
    p.add_argument(
        "--tokens",
        metavar="FILE",
        help="bearer tokens and their scopes (default: $LOCKGATE_HTTP_TOKENS); docs/http.md",
    )
    p.add_argument(
        "--insecure",
        action="store_true",
        help="serve a non-loopback host with no token configured",
    )
    p.add_argument(
        "--no-console",
        dest="console",
        action="store_false",
        help="serve the API alone, without the web console under /console",
    )
    p.add_argument("--log-level", choices=("debug", "info", "warning", "error"), default="warning")
    p.set_defaults(run=serve, opens_store=True, loop_factory=_loop_factory)


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's event loop when it is installed (the ``http`` extra brings it): it answers
    HTTP on less CPU than asyncio's own; asyncio's otherwise."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop
