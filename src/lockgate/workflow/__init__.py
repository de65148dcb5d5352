"""Declaring durable workflows and steps, and the context their bodies see."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lockgate._lazy import lazy_exports

if TYPE_CHECKING:
    from lockgate.attempt._attempt import check_replay
    from lockgate.workflow._binding import KafkaTopic
    from lockgate.workflow._context import WorkflowContext
    from lockgate.workflow._interrupt import InterruptAction, InterruptResponse
    from lockgate.workflow._retry import RetryPolicy
    from lockgate.workflow._runtime import StepContext
    from lockgate.workflow._source import StreamProgress
    from lockgate.workflow._spec import (
        DuplicateWorkflowWarning,
        WorkflowSpec,
        get_workflow,
        workflow,
    )
    from lockgate.workflow._step import step

__all__ = [
    "DuplicateWorkflowWarning",
    "InterruptAction",
    "InterruptResponse",
    "KafkaTopic",
    "RetryPolicy",
    "StepContext",
    "StreamProgress",
    "WorkflowContext",
    "WorkflowSpec",
    "check_replay",
    "get_workflow",
    "step",
    "workflow",
]


if not TYPE_CHECKING:  # a type checker sees the imports above, not a __getattr__
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "lockgate.workflow._binding": ("KafkaTopic",),
            "lockgate.workflow._context": ("WorkflowContext",),
            # The one name this package re-exports from above it: check_replay runs an
            # attempt, but it was public here before attempt/ was split off, and stays. Lazy,
            # so importing lockgate.workflow loads nothing of attempt/.
            "lockgate.attempt._attempt": ("check_replay",),
            "lockgate.workflow._interrupt": ("InterruptAction", "InterruptResponse"),
            "lockgate.workflow._retry": ("RetryPolicy",),
            "lockgate.workflow._runtime": ("StepContext",),
            "lockgate.workflow._spec": (
                "DuplicateWorkflowWarning",
                "WorkflowSpec",
                "get_workflow",
                "workflow",
            ),
            "lockgate.workflow._step": ("step",),
            "lockgate.workflow._source": ("StreamProgress",),
        },
    )
