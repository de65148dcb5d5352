"""The store conformance suite's backends: one factory per backend, one ``store`` per test.

Every test in ``tests/stores`` runs once per entry of :data:`STORE_FACTORIES` and speaks only
the public :class:`lockgate.stores.Store` interface, so a new backend is added by appending a
factory here and is done when the suite passes unchanged. The Valkey factories use a real
server the suite starts (see ``tests/valkey_server.py``); when it cannot start one, the tests
fail saying why, never skip.

Every factory builds its store with the same settings (:data:`LOCK_TTL`,
:data:`HEARTBEAT_INTERVAL`, :data:`MAX_RETRIES`, :data:`MAX_STORE_REQUEUES`), which the tests
rely on, and judges time by the :class:`ManualClock` it is given.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import pytest

from lockgate import ManualClock, MemoryStore, Store
from lockgate.stores import (
    CompositeStore,
    KafkaEventLogStore,
    SQLiteStore,
    ValkeyLifecycleStore,
    ValkeyStore,
)
from lockgate.stores.valkey._loop import Op
from valkey_server import shared_url

T = TypeVar("T")

#: Seconds a lease lives without a heartbeat.
LOCK_TTL = 30.0
#: Seconds between heartbeats of a running attempt.
HEARTBEAT_INTERVAL = 10.0
#: ``owner_gone`` requeues a run survives since its last progress.
MAX_RETRIES = 3
#: ``store_unavailable`` requeues a run survives since its last progress.
MAX_STORE_REQUEUES = 20


class _Loop:
    """One event loop on a thread of its own, for the whole session."""

    loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    def get(cls) -> asyncio.AbstractEventLoop:
        if cls.loop is None:
            cls.loop = asyncio.new_event_loop()
            threading.Thread(target=cls.loop.run_forever, daemon=True).start()
        return cls.loop


class OnLoopValkeyStore(ValkeyStore):
    """A ValkeyStore whose operations (see ``stores/valkey/_loop.py``) all go through the
    asyncio driver and client, as a worker's attempts call them, instead of the blocking
    ones: the suite then checks the worker's path through every operation."""

    def _run(self, op: Op[T]) -> T:
        return asyncio.run_coroutine_threadsafe(self._arun(op), _Loop.get()).result()


V = TypeVar("V", bound=ValkeyStore)


def on_valkey(kind: type[V], clock: ManualClock, prefix: str) -> V:
    """A store of ``kind`` on the suite's server, in a namespace of its own."""
    return kind(
        shared_url(),
        namespace=f"{prefix}{uuid.uuid4().hex[:12]}",
        clock=clock,
        lock_ttl=LOCK_TTL,
        heartbeat_interval=HEARTBEAT_INTERVAL,
        max_retries=MAX_RETRIES,
        max_store_requeues=MAX_STORE_REQUEUES,
        retry_attempts=0,
    )


def on_kafka(clock: ManualClock) -> CompositeStore:
    """Valkey coordinating, the suite's Kafka broker keeping the journals, in a topic of the
    store's own (so no test reads another's runs)."""
    import kafka_broker

    lifecycle = on_valkey(ValkeyLifecycleStore, clock, "k")
    # No shard_count: the topic is made when the composite binds the lifecycle, with its count.
    events = KafkaEventLogStore(
        kafka_broker.shared_bootstrap(), topic_prefix=f"lgt{uuid.uuid4().hex[:12]}"
    )
    return CompositeStore(lifecycle=lifecycle, events=events)


@dataclass(frozen=True)
class StoreFactory:
    """A backend under test: ``make(clock, tmp_path)`` returns a fresh, empty store."""

    id: str
    make: Callable[[ManualClock, Path], Store]


STORE_FACTORIES: list[StoreFactory] = [
    StoreFactory(
        "memory",
        lambda clock, tmp_path: MemoryStore(
            clock=clock,
            lock_ttl=LOCK_TTL,
            heartbeat_interval=HEARTBEAT_INTERVAL,
            max_retries=MAX_RETRIES,
            max_store_requeues=MAX_STORE_REQUEUES,
        ),
    ),
    StoreFactory(
        "sqlite",
        lambda clock, tmp_path: SQLiteStore(
            tmp_path / "store.db",
            clock=clock,
            lock_ttl=LOCK_TTL,
            heartbeat_interval=HEARTBEAT_INTERVAL,
            max_retries=MAX_RETRIES,
            max_store_requeues=MAX_STORE_REQUEUES,
            synchronous="normal",
        ),
    ),
    StoreFactory(
        "valkey",
        # A real server (started once per session); a namespace per store keeps tests apart.
        lambda clock, tmp_path: on_valkey(ValkeyStore, clock, "t"),
    ),
    StoreFactory("valkey-loop", lambda clock, tmp_path: on_valkey(OnLoopValkeyStore, clock, "l")),
    StoreFactory(
        "composite",
        # Valkey coordinates; an SQLite file keeps the journals.
        lambda clock, tmp_path: CompositeStore(
            lifecycle=on_valkey(ValkeyLifecycleStore, clock, "c"),
            events=SQLiteStore(tmp_path / "events.db", clock=clock, synchronous="normal"),
        ),
    ),
    # Valkey coordinates; a real Kafka broker (one per session) keeps the journals.
    StoreFactory("composite-kafka", lambda clock, tmp_path: on_kafka(clock)),
]


#: The backends the hypothesis state machines run on: every one but ``valkey-loop``, whose
#: store semantics are the ``valkey`` entry's (the one-test-per-behaviour suite checks its
#: driver through every operation) and whose machines would add a minute to the suite.
MACHINE_FACTORIES = [factory for factory in STORE_FACTORIES if factory.id != "valkey-loop"]


@pytest.fixture(params=MACHINE_FACTORIES, ids=lambda factory: factory.id)
def store_factory(request: pytest.FixtureRequest) -> StoreFactory:
    """The backend under test, for tests that build their own stores (the state machine)."""
    factory: StoreFactory = request.param
    return factory


@pytest.fixture(params=STORE_FACTORIES, ids=lambda factory: factory.id)
def store(request: pytest.FixtureRequest, clock: ManualClock, tmp_path: Path) -> Iterator[Store]:
    """A fresh store of the backend under test, on the test's manual clock."""
    factory: StoreFactory = request.param
    backend = factory.make(clock, tmp_path)
    yield backend
    backend.close()
