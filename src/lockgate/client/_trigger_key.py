"""A trigger event checked where it is sent (``client.trigger``): the key it goes under."""

from __future__ import annotations

from typing import Any

from lockgate._errors import InvalidParamsError
from lockgate.journal._events import payload_size
from lockgate.workflow._spec import WorkflowSpec, check_text, json_ready


def trigger_key(spec: WorkflowSpec, event: Any, key: str | None, *, keyed: bool) -> str:
    """The key ``event`` of ``spec``'s trigger goes under: ``key`` when given, else what the
    trigger resolves from the event. The event must be a JSON object within the workflow's
    payload cap; with ``keyed`` (events going to a trigger topic, whose consumers dead-letter
    an event without one) a trigger keyed on a field needs that field. Raises before anything
    is sent."""
    name = spec.name
    assert spec.trigger is not None
    check_text(event, f"a trigger event of {name!r}")
    if not isinstance(event, dict) or not json_ready(event):
        raise ValueError(f"a trigger event of {name!r} must be a JSON object")
    spec.check_payload(payload_size(event), f"trigger event of {name!r}")
    if key is not None:
        if not isinstance(key, str):
            raise InvalidParamsError(
                f"a trigger key of {name!r} must be a string, not {type(key).__name__}",
                workflow=name,
            )
        return key
    declared = spec.trigger.key
    if keyed and isinstance(declared, str) and event.get(declared) is None:
        raise InvalidParamsError(
            f"a trigger event of {name!r} needs its key field {declared!r} (or give the key); "
            f"nothing was sent",
            workflow=name,
        )
    try:
        return spec.trigger.resolve(event)
    except Exception as exc:
        raise InvalidParamsError(
            f"the trigger key of {name!r} could not be resolved from this event: {exc}; "
            f"nothing was buffered",
            workflow=name,
        ) from exc
