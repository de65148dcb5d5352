"""A PostgreSQL server for DBOS, from Debian's packages: ``initdb`` into a temporary directory,
``pg_ctl`` on a loopback port, stopped (and its directory removed) at the end. Run as the
``postgres`` user when the bench runs as root (PostgreSQL refuses root). Its settings are
initdb's defaults (``fsync = on``, ``synchronous_commit = on``): nothing is turned off."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from _install import PeerUnavailable

from valkey_server import free_port

MISSING = (
    "PostgreSQL is not installed: on Debian or Ubuntu, `apt-get update && apt-get install -y "
    "postgresql` (as root); elsewhere put PostgreSQL's initdb and pg_ctl on PATH"
)


def _binaries() -> Path:
    found = shutil.which("pg_ctl")
    if found and shutil.which("initdb"):
        return Path(found).resolve().parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    if versions:
        return Path(versions[-1]).parent
    raise PeerUnavailable(MISSING)


def _as_owner(command: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return command
    if shutil.which("runuser") is None:
        raise PeerUnavailable("postgres: running as root needs runuser to start it as postgres")
    return ["runuser", "-u", "postgres", "--", *command]


def _started(command: list[str]) -> None:
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise PeerUnavailable(
            f"postgres: {' '.join(command)} failed ({done.returncode}):\n"
            + (done.stdout + done.stderr)[-2000:]
        )


@contextmanager
def postgres() -> Iterator[str]:
    """The URL of a fresh server's ``postgres`` database (trust auth on loopback)."""
    bin_dir = _binaries()
    where = Path(tempfile.mkdtemp(prefix="lockgate-peers-pg-"))
    data = where / "data"
    if os.geteuid() == 0:
        try:
            shutil.chown(where, "postgres", "postgres")
        except LookupError as error:
            raise PeerUnavailable(f"postgres: no postgres user ({MISSING})") from error
    port = free_port()
    print(f"postgres: initdb and pg_ctl from {bin_dir}, port {port}, in {where}", flush=True)
    _started(
        _as_owner([str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust"])
    )
    log = str(where / "server.log")
    options = f"-p {port} -k {where} -c listen_addresses=127.0.0.1"
    _started(
        _as_owner(
            [str(bin_dir / "pg_ctl"), "-D", str(data), "-o", options, "-w", "-l", log, "start"]
        )
    )
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(
            _as_owner([str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"]),
            check=False,
            capture_output=True,
        )
        shutil.rmtree(where, ignore_errors=True)
