"""Running workflows in production: a worker that claims runs from a shared store."""

from lockgate.worker._options import StrandedPolicy, WorkerOptions
from lockgate.worker._worker import WorkflowWorker

__all__ = ["StrandedPolicy", "WorkerOptions", "WorkflowWorker"]
