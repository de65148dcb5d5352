"""A run's journal events as the Valkey scripts take them, and as its stream gives them back."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from lockgate.journal._events import RunEvent
from lockgate.stores.valkey._replies import as_text, decode_hash


def event_args(events: Sequence[RunEvent]) -> str:
    """Events as the scripts take them: a JSON list of [kind, payload JSON, schema, headers]."""
    return json.dumps(
        [
            [
                e.kind,
                json.dumps(e.payload, allow_nan=False, separators=(",", ":")),
                e.schema_version,
                json.dumps(dict(e.headers), separators=(",", ":")),
            ]
            for e in events
        ],
        separators=(",", ":"),
    )


def event_from(name: str, run_id: str, entry_id: Any, fields: Any) -> RunEvent:
    data = decode_hash(fields)
    seq = int(as_text(entry_id).split("-", 1)[1])
    headers = json.loads(data.get("h") or "{}")
    return RunEvent(
        kind=data["k"],
        payload=json.loads(data["p"]),
        run_id=run_id,
        schema_version=data.get("v", "1"),
        run_seq=seq,
        headers=headers if isinstance(headers, dict) else {},
    )
