"""Shared fixtures: a manual clock, a MemoryStore on it, and an inline runner driving runs."""

from __future__ import annotations

import os
import sys
from pathlib import Path

# tools/ holds the scripts that start the services the suite talks to (the Kafka broker).
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest
import pytest_asyncio

from lockgate import (
    InlineWorkflowRunner,
    ManualClock,
    MemoryStore,
    RunHandle,
    RunStatus,
    WorkflowClient,
)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def store(clock: ManualClock) -> MemoryStore:
    return MemoryStore(clock=clock, lock_ttl=30.0, heartbeat_interval=10.0)


@pytest.fixture
async def runner(store: MemoryStore, clock: ManualClock) -> AsyncIterator[InlineWorkflowRunner]:
    inline = InlineWorkflowRunner(store=store, clock=clock)
    await inline.start()
    yield inline
    await inline.aclose()


@pytest.fixture
def client(runner: InlineWorkflowRunner) -> WorkflowClient:
    return runner.client


Drive = Callable[..., Awaitable[RunStatus]]


@pytest.fixture
def drive(runner: InlineWorkflowRunner, clock: ManualClock) -> Drive:
    """Advance a run until it ends or waits on something only the test can give it.

    Queued runs are run; a sleep or a signal deadline is reached by moving the manual clock
    and firing the timers. Returns the status it stopped at (terminal, or signal_waiting with
    no deadline, or paused)."""

    async def run_to_rest(handle: RunHandle, *, max_attempts: int = 50) -> RunStatus:
        for _ in range(max_attempts):
            info = runner.store.get_run(handle.name, handle.run_id)
            assert info is not None
            if info.status.is_terminal:
                return info.status
            if info.status == RunStatus.PENDING:
                await runner.run(handle.name, handle.run_id)
                continue
            if (
                info.wait is not None
                and info.wait.due_at is not None
                and info.status
                in (
                    RunStatus.SLEEPING,
                    RunStatus.SIGNAL_WAITING,
                )
            ):
                clock.advance(max(0.0, info.wait.due_at - clock()))
                await runner.fire_due_timers()
                continue
            return info.status
        raise AssertionError(f"run {handle.run_id} did not come to rest")

    return run_to_rest


@pytest.fixture(scope="session")
def kafka_bootstrap() -> str:
    """The bootstrap address of a real Kafka broker: ``LOCKGATE_TEST_KAFKA_BOOTSTRAP``, or one
    broker the suite starts once for the whole session (``tools/kafka_broker.py``), on first
    use. A machine that cannot start one (no Java or Maven) fails the Kafka tests, saying
    what to install or to point the suite at a cluster: a skip would hide them."""
    import kafka_broker

    missing = kafka_broker.missing_tools()
    if missing and not os.environ.get(kafka_broker.BOOTSTRAP_ENV):
        pytest.fail(
            f"no Kafka broker can be started here: {missing}; install Java 17 and Maven, "
            f"or set {kafka_broker.BOOTSTRAP_ENV} to a cluster's bootstrap address"
        )
    return kafka_broker.shared_bootstrap()


@pytest.fixture(scope="session")
def restartable_broker() -> Iterator[Any]:
    """A broker of the tests that kill it (the shared one is never stopped), started once for
    the session on first use; a test that stops it starts it again before it ends. Those tests
    also keep clear of the load other tests put on the shared broker."""
    import kafka_broker

    missing = kafka_broker.missing_tools()
    if missing:  # these tests kill the broker: they need one of their own, not a cluster's
        pytest.fail(f"no Kafka broker can be started here: {missing}; install Java 17 and Maven")
    broker = kafka_broker.KafkaBroker().start()
    yield broker
    broker.close()


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def browser() -> AsyncIterator[Any]:
    """One headless Chromium under Playwright for the whole session (``browser_support.py``),
    on the session's event loop: tests using it run with ``loop_scope="session"``. A machine
    without Chromium or Playwright fails them, saying what to install."""
    from browser_support import chromium

    async with chromium() as launched:
        yield launched
