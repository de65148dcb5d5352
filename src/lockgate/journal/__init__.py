"""The run journal: events, kinds, statuses and replay."""

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
