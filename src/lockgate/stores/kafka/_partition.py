"""Which partition of the journal topic a run's records go to, and under which key.

A run's partition is its shard: the journal topic has one partition per lifecycle shard, and
the hash is the Valkey store's own (:func:`~lockgate.stores._shards.shard_for` over
:func:`~lockgate.stores._shards.shard_key`), never the Kafka client's partitioner, so a
shard's runs and their journals line up. The record key is the run's gate key: its ``Limit``'s
key, else its ``Rate``'s, else its run id.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lockgate.journal._events import EventKind, RunEvent
from lockgate.stores._shards import shard_key


def gate_key(init: RunEvent) -> str:
    """The gate key a run's ``run:init`` names (when it names no gate: its shard key, else its
    run id)."""
    gates: Mapping[str, Any] = init.payload.get("gates") or {}
    fallback = init.payload.get("shard_key")
    return shard_key(
        _key_of(gates.get("concurrency")),
        _key_of(gates.get("rate")),
        fallback if isinstance(fallback, str) and fallback else init.run_id,
    )


def _key_of(gate: Any) -> str | None:
    key = gate.get("key") if isinstance(gate, Mapping) else None
    return str(key) if key is not None else None


def is_init(event: RunEvent) -> bool:
    return event.kind == EventKind.RUN_INIT
