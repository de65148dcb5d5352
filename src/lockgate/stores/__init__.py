"""Store backends and the interface they implement."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lockgate._lazy import lazy_exports

if TYPE_CHECKING:
    from lockgate._errors import StoreFileError, StoreFileGone
    from lockgate.stores._base import (
        CAPABILITY_GROUPS,
        EventLogStore,
        IdempotencyStore,
        LifecycleStore,
        PolicyStore,
        SignalStore,
        Store,
        TimerStore,
        UpdateStore,
        VersionStore,
    )
    from lockgate.stores._chains import ChainLink, ChainStore, chain_link
    from lockgate.stores._controls import ControlStore
    from lockgate.stores._gates import Gates, WaitReason
    from lockgate.stores._insight import BufferInfo, InsightStore, LimitUsage, RateUsage, WorkerInfo
    from lockgate.stores._poison import PoisonPolicy
    from lockgate.stores._records import Continuation
    from lockgate.stores._triggers import BatchToFire, FiredBatch, TriggerPolicy, TriggerStore
    from lockgate.stores._types import (
        ClaimedRun,
        Claims,
        RunControls,
        RunInfo,
        StoreMarker,
        TerminateOutcome,
        WaitOutcome,
        WaitSpec,
    )
    from lockgate.stores._urls import JOURNAL_URL_ENV, STORE_URL_ENV
    from lockgate.stores.composite._rebuild import RebuildReport, rebuild_lifecycle
    from lockgate.stores.composite._store import CompositeStore
    from lockgate.stores.kafka import (
        JournalRecord,
        JournalReplay,
        KafkaEventLogStore,
        ReplaySummary,
        replay_journal,
    )
    from lockgate.stores.memory import MemoryStore
    from lockgate.stores.opener._open import open_store
    from lockgate.stores.sqlite import SQLiteStore
    from lockgate.stores.valkey import ValkeyLifecycleStore, ValkeyStore

__all__ = [
    "CAPABILITY_GROUPS",
    "JOURNAL_URL_ENV",
    "STORE_URL_ENV",
    "BatchToFire",
    "BufferInfo",
    "ChainLink",
    "ChainStore",
    "ClaimedRun",
    "Claims",
    "CompositeStore",
    "Continuation",
    "ControlStore",
    "EventLogStore",
    "FiredBatch",
    "Gates",
    "IdempotencyStore",
    "InsightStore",
    "JournalRecord",
    "JournalReplay",
    "KafkaEventLogStore",
    "LifecycleStore",
    "LimitUsage",
    "MemoryStore",
    "PoisonPolicy",
    "PolicyStore",
    "RateUsage",
    "RebuildReport",
    "ReplaySummary",
    "RunControls",
    "RunInfo",
    "SQLiteStore",
    "SignalStore",
    "Store",
    "StoreFileError",
    "StoreFileGone",
    "StoreMarker",
    "TerminateOutcome",
    "TimerStore",
    "TriggerPolicy",
    "TriggerStore",
    "UpdateStore",
    "ValkeyLifecycleStore",
    "ValkeyStore",
    "VersionStore",
    "WaitOutcome",
    "WaitReason",
    "WaitSpec",
    "WorkerInfo",
    "chain_link",
    "open_store",
    "rebuild_lifecycle",
    "replay_journal",
]


if not TYPE_CHECKING:  # a type checker sees the imports above, not a __getattr__
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "lockgate._errors": ("StoreFileError", "StoreFileGone"),
            "lockgate.stores._base": (
                "CAPABILITY_GROUPS",
                "EventLogStore",
                "IdempotencyStore",
                "LifecycleStore",
                "PolicyStore",
                "SignalStore",
                "Store",
                "TimerStore",
                "UpdateStore",
                "VersionStore",
            ),
            "lockgate.stores._chains": ("ChainLink", "ChainStore", "chain_link"),
            "lockgate.stores._controls": ("ControlStore",),
            "lockgate.stores.composite._store": ("CompositeStore",),
            "lockgate.stores._gates": ("Gates", "WaitReason"),
            "lockgate.stores._insight": (
                "BufferInfo",
                "InsightStore",
                "LimitUsage",
                "RateUsage",
                "WorkerInfo",
            ),
            "lockgate.stores.opener._open": ("open_store",),
            "lockgate.stores._poison": ("PoisonPolicy",),
            "lockgate.stores._records": ("Continuation",),
            "lockgate.stores._triggers": (
                "BatchToFire",
                "FiredBatch",
                "TriggerPolicy",
                "TriggerStore",
            ),
            "lockgate.stores._urls": ("JOURNAL_URL_ENV", "STORE_URL_ENV"),
            "lockgate.stores._types": (
                "ClaimedRun",
                "Claims",
                "RunControls",
                "RunInfo",
                "StoreMarker",
                "TerminateOutcome",
                "WaitOutcome",
                "WaitSpec",
            ),
            "lockgate.stores.kafka": (
                "JournalRecord",
                "JournalReplay",
                "KafkaEventLogStore",
                "ReplaySummary",
                "replay_journal",
            ),
            "lockgate.stores.composite._rebuild": ("RebuildReport", "rebuild_lifecycle"),
            "lockgate.stores.memory": ("MemoryStore",),
            "lockgate.stores.sqlite": ("SQLiteStore",),
            "lockgate.stores.valkey": ("ValkeyLifecycleStore", "ValkeyStore"),
        },
    )
