"""Restate's side: ``restate-server`` 1.7.12 (from the npm package, its binary from the
optional dependency ``@restatedev/restate-server-linux-x64``) with a Kafka cluster in its
ingress configured to the bench's broker, and one hypercorn process serving
``restate_app.py`` (restate-sdk 1.2.0) in its own venv. A fresh server (its own base
directory) and topic each repeat; a subscription sends the topic's records to the handler.
Counted and checked through the server's SQL introspection API (``/query``)."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

from _install import PeerUnavailable, npm_peer, python_peer
from _procs import Started, answers, http_json, scratch, wait_until
from _timing import exactly_once, span_rate, wait_completion
from _work import BOUND_PARTITIONS, Outcome, Scale, create_topic, fresh_name, produce_records

from valkey_server import free_port

HERE = Path(__file__).resolve().parent
SDK = "1.2.0"
SERVER = "1.7.12"
HYPERCORN = "0.18.0"

DURABILITY = (
    "its log (Bifrost, the replicated loglet with replication 1 on this node's log-server) "
    "in RocksDB with the WAL fsynced (rocksdb-disable-wal-fsync = false); partition state in "
    "RocksDB; Restate's defaults kept, as `restate-server --dump-config` prints them"
)


class Restate:
    def __init__(self) -> None:
        self.python = python_peer(
            "restate", SDK, [f"restate-sdk=={SDK}", f"hypercorn=={HYPERCORN}"]
        )
        where = npm_peer("restate-server", "@restatedev/restate-server", SERVER)
        self.server = where / "node_modules/@restatedev/restate-server-linux-x64/bin/restate-server"
        if not self.server.exists():
            raise PeerUnavailable(
                f"restate-server: {self.server} is missing: npm installs the binary only "
                "for Linux x64 (the optional dependency @restatedev/restate-server-linux-x64)"
            )

    def bound(self, bootstrap: str, scale: Scale) -> Outcome:
        topic = fresh_name("restate")
        create_topic(bootstrap, topic, BOUND_PARTITIONS)
        produce_records(bootstrap, topic, scale)
        with scratch("restate") as base:
            ports = {name: free_port() for name in ("node", "admin", "ingress", "sdk")}
            admin = f"http://127.0.0.1:{ports['admin']}"
            (base / "restate.toml").write_text(
                f'base-dir = "{base / "data"}"\n'
                f'bind-address = "127.0.0.1:{ports["node"]}"\n'
                f'advertised-address = "http://127.0.0.1:{ports["node"]}/"\n'
                "disable-telemetry = true\n"
                f'[admin]\nbind-address = "127.0.0.1:{ports["admin"]}"\n'
                f'[ingress]\nbind-address = "127.0.0.1:{ports["ingress"]}"\n'
                f'[[ingress.kafka-clusters]]\nname = "bench"\nbrokers = ["{bootstrap}"]\n'
            )
            # hypercorn with the HTTP/2 limits restate-sdk's own harness.py sets, one worker.
            (base / "hypercorn.toml").write_text(
                f'bind = "127.0.0.1:{ports["sdk"]}"\n'
                "h2_max_concurrent_streams = 2147483647\n"
                "keep_alive_max_requests = 2147483647\n"
                "keep_alive_timeout = 2147483647\n"
                "workers = 1\n"
            )
            server = Started(
                "restate-server",
                [str(self.server), "--config-file", str(base / "restate.toml"), "--no-logo"],
                base / "server.log",
                RESTATE_LISTEN_MODE="tcp",
            )
            handler = Started(
                "hypercorn",
                [
                    str(self.python),
                    "-m",
                    "hypercorn",
                    "--config",
                    str(base / "hypercorn.toml"),
                    "restate_app:app",
                ],
                base / "hypercorn.log",
                cwd=HERE,
            )
            try:
                alive = lambda: server.alive() and handler.alive()  # noqa: E731
                wait_until("restate-server", lambda: answers(f"{admin}/health"), alive, 60)
                wait_until(
                    "restate deployment",
                    lambda: _registered(admin, ports["sdk"]),
                    alive,
                    60,
                )
                wait_until("restate queries", lambda: _queryable(admin), alive, 60)
                http_json(
                    f"{admin}/subscriptions",
                    {
                        "source": f"kafka://bench/{topic}",
                        "sink": "service://BenchBound/run",
                        "options": {"auto.offset.reset": "earliest", "group.id": topic},
                    },
                )
                try:
                    polled = wait_completion(
                        lambda: _count(admin, "status = 'completed'"), scale.records, alive
                    )
                except Exception:
                    print(server.tail(), handler.tail(), sep="\n", flush=True)
                    raise
                return _check(admin, scale, polled)
            finally:
                handler.stop()
                server.stop()


def _registered(admin: str, port: int) -> bool:
    try:
        http_json(f"{admin}/deployments", {"uri": f"http://127.0.0.1:{port}"})
    except (OSError, RuntimeError):
        return False
    return True


def _queryable(admin: str) -> bool:
    try:
        _count(admin, "true")
    except RuntimeError:  # its partitions not led yet
        return False
    return True


def _query(admin: str, sql: str) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = http_json(f"{admin}/query", {"query": sql})["rows"]
    return rows


def _count(admin: str, where: str) -> int:
    rows = _query(admin, f"SELECT count(*) AS c FROM sys_invocation WHERE {where}")
    return int(str(rows[0]["c"]))


def _check(admin: str, scale: Scale, polled: float) -> Outcome:
    """Each completed, successful invocation's input (the record, kept in its journal for a
    day: the default journal retention) read back from ``sys_journal``; the rate from the
    invocations' ``completed_at``."""
    rows = _query(
        admin,
        "SELECT i.status, i.completion_result, i.completed_at, j.entry_json FROM sys_invocation i "
        "JOIN sys_journal j ON j.id = i.id WHERE j.index = 0",
    )
    seen = []
    ended = []
    for row in rows:
        if row["status"] == "completed" and row["completion_result"] == "success":
            at = str(row["completed_at"]).replace("Z", "+00:00")
            ended.append(datetime.fromisoformat(at).timestamp())
            entry = json.loads(str(row["entry_json"]))
            seen.append(int(json.loads(bytes(entry["Command"]["Input"]["payload"]))["n"]))
    line, exact = exactly_once(seen, scale.records, "records", "completed invocation")
    others = len(rows) - len(seen)
    if others:
        line, exact = f"{line}; {others} invocations not completed with success", False
    return Outcome(span_rate(ended), polled, line, exact)
