"""Small builders the conformance tests share: every test talks to the store under NAME."""

from __future__ import annotations

from typing import Any

from lockgate import RunEvent, RunStatus, Store

NAME = "orders"


def event(kind: str, run_id: str, **payload: Any) -> RunEvent:
    return RunEvent(kind=kind, payload=payload, run_id=run_id)


def kinds(store: Store, run_id: str) -> list[str]:
    return [e.kind for e in store.load_run(NAME, run_id)]


def status(store: Store, run_id: str) -> RunStatus:
    info = store.get_run(NAME, run_id)
    assert info is not None, f"run {run_id} is gone"
    return info.status


def claimed(store: Store, run_id: str = "r1", lease: str = "lease-a") -> str:
    """Submit ``run_id`` and take it under ``lease``."""
    store.submit_run(NAME, run_id, {})
    store.claim_run(NAME, run_id, lease)
    return run_id
