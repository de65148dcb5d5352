"""Running workflows in production: a worker that claims runs from a shared store."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lockgate._lazy import lazy_exports

if TYPE_CHECKING:
    from lockgate.worker._options import StrandedPolicy, WorkerOptions
    from lockgate.worker._worker import WorkflowWorker

__all__ = ["StrandedPolicy", "WorkerOptions", "WorkflowWorker"]


if not TYPE_CHECKING:  # a type checker sees the imports above, not a __getattr__
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "lockgate.worker._options": ("StrandedPolicy", "WorkerOptions"),
            "lockgate.worker._worker": ("WorkflowWorker",),
        },
    )
