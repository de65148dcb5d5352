"""The Quix Streams side of the collect work, run in its own venv: a tumbling count window
of 50 events per key (the record's key), exactly-once, each window's event ids produced as one
JSON record to ``BENCH_OUTPUT``. Quix's defaults are kept otherwise (a commit, and so a
transaction, every 5 s; its state in RocksDB under ``BENCH_STATE``, with a changelog topic).
Serves until SIGTERM."""

from __future__ import annotations

import os
import time
from typing import Any

from quixstreams import Application


def main() -> None:
    app = Application(
        broker_address=os.environ["BENCH_BOOTSTRAP"],
        consumer_group=os.environ["BENCH_GROUP"],
        processing_guarantee="exactly-once",
        auto_offset_reset="earliest",
        state_dir=os.environ["BENCH_STATE"],
    )
    events = app.topic(os.environ["BENCH_TOPIC"], value_deserializer="json")
    windows = app.topic(os.environ["BENCH_OUTPUT"], value_serializer="json")

    def ids(window: dict[str, Any]) -> dict[str, Any]:
        # When the window was emitted (its transaction commits up to 5 s later).
        return {"ids": [int(event["n"]) for event in window["value"]], "at": time.time()}

    frame = app.dataframe(events)
    frame = frame.tumbling_count_window(50).collect().final()
    frame = frame.apply(ids)
    frame.to_topic(windows)
    app.run()


if __name__ == "__main__":
    main()
