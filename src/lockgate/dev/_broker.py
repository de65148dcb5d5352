"""A real single-node Apache Kafka broker on loopback, without Docker.

The broker's jars come from Maven Central through ``mvn`` (Java 17 and Maven are the only
requirements) and are cached outside the repository, in ``$LOCKGATE_KAFKA_CACHE`` or
``~/.cache/lockgate/kafka/<version>``: the first start resolves them (about 45 jars, 45 MB), later
ones reuse them. The broker runs in KRaft combined mode (one process is broker and controller),
its log directory formatted with ``kafka.tools.StorageTool``, on free ports, and
:meth:`KafkaBroker.start` returns once it answers a request on its client port.

Used three ways:

- by ``lockgate dev`` and ``lockgate demo --kafka``, from the installed package;
- by the test suite, which starts one broker per session (``shared_bootstrap``), unless
  ``LOCKGATE_TEST_KAFKA_BOOTSTRAP`` names an existing cluster;
- from a shell, ``python tools/kafka_broker.py`` (what ``make kafka`` runs), which prints the
  bootstrap address and keeps the broker up until Ctrl-C.

Only the standard library is used, and nothing of lockgate: ``tools/kafka_broker.py`` loads
this file by its path, so it runs with any Python 3.11, before lockgate or any extra is
installed.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

KAFKA_VERSION = "4.1.1"
SCALA_VERSION = "2.13"
# The SLF4J binding for log4j 2, so the broker's own log goes to a file we can show on failure
# (without it SLF4J falls back to a logger that drops everything).
LOG4J_VERSION = "2.24.3"
BOOTSTRAP_ENV = "LOCKGATE_TEST_KAFKA_BOOTSTRAP"
CACHE_ENV = "LOCKGATE_KAFKA_CACHE"

_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>dev.lockgate</groupId>
  <artifactId>kafka-broker-jars</artifactId>
  <version>1</version>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_{scala}</artifactId>
      <version>{kafka}</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-slf4j-impl</artifactId>
      <version>{log4j}</version>
    </dependency>
  </dependencies>
</project>
"""

_LOG4J2 = """Configuration:
  status: warn
  Appenders:
    File:
      name: file
      fileName: "{path}"
      PatternLayout:
        pattern: "[%d] %p %m (%c)%n"
  Loggers:
    Root:
      level: info
      AppenderRef:
        - ref: file
"""


class BrokerError(RuntimeError):
    """The broker could not be fetched or started; the message says what to do."""


def say(message: str) -> None:
    print(f"kafka-broker: {message}", file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cache_dir(version: str = KAFKA_VERSION) -> Path:
    root = os.environ.get(CACHE_ENV)
    base = Path(root) if root else Path.home() / ".cache" / "lockgate" / "kafka"
    return base / version


def fetch_jars(version: str = KAFKA_VERSION) -> Path:
    """The folder of the broker's jars, resolved from Maven Central with ``mvn`` on first use.
    A folder is used only once it was filled completely (a ``complete`` marker), so an
    interrupted download is done again rather than half used."""
    libs = cache_dir(version) / "libs"
    if (libs / "complete").exists():
        return libs
    mvn = shutil.which("mvn")
    if mvn is None:
        raise BrokerError(
            "mvn not found: install Maven (the broker's jars come from Maven Central), "
            f"or set {BOOTSTRAP_ENV} to an existing Kafka cluster"
        )
    say(f"fetching Apache Kafka {version} jars from Maven Central (once; about 30 s)...")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="lockgate-kafka-pom-") as work:
        pom = Path(work) / "pom.xml"
        pom.write_text(_POM.format(scala=SCALA_VERSION, kafka=version, log4j=LOG4J_VERSION))
        partial = libs.with_name("libs.partial")
        shutil.rmtree(partial, ignore_errors=True)
        result = subprocess.run(
            [
                mvn,
                "-q",
                "-B",
                "-f",
                str(pom),
                "dependency:copy-dependencies",
                f"-DoutputDirectory={partial}",
                "-DincludeScope=runtime",
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-15:])
            raise BrokerError(f"mvn could not resolve the Kafka jars:\n{tail}")
        shutil.rmtree(libs, ignore_errors=True)
        partial.rename(libs)
        (libs / "complete").write_text(version)
    count = sum(1 for _ in libs.glob("*.jar"))
    say(f"{count} jars cached in {libs} ({time.monotonic() - started:.0f} s)")
    return libs


def missing_tools() -> str | None:
    """What this machine lacks to start a broker (Java, or Maven while the jars are not
    cached yet), or None."""
    try:
        java()
    except BrokerError as exc:
        return str(exc)
    if not (cache_dir() / "libs" / "complete").exists() and shutil.which("mvn") is None:
        return "mvn not found: the broker's jars come from Maven Central through Maven"
    return None


def java() -> str:
    found = shutil.which("java")
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        found = str(Path(home) / "bin" / "java")
    if found is None:
        raise BrokerError("java not found: Kafka needs Java 17 or newer on PATH (or JAVA_HOME)")
    return found


def api_versions_answered(host: str, port: int, timeout: float = 1.0) -> bool:
    """Whether a Kafka broker answers an ApiVersions v0 request on ``host:port``: the request
    every client sends first, which a broker serves only once it processes requests."""
    client_id = b"lockgate-probe"
    body = struct.pack(">hhih", 18, 0, 7, len(client_id)) + client_id
    try:
        with socket.create_connection((host, port), timeout=timeout) as conn:
            conn.sendall(struct.pack(">i", len(body)) + body)
            header = conn.recv(10)
    except OSError:
        return False
    if len(header) < 10:
        return False
    _size, correlation, error = struct.unpack(">iih", header)
    return bool(correlation == 7 and error == 0)


class KafkaBroker:
    """One Kafka process on 127.0.0.1 in KRaft combined mode, its data and log in its own
    directory. :attr:`bootstrap` is its client address."""

    def __init__(self, *, port: int | None = None, data_dir: Path | None = None) -> None:
        self.port = port or free_port()
        self.controller_port = free_port()
        self.dir = data_dir or Path(tempfile.mkdtemp(prefix="lockgate-kafka-"))
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.dir / "broker.log"

    def _properties(self) -> str:
        lines = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": (
                f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}"
            ),
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(self.dir / "data"),
            # Topics are created by lockgate through the admin API with the partitions it needs.
            "auto.create.topics.enable": "false",
            "num.partitions": "1",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "8",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
        }
        return "".join(f"{key}={value}\n" for key, value in lines.items())

    def start(self, timeout: float = 120.0) -> KafkaBroker:
        """Format the log directory (first start only) and start the broker; return once it
        answers on its client port. Raises :class:`BrokerError` with the log's tail when it
        exits or does not answer within ``timeout`` seconds."""
        libs = fetch_jars()
        classpath = f"{libs}/*"
        self.dir.mkdir(parents=True, exist_ok=True)
        props = self.dir / "server.properties"
        props.write_text(self._properties())
        (self.dir / "log4j2.yaml").write_text(_LOG4J2.format(path=self.log_path))
        if not (self.dir / "data" / "meta.properties").exists():
            formatted = subprocess.run(
                [
                    java(),
                    "-cp",
                    classpath,
                    "kafka.tools.StorageTool",
                    "format",
                    # In one argument: an id may begin with "-", which would read as an option.
                    f"--cluster-id={_cluster_id()}",
                    "-c",
                    str(props),
                ],
                capture_output=True,
                text=True,
                check=False,
            )
            if formatted.returncode != 0:
                raise BrokerError(
                    f"formatting the log directory failed:\n{formatted.stdout}{formatted.stderr}"
                )
        out = open(self.dir / "stdout.log", "ab")  # noqa: SIM115 - owned by the process
        self.process = subprocess.Popen(
            [
                java(),
                "-Xms256m",
                "-Xmx768m",
                "-XX:+UseG1GC",
                "-XX:TieredStopAtLevel=1",
                f"-Dlog4j2.configurationFile={self.dir / 'log4j2.yaml'}",
                "-cp",
                classpath,
                "kafka.Kafka",
                str(props),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self._wait_ready(timeout)
        return self

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise BrokerError(f"the Kafka broker exited at start:\n{self.log_tail()}")
            if api_versions_answered("127.0.0.1", self.port):
                return
            time.sleep(0.1)
        raise BrokerError(
            f"the Kafka broker on port {self.port} did not answer in {timeout:.0f} s:\n"
            f"{self.log_tail()}"
        )

    def log_tail(self, lines: int = 30) -> str:
        text = ""
        for path in (self.dir / "stdout.log", self.log_path):
            with contextlib.suppress(OSError):
                text += path.read_text(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, *, kill: bool = False) -> None:
        """Stop the broker (SIGKILL with ``kill``); its data stays, so :meth:`start` again
        brings back the same topics and offsets on the same port."""
        if self.process is None or self.process.poll() is not None:
            return
        if kill:
            self.process.kill()
        else:
            self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)

    def close(self) -> None:
        self.stop(kill=True)
        shutil.rmtree(self.dir, ignore_errors=True)


def _cluster_id() -> str:
    # The format Kafka's own `random-uuid` prints: a UUID as 22 url-safe base64 characters.
    import base64

    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


_shared: KafkaBroker | None = None


def shared_bootstrap() -> str:
    """The bootstrap address of the suite's broker: ``LOCKGATE_TEST_KAFKA_BOOTSTRAP`` when set,
    else one broker started for the whole session (and stopped at exit)."""
    global _shared
    given = os.environ.get(BOOTSTRAP_ENV)
    if given:
        return given
    if _shared is None:
        broker = KafkaBroker()
        atexit.register(broker.close)
        broker.start()
        _shared = broker
    return _shared.bootstrap


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="kafka_broker.py",
        description="Start a single-node Apache Kafka broker (KRaft) on loopback, from its "
        "Maven Central jars, and keep it up until Ctrl-C.",
    )
    parser.add_argument("--port", type=int, default=9092, help="client port (default 9092)")
    parser.add_argument("--data-dir", type=Path, help="keep topics here across restarts")
    args = parser.parse_args(argv)
    data_dir = args.data_dir
    if data_dir is not None:
        data_dir.mkdir(parents=True, exist_ok=True)
    broker = KafkaBroker(port=args.port, data_dir=data_dir)
    try:
        say(f"starting Kafka {KAFKA_VERSION} in {broker.dir} ...")
        broker.start()
    except BrokerError as exc:
        say(str(exc))
        broker.stop(kill=True)
        return 1
    print(f"bootstrap: {broker.bootstrap}", flush=True)
    say(f"use --journal kafka://{broker.bootstrap}; log in {broker.log_path}; Ctrl-C to stop")
    stopped = False

    def _stop(*_: object) -> None:
        nonlocal stopped
        stopped = True

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    while not stopped and broker.process is not None and broker.process.poll() is None:
        time.sleep(0.5)
    broker.stop()
    if data_dir is None:
        broker.close()
    return 0
