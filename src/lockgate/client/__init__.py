"""Starting runs and talking to them: the client, run handles and the inline runner."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lockgate._lazy import lazy_exports

if TYPE_CHECKING:
    from lockgate.client._client import WorkflowClient
    from lockgate.client._handle import RunHandle, TerminateResult
    from lockgate.client._inline import GATE_TIMEOUT_S, InlineWorkflowRunner, run_and_await
    from lockgate.runs._chains import resolve_continuation
    from lockgate.runs._family import CloseResult
    from lockgate.runs._retry import ExistingRetry, RetryPlan

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


if not TYPE_CHECKING:  # a type checker sees the imports above, not a __getattr__
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "lockgate.runs._family": ("CloseResult",),
            "lockgate.runs._chains": ("resolve_continuation",),
            "lockgate.client._client": ("WorkflowClient",),
            "lockgate.client._handle": ("RunHandle", "TerminateResult"),
            "lockgate.client._inline": ("GATE_TIMEOUT_S", "InlineWorkflowRunner", "run_and_await"),
            "lockgate.runs._retry": ("ExistingRetry", "RetryPlan"),
        },
    )
