"""Starting runs and talking to them: the client, run handles and the inline runner."""

from lockgate.client._cascade import CloseResult
from lockgate.client._chains import resolve_continuation
from lockgate.client._client import WorkflowClient
from lockgate.client._handle import RunHandle, TerminateResult
from lockgate.client._inline import GATE_TIMEOUT_S, InlineWorkflowRunner, run_and_await
from lockgate.client._retry import ExistingRetry, RetryPlan

__all__ = [
    "GATE_TIMEOUT_S",
    "CloseResult",
    "ExistingRetry",
    "InlineWorkflowRunner",
    "RetryPlan",
    "RunHandle",
    "TerminateResult",
    "WorkflowClient",
    "resolve_continuation",
    "run_and_await",
]
