"""The run journal: events, kinds, statuses and replay."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lockgate._lazy import lazy_exports

if TYPE_CHECKING:
    from lockgate.journal._events import (
        EVENT_SCHEMA_VERSION,
        EventKind,
        RunEvent,
        RunStatus,
        StepKind,
    )
    from lockgate.journal._replay import CallRecord, ReplayState, reconstruct_state

__all__ = [
    "EVENT_SCHEMA_VERSION",
    "CallRecord",
    "EventKind",
    "ReplayState",
    "RunEvent",
    "RunStatus",
    "StepKind",
    "reconstruct_state",
]


if not TYPE_CHECKING:  # a type checker sees the imports above, not a __getattr__
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "lockgate.journal._events": (
                "EVENT_SCHEMA_VERSION",
                "EventKind",
                "RunEvent",
                "RunStatus",
                "StepKind",
            ),
            "lockgate.journal._replay": ("CallRecord", "ReplayState", "reconstruct_state"),
        },
    )
