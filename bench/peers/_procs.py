"""Processes the bench starts for a peer: each logs to a file in the repeat's directory, is
stopped with SIGTERM (SIGKILL after a grace) by its own process id, and the last lines of its
log are shown when it fails."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


class Started:
    def __init__(
        self, name: str, command: list[str], log: Path, cwd: Path | None = None, **env: str
    ) -> None:
        self.name = name
        self.log = log
        out = open(log, "ab")  # noqa: SIM115 - owned by the process
        self.proc = subprocess.Popen(
            command,
            cwd=cwd,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **env},
        )
        out.close()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def tail(self, lines: int = 15) -> str:
        text = self.log.read_text(errors="replace").splitlines()
        return "\n".join(f"    {self.name}: {line}" for line in text[-lines:])

    def stop(self, grace: float = 30.0) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def wait_until(
    what: str, ready: Callable[[], bool], alive: Callable[[], bool], timeout: float
) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if not alive():
            raise RuntimeError(f"{what}: the process stopped")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not ready in {timeout:g} s")
        time.sleep(0.2)


def http_json(url: str, body: Any | None = None, timeout: float = 30.0) -> Any:
    """GET (``body`` None) or POST ``body`` as JSON; the answer's JSON."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        url,
        data=data,
        headers={"content-type": "application/json", "accept": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            text = answer.read()
    except urllib.error.HTTPError as error:
        detail = error.read().decode(errors="replace")[:500]
        raise RuntimeError(f"{url}: HTTP {error.code}: {detail}") from error
    return json.loads(text) if text else None


def answers(url: str) -> bool:
    try:
        http_json(url, timeout=2)
    except (OSError, RuntimeError, ValueError):
        return False
    return True


@contextmanager
def scratch(system: str) -> Iterator[Path]:
    """A temporary directory for one repeat's logs and data: removed when the repeat went
    well, kept (and named) when it failed, for its logs."""
    where = Path(tempfile.mkdtemp(prefix=f"lockgate-peers-{system}-"))
    try:
        yield where
    except BaseException:
        print(f"  {system}: its logs are kept in {where}", flush=True)
        raise
    shutil.rmtree(where, ignore_errors=True)
