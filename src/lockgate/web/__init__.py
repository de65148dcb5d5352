"""What the HTTP API (:mod:`lockgate.http`) and its web console (:mod:`lockgate.console`) both
stand on, below both: bearer tokens and their scopes (``_auth.py``), the app's state a request
reads (``_state.py``), problem answers from the error tree (``_problems.py``), names holding
``/`` in a path (``_paths.py``) and loopback hosts (``_hosts.py``). The API mounts the console;
the console never imports the API. Public names stay where users find them
(``lockgate.http.TokenTable``); this package exports none.

Needs the ``http`` extra (``pip install 'lockgate[http]'``)."""

from __future__ import annotations

try:
    import fastapi  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        f"lockgate.web needs the 'http' extra: pip install 'lockgate[http]' ({exc})"
    ) from exc

__all__: list[str] = []
