"""Each peer in a directory of its own, outside the project's ``.venv``:
``~/.cache/lockgate-bench-peers/<system>-<version>/`` (``LOCKGATE_BENCH_PEERS_DIR`` names
another root). A Python peer gets a venv there, its packages installed with pip; Restate's
server is the npm package installed there. A directory whose ``.installed`` file names the
same packages is used as it is; anything else is (re)installed, pip's and npm's own lines
shown as they come so a first install does not look like a hang.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT_ENV = "LOCKGATE_BENCH_PEERS_DIR"


class PeerUnavailable(RuntimeError):
    """A peer that cannot be installed or started here; the message says why."""


def root() -> Path:
    given = os.environ.get(ROOT_ENV)
    return Path(given) if given else Path.home() / ".cache" / "lockgate-bench-peers"


def _marked(where: Path, what: str) -> bool:
    marker = where / ".installed"
    return marker.exists() and marker.read_text() == what


def _run(command: list[str], label: str, cwd: Path | None = None) -> None:
    print(f"  {label}: $ {' '.join(command)}", flush=True)
    proc = subprocess.Popen(
        command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert proc.stdout is not None
    tail: list[str] = []
    for line in proc.stdout:
        line = line.rstrip()
        tail = [*tail[-19:], line]
        if line:
            print(f"  {label}: {line}", flush=True)
    if proc.wait() != 0:
        raise PeerUnavailable(f"{label}: {' '.join(command)} failed:\n" + "\n".join(tail))


def python_peer(system: str, version: str, packages: list[str]) -> Path:
    """The Python of a venv holding ``packages``, installed first if need be."""
    where = root() / f"{system}-{version}"
    python = where / "bin" / "python"
    what = "\n".join(packages) + "\n"
    if python.exists() and _marked(where, what):
        print(f"{system} {version}: installed in {where}", flush=True)
        return python
    print(f"{system} {version}: installing {', '.join(packages)} into {where} ...", flush=True)
    where.mkdir(parents=True, exist_ok=True)
    if not python.exists():
        _run([sys.executable, "-m", "venv", str(where)], system)
    pip = [str(python), "-m", "pip", "install", "--disable-pip-version-check"]
    _run([*pip, "--progress-bar", "off", *packages], system)
    (where / ".installed").write_text(what)
    print(f"{system} {version}: installed", flush=True)
    return python


def npm_peer(system: str, package: str, version: str) -> Path:
    """The directory whose ``node_modules`` holds ``package@version``, installed first if need
    be (with its optional dependencies: a native binary comes in one of them)."""
    where = root() / f"{system}-{version}"
    what = f"{package}@{version}\n"
    if (where / "node_modules").exists() and _marked(where, what):
        print(f"{system} {version}: installed in {where}", flush=True)
        return where
    print(f"{system} {version}: npm install {package}@{version} into {where} ...", flush=True)
    where.mkdir(parents=True, exist_ok=True)
    command = ["npm", "install", "--no-audit", "--no-fund", "--prefix", str(where)]
    try:
        _run([*command, f"{package}@{version}"], system, cwd=where)
    except FileNotFoundError as error:
        raise PeerUnavailable(
            f"{system}: npm is not installed (apt-get install -y npm, or Node.js from its "
            "site): it installs the Restate server"
        ) from error
    (where / ".installed").write_text(what)
    print(f"{system} {version}: installed", flush=True)
    return where
