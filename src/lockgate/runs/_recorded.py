"""What a process that does not import a workflow knows of it: the declaration its workers
recorded in the store with its policy (version, gates, trigger, payload cap), from which a
submit, signal or trigger by name is checked and stamped."""

from __future__ import annotations

from typing import Any

from lockgate._errors import ConfigurationError
from lockgate.flow import Collect, Debounce, Limit, Rate
from lockgate.workflow._spec import DEFAULT_PAYLOAD_CAP, WorkflowSpec, policy_stamp


def recorded_stamp(
    name: str, record: dict[str, Any] | None, params: dict[str, Any]
) -> dict[str, Any]:
    """The gates of a submit by name, from the policy its workers recorded."""
    if record is None:
        # No worker has said what gates it declares: the first one to claim the run hands it
        # on with its own.
        return {"gates_unknown": True}
    return policy_stamp(recorded_spec(name, record), params)


def recorded_spec(name: str, record: dict[str, Any]) -> WorkflowSpec:
    """``name``'s declaration as its workers recorded it (version, ``Limit``, ``Rate``,
    trigger), for a process that does not import the workflow. A key given as a function
    resolves only where the workflow is imported, so a record naming one is refused."""

    def key(entry: dict[str, Any], field_name: str) -> str:
        if entry.get("key_callable"):
            raise ConfigurationError(
                f"workflow {name!r} keys its {field_name} on a function, which only resolves "
                f"where the workflow is imported; import it here to submit it"
            )
        return str(entry["key"])

    def entry(field_name: str) -> dict[str, Any] | None:
        value = record.get(field_name)
        return value if isinstance(value, dict) else None

    try:
        limit, rate, trigger = entry("concurrency"), entry("rate"), entry("trigger")
        declared: Collect | Debounce | None = None
        if trigger is not None and trigger.get("mode") == "collect":
            declared = Collect(
                key(trigger, "trigger"),
                int(trigger["max_events"]),
                trigger["window_seconds"],
                trigger.get("topic"),
            )
        elif trigger is not None:
            declared = Debounce(
                key(trigger, "trigger"),
                trigger["window_seconds"],
                trigger.get("max_wait_seconds"),
                trigger.get("topic"),
            )
        return WorkflowSpec(
            name=name,
            max_event_payload_bytes=recorded_cap(name, record),
            version=str(record.get("version") or ""),
            version_behavior="pinned"
            if record.get("version_behavior") == "pinned"
            else "auto_upgrade",
            concurrency=Limit(key(limit, "concurrency"), int(limit["max"])) if limit else None,
            rate_limit=(
                Rate(key(rate, "rate_limit"), float(rate["per_second"]), rate.get("burst"))
                if rate
                else None
            ),
            trigger=declared,
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigurationError(
            f"the policy recorded for workflow {name!r} is unreadable ({exc}); restart a worker "
            f"that serves it to record it again"
        ) from exc


def recorded_cap(name: str, record: dict[str, Any] | None) -> int | None:
    """The payload cap ``name``'s workers recorded with its policy (None: no cap); the default
    cap when there is no record, or one from a lockgate that did not record it."""
    if record is None or "max_event_payload_bytes" not in record:
        return DEFAULT_PAYLOAD_CAP
    cap = record["max_event_payload_bytes"]
    if cap is None or (isinstance(cap, int) and not isinstance(cap, bool) and cap > 0):
        return cap
    raise ConfigurationError(
        f"the policy recorded for workflow {name!r} has an unreadable payload cap ({cap!r}); "
        f"restart a worker that serves it to record it again"
    )
