"""The DBOS side of the bound work, run in DBOS's own venv.

``python dbos_app.py serve``: a ``@DBOS.kafka_consumer`` workflow with one ``@DBOS.step`` per
record of ``BENCH_TOPIC`` (DBOS's defaults kept: records enqueued durably in batches of up to
250 on its internal Kafka queue, polled every second), on the system database
``BENCH_DB_URL``, until SIGTERM.

``python dbos_app.py watch DB_URL TOTAL PID``: waits (while process PID lives) until TOTAL
workflows are SUCCESS in that database, then checks them and prints one JSON line: the rate
from their ``updated_at`` (as ``_timing.py`` says) and the check. Record ``n`` is at offset
``n // 8`` of partition ``n % 8``; each must have exactly one SUCCESS workflow (its id names the
partition and offset) whose one step completed.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import threading
import time
from typing import Any

PARTITIONS = 8
NAME = "peers_bound"


def serve() -> None:
    from dbos import DBOS, DBOSConfig, KafkaMessage

    config: DBOSConfig = {
        "name": "lockgate-bench-peers",
        "system_database_url": os.environ["BENCH_DB_URL"],
    }
    DBOS(config=config)
    consumer = {
        "bootstrap.servers": os.environ["BENCH_BOOTSTRAP"],
        "group.id": os.environ["BENCH_TOPIC"],
        "auto.offset.reset": "earliest",
    }

    @DBOS.step()
    def touch(n: int) -> int:
        return n + 1

    @DBOS.kafka_consumer(consumer, [os.environ["BENCH_TOPIC"]])
    @DBOS.workflow(name=NAME)
    def peers_bound(message: KafkaMessage) -> None:
        assert message.value is not None
        touch(int(json.loads(message.value)["n"]))

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    DBOS.launch()
    stop.wait()
    DBOS.destroy()


def watch(url: str, total: int, pid: int) -> None:
    import psycopg

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from _timing import NotCompleted, exactly_once, span_rate, wait_completion

    def alive() -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True

    while True:  # DBOS creates the database as it launches
        try:
            db = psycopg.connect(url, autocommit=True)
            break
        except psycopg.OperationalError:
            if not alive():
                raise
            time.sleep(0.2)
    with db:

        def completed() -> int:
            try:
                row = db.execute(
                    "SELECT count(*) FROM dbos.workflow_status "
                    "WHERE name = %s AND status = 'SUCCESS'",
                    (NAME,),
                ).fetchone()
            except psycopg.errors.UndefinedTable:  # DBOS has not made its tables yet
                return 0
            return int(row[0]) if row else 0

        result: dict[str, Any] = {}
        try:
            result["polled"] = wait_completion(completed, total, alive)
        except NotCompleted as error:
            result["error"] = str(error)
        rows = db.execute(
            "SELECT w.workflow_uuid, w.status, w.updated_at, count(o.function_name) FROM "
            "dbos.workflow_status w LEFT JOIN dbos.operation_outputs o ON "
            "o.workflow_uuid = w.workflow_uuid AND o.error IS NULL WHERE w.name = %s "
            "GROUP BY w.workflow_uuid, w.status, w.updated_at",
            (NAME,),
        ).fetchall()
    seen = []
    ended = []
    others = 0
    for workflow_id, status, updated_at, steps in rows:
        found = re.fullmatch(r"kafka-unique-id-.+-(\d+)-.+-(\d+)", workflow_id)
        if status == "SUCCESS" and steps == 1 and found:
            seen.append(int(found[2]) * PARTITIONS + int(found[1]))
            ended.append(int(updated_at) / 1000)
        else:
            others += 1
    line, exact = exactly_once(seen, total, "records", "SUCCESS workflow")
    if others:
        line, exact = f"{line}; {others} workflows not SUCCESS with one step", False
    result.update(rate=span_rate(ended), check=line, exact=exact)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve()
    else:
        watch(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
