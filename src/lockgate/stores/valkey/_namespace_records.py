"""What a ValkeyStore records for a workflow outside its runs, namespace-wide: idempotency
keys (each with its run and the hash of the request that started it), version ranks, and the
policy each worker recorded at its start."""

from __future__ import annotations

import json
from typing import Any

from lockgate.stores.valkey._lifecycle import ValkeyLifecycle
from lockgate.stores.valkey._replies import as_text


class ValkeyNamespaceRecords(ValkeyLifecycle):
    """The idempotency, versions and policies groups on Valkey."""

    def _idempotency(self, name: str, key: str) -> tuple[str, str] | None:
        """The live record of ``key``: its run id and body hash ("" for none)."""
        record = self._script("t_idempotency_get", name, key)
        if not record:
            return None
        run_id, body_hash = record
        return as_text(run_id), as_text(body_hash)

    def get_idempotency_run(self, name: str, key: str) -> str | None:
        record = self._idempotency(name, key)
        return record[0] if record is not None else None

    def set_idempotency_run(self, name: str, key: str, run_id: str, ttl: int = 86_400) -> bool:
        return bool(self._script("t_idempotency_set", name, key, run_id, repr(float(ttl))))

    def get_idempotency_body_hash(self, name: str, key: str) -> str | None:
        record = self._idempotency(name, key)
        return (record[1] or None) if record is not None else None

    def register_version(self, name: str, version: str) -> int:
        return int(self._script("t_register_version", name, version))

    def version_rank(self, name: str, version: str) -> int | None:
        rank = self._cmd("HGET", self._key("ver", name), version)
        return int(rank) if rank is not None else None

    def record_workflow_policy(self, name: str, policy: dict[str, Any]) -> None:
        self._script(
            "t_record_policy", name, json.dumps(policy, allow_nan=False, separators=(",", ":"))
        )

    def get_workflow_policy(self, name: str) -> dict[str, Any] | None:
        policy = self._cmd("GET", self._key("policy", name))
        if policy is None:
            return None
        loaded: dict[str, Any] = json.loads(as_text(policy))
        return loaded
