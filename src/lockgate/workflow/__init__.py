"""Declaring durable workflows and steps, and the context their bodies see."""

from lockgate.workflow._binding import KafkaTopic
from lockgate.workflow._context import StepContext, WorkflowContext
from lockgate.workflow._executor import check_replay
from lockgate.workflow._interrupt import InterruptAction, InterruptResponse
from lockgate.workflow._retry import RetryPolicy
from lockgate.workflow._spec import (
    DuplicateWorkflowWarning,
    WorkflowSpec,
    get_workflow,
    workflow,
)
from lockgate.workflow._step import step
from lockgate.workflow._stream import StreamProgress

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
