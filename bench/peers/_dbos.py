"""DBOS's side: ``dbos_app.py serve`` (dbos 3.4.0, in its own venv) on a PostgreSQL server
started by ``_postgres.py`` for the whole run, a fresh system database and topic each repeat;
``dbos_app.py watch`` in the same venv times and checks it in DBOS's own tables."""

from __future__ import annotations

import json
from pathlib import Path

from _install import python_peer
from _procs import Started, scratch
from _work import BOUND_PARTITIONS, Outcome, Scale, create_topic, fresh_name, produce_records

HERE = Path(__file__).resolve().parent
VERSION = "3.4.0"

DURABILITY = (
    "each workflow's and step's rows committed to PostgreSQL 15 with its defaults kept "
    "(fsync = on, synchronous_commit = on: the WAL fsynced at each commit)"
)


class Dbos:
    def __init__(self, postgres_url: str) -> None:
        self.python = python_peer("dbos", VERSION, [f"dbos=={VERSION}"])
        self.postgres_url = postgres_url

    def command(self, mode: str) -> list[str]:
        return [str(self.python), str(HERE / "dbos_app.py"), mode]

    def bound(self, bootstrap: str, scale: Scale) -> Outcome:
        topic = fresh_name("dbos")
        create_topic(bootstrap, topic, BOUND_PARTITIONS)
        produce_records(bootstrap, topic, scale)
        database = topic.replace("-", "_")
        url = self.postgres_url.rsplit("/", 1)[0] + f"/{database}"
        with scratch("dbos") as logs:
            serving = Started(
                "dbos",
                self.command("serve"),
                logs / "dbos.log",
                BENCH_DB_URL=url,
                BENCH_BOOTSTRAP=bootstrap,
                BENCH_TOPIC=topic,
            )
            try:
                watch = Started(
                    "dbos-watch",
                    [*self.command("watch"), url, str(scale.records), str(serving.proc.pid)],
                    logs / "watch.log",
                )
                watch.proc.wait()
                lines = watch.log.read_text().strip().splitlines()
                try:
                    result = json.loads(lines[-1])
                except (IndexError, ValueError):
                    result = {"error": "the watcher printed no result", "check": "not checked"}
                if "error" in result:
                    print(serving.tail(), watch.tail(), sep="\n", flush=True)
                    raise RuntimeError(f"dbos: {result['error']}; {result.get('check')}")
                return Outcome(
                    float(result["rate"]),
                    float(result["polled"]),
                    str(result["check"]),
                    bool(result["exact"]),
                )
            finally:
                serving.stop()
