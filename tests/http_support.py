"""What the HTTP tests share: the API on uvicorn in a thread of this process, and
``lockgate serve`` as a process of its own.

Both listen on loopback on a free port and are waited for until ``/readyz`` answers 200, with
a deadline (``DEADLINE``) and never a fixed sleep."""

from __future__ import annotations

import asyncio
import importlib
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import IO, Any

import httpx

from lockgate.http._serve import bind, url_of

PROCS = Path(__file__).parent / "procs"
SRC = Path(__file__).resolve().parents[1] / "src"
DEADLINE = 60.0
SERVING_LINE = re.compile(rb"serving the HTTP API on (http://127\.0\.0\.1:\d+)")


def http_workflows() -> ModuleType:
    """``tests/procs/http_workflows.py``, the workflows every HTTP test serves."""
    if str(PROCS) not in sys.path:
        sys.path.insert(0, str(PROCS))
    return importlib.import_module("http_workflows")


def wait_ready(url: str, *, deadline: float = DEADLINE) -> None:
    """Wait until ``url/readyz`` answers 200."""
    end = time.monotonic() + deadline
    while True:
        try:
            if httpx.get(f"{url}/readyz", timeout=5).status_code == 200:
                return
        except httpx.TransportError:
            pass
        if time.monotonic() > end:
            raise AssertionError(f"{url} was not ready within {deadline}s")
        time.sleep(0.02)


@contextmanager
def app_server(app: Any) -> Iterator[str]:
    """Serve ``app`` with uvicorn on a thread of its own, on a free loopback port; yields
    its base URL."""
    import uvicorn

    sock = bind("127.0.0.1", 0)
    url = url_of(sock)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    server.install_signal_handlers = lambda: None  # type: ignore[method-assign]
    thread = threading.Thread(target=lambda: asyncio.run(server.serve(sockets=[sock])), daemon=True)
    thread.start()
    try:
        wait_ready(url)
        yield url
    finally:
        server.should_exit = True
        thread.join(DEADLINE)
        sock.close()


def env() -> dict[str, str]:
    path = os.pathsep.join([str(SRC), str(PROCS), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": path}


class ServeProcess:
    """``lockgate serve`` as a subprocess; its stderr goes to ``log``."""

    def __init__(self, args: list[str], log: Path, extra_env: dict[str, str] | None = None):
        self.log_path = log
        self.log: IO[bytes] = log.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "lockgate", "serve", *args, "--port", "0"],
            stdout=subprocess.DEVNULL,
            stderr=self.log,
            cwd=PROCS,
            env={**env(), **(extra_env or {})},
        )
        self.url = self._url()
        wait_ready(self.url)

    def _url(self) -> str:
        end = time.monotonic() + DEADLINE
        while time.monotonic() < end:
            found = SERVING_LINE.search(self.log_path.read_bytes())
            if found:
                return found.group(1).decode()
            if self.proc.poll() is not None:
                raise AssertionError(f"serve exited: {self.log_path.read_text()}")
            time.sleep(0.02)
        raise AssertionError("serve did not say where it listens")

    def stop(self) -> int:
        self.proc.terminate()
        code = self.proc.wait(DEADLINE)
        self.log.close()
        return code
