"""Store backends and the interface they implement."""

from lockgate._errors import StoreFileError, StoreFileGone
from lockgate.stores._base import (
    CAPABILITY_GROUPS,
    ControlStore,
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
from lockgate.stores._composite import CompositeStore
from lockgate.stores._gates import Gates, WaitReason
from lockgate.stores._insight import BufferInfo, InsightStore, LimitUsage, RateUsage, WorkerInfo
from lockgate.stores._open import JOURNAL_URL_ENV, STORE_URL_ENV, open_store
from lockgate.stores._poison import PoisonPolicy
from lockgate.stores._records import Continuation
from lockgate.stores._triggers import FiredBatch, TriggerPolicy, TriggerStore
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
from lockgate.stores.kafka import (
    JournalRecord,
    JournalReplay,
    KafkaEventLogStore,
    ReplaySummary,
    replay_journal,
)
from lockgate.stores.kafka._rebuild import RebuildReport, rebuild_lifecycle
from lockgate.stores.memory import MemoryStore
from lockgate.stores.sqlite import SQLiteStore
from lockgate.stores.valkey import ValkeyLifecycleStore, ValkeyStore

__all__ = [
    "CAPABILITY_GROUPS",
    "JOURNAL_URL_ENV",
    "STORE_URL_ENV",
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
