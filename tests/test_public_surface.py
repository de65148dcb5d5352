"""The public surface is fixed here: a change to it is a deliberate edit of this file."""

from __future__ import annotations

import dataclasses
import importlib
import json
from pathlib import Path

import pytest

import lockgate
from lockgate import RunEvent

EXPECTED = {
    "CAPABILITY_GROUPS",
    "CompositeStore",
    "EVENT_SCHEMA_VERSION",
    "Batch",
    "CapabilityMissing",
    "ChainLink",
    "ChainStore",
    "ChildWorkflowError",
    "Clock",
    "CloseResult",
    "Collect",
    "ConfigurationError",
    "ConsumerDied",
    "Debounce",
    "DuplicateRunError",
    "DuplicateWorkflowWarning",
    "DurableInterrupt",
    "DurableInvocationCancelled",
    "DurableInvocationError",
    "DurableInvocationTimeout",
    "ErrorCode",
    "EventAfterTerminal",
    "EventKind",
    "EventLogStore",
    "ExistingRetry",
    "Fatal",
    "IdempotencyConflict",
    "InMemorySource",
    "InlineWorkflowRunner",
    "InterruptAction",
    "InterruptHandlerFailed",
    "InterruptResponse",
    "InvalidCursorError",
    "InvalidNameError",
    "InvalidParamsError",
    "InvalidTextError",
    "JournalNeedsNewerRuntime",
    "JournalPositionError",
    "JournalRecord",
    "JournalRecordUndecodable",
    "JournalReplay",
    "JournalTopicMismatch",
    "JournalTopicUnsafe",
    "KafkaEventLogStore",
    "KafkaRecord",
    "KafkaSource",
    "KafkaTopic",
    "LifecycleStore",
    "Limit",
    "LockLost",
    "LockgateError",
    "ManualClock",
    "MemoryStore",
    "NestedDurableOperationError",
    "NonDeterminismError",
    "PayloadTooLarge",
    "Poison",
    "QueryError",
    "Rate",
    "ReplayState",
    "ReplaySummary",
    "RetryPlan",
    "RetryPolicy",
    "RunEvent",
    "RunFinishedError",
    "RunGatedError",
    "RunHandle",
    "RunInfo",
    "RunNotFoundError",
    "RetryRefused",
    "RunNotStartedError",
    "RunNotWaitingError",
    "ContinuationChainError",
    "RunOwnedError",
    "RunStatus",
    "SQLiteStore",
    "ValkeyLifecycleStore",
    "ValkeyStore",
    "SchemaVersionMismatch",
    "ShardCountMismatch",
    "Source",
    "StepContext",
    "StepFailedError",
    "StepKind",
    "StepResultTypeError",
    "Store",
    "StoreAuthenticationError",
    "StoreError",
    "StoreFault",
    "StoreFileError",
    "StoreFileGone",
    "StoreProtocolError",
    "StoreUnavailable",
    "StrandedPolicy",
    "StreamProgress",
    "SystemClock",
    "TerminateOutcome",
    "TerminateResult",
    "Transient",
    "TriggerTopicMismatch",
    "UnboundContextError",
    "UpdateError",
    "UpdateRejected",
    "UpdateTimeout",
    "UserFailure",
    "WaitOutcome",
    "WaitTimeout",
    "WorkerOptions",
    "WorkflowClient",
    "WorkflowContext",
    "WorkflowSpec",
    "WorkflowWorker",
    "__version__",
    "chain_link",
    "check_replay",
    "open_store",
    "reconstruct_state",
    "replay_journal",
    "resolve_continuation",
    "run_and_await",
    "step",
    "workflow",
}

PACKAGES = [
    "lockgate",
    "lockgate.cli",
    "lockgate.client",
    "lockgate.dev",
    "lockgate.flow",
    "lockgate.http",
    "lockgate.journal",
    "lockgate.metrics",
    "lockgate.stores",
    "lockgate.stores.kafka",
    "lockgate.streams.sources",
    "lockgate.web",
    "lockgate.worker",
    "lockgate.workflow",
]


def test_top_level_exports_exactly_the_public_api() -> None:
    assert set(lockgate.__all__) == EXPECTED
    for name in lockgate.__all__:
        assert hasattr(lockgate, name), name


def test_the_http_package_exports_create_app_and_tokens() -> None:
    import lockgate.http

    assert lockgate.http.__all__ == ["TokenTable", "create_app", "hash_token"]


@pytest.mark.parametrize("package", PACKAGES)
def test_packages_export_public_names_only(package: str) -> None:
    module = importlib.import_module(package)
    names = list(module.__all__)
    assert len(names) == len(set(names))
    for name in names:
        assert not name.startswith("_") or name == "__version__", name
        assert hasattr(module, name), name


def test_every_error_derives_from_one_root_with_a_stable_code() -> None:
    errors = [getattr(lockgate, n) for n in lockgate.__all__]
    errors = [
        e
        for e in errors
        if isinstance(e, type) and issubclass(e, Exception) and not issubclass(e, Warning)
    ]
    assert len(errors) > 25
    for error in errors:
        assert issubclass(error, lockgate.LockgateError), error
        assert isinstance(error.code, lockgate.ErrorCode), error


def test_the_avro_schema_matches_run_event() -> None:
    schema = json.loads((Path(__file__).parents[1] / "schemas" / "run_event.avsc").read_text())
    avro_fields = [f["name"] for f in schema["fields"]]
    assert avro_fields == [f.name for f in dataclasses.fields(RunEvent)]


def test_the_stores_package_exports_the_rebuild_from_the_journal() -> None:
    import lockgate.stores

    assert {"RebuildReport", "rebuild_lifecycle"} <= set(lockgate.stores.__all__)
    assert lockgate.stores.rebuild_lifecycle.__module__ == "lockgate.stores.composite._rebuild"
