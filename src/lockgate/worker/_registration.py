"""What a worker tells the store about its workflows when it starts: their versions, and the
flow-control policy each declares. A process that submits by name without importing the
workflow stamps its runs with the recorded version (and, with flow control, its gates)."""

from __future__ import annotations

from typing import Any

from lockgate.flow import Collect, Debounce, Limit, Rate
from lockgate.flow._policies import KeySpec
from lockgate.worker._runtime import Runtime
from lockgate.workflow._spec import WorkflowSpec


def _key(key: KeySpec) -> dict[str, Any]:
    # A key function cannot be stored; the record says one exists, so a submitter that has
    # only the record knows it cannot resolve the key itself.
    if isinstance(key, str):
        return {"key": key, "key_callable": False}
    return {"key": None, "key_callable": True}


def _limit(limit: Limit | None) -> dict[str, Any] | None:
    if limit is None:
        return None
    return {**_key(limit.key), "max": limit.max}


def _rate(rate: Rate | None) -> dict[str, Any] | None:
    if rate is None:
        return None
    return {**_key(rate.key), "per_second": float(rate.per_second), "burst": rate.capacity}


def _trigger(trigger: Collect | Debounce | None) -> dict[str, Any] | None:
    if trigger is None:
        return None
    if isinstance(trigger, Collect):
        return {
            **_key(trigger.key),
            "mode": "collect",
            "window_seconds": float(trigger.window_seconds),
            "max_events": trigger.max_events,
            "topic": trigger.topic,
        }
    return {
        **_key(trigger.key),
        "mode": "debounce",
        "window_seconds": float(trigger.window_seconds),
        "max_wait_seconds": trigger.max_wait_seconds,
        "topic": trigger.topic,
    }


def policy_record(spec: WorkflowSpec) -> dict[str, Any]:
    """The JSON form of ``spec``'s ``Limit``, ``Rate``, trigger and bound topic, with the
    version declaring them and its payload cap (which params, signals and updates sent by
    name are held to)."""
    return {
        "version": spec.version,
        "version_behavior": spec.version_behavior,
        "max_event_payload_bytes": spec.max_event_payload_bytes,
        "concurrency": _limit(spec.concurrency),
        "rate": _rate(spec.rate_limit),
        "trigger": _trigger(spec.trigger),
        # The topic a bound workflow reads: `lockgate bound status NAME` finds it by name.
        "topic": spec.topic.name if spec.topic is not None else None,
    }


async def register_workflows(rt: Runtime) -> None:
    """Register each served workflow's version and record its policy, where the store keeps
    them (the ``versions`` and ``policies`` groups). Idempotent: every start repeats it."""
    capabilities = rt.store.capabilities()
    for spec in rt.specs.values():
        if "versions" in capabilities:
            await rt.io(rt.store.register_version, spec.name, spec.version)
        if "policies" in capabilities:
            await rt.io(rt.store.record_workflow_policy, spec.name, policy_record(spec))
