"""Retrying a run that ended without completing (``client.retry``, ``lockgate runs retry``): a
new run with the same params and metadata, named after the first run, one per retry however
often it is asked for."""

from __future__ import annotations

from typing import Any

import pytest

from lockgate import (
    InlineWorkflowRunner,
    RunNotFoundError,
    RunNotRetriable,
    RunStatus,
    WorkflowContext,
    workflow,
)
from lockgate.journal import EventKind
from lockgate.stores import MemoryStore

FAILURES: dict[str, int] = {}


@workflow(name="retried_flaky")
async def flaky(ctx: WorkflowContext, item: str) -> str:
    """Fails while FAILURES says so for ``item``."""
    if FAILURES.get(item, 0) > 0:
        FAILURES[item] -= 1
        raise ValueError(f"{item} is not ready")
    return f"done {item} ({ctx.metadata.get('tag')})"


async def ended(runner: InlineWorkflowRunner, item: str, failures: int) -> str:
    FAILURES[item] = failures
    handle = await runner.client.submit("retried_flaky", {"item": item}, metadata={"tag": "t1"})
    await runner.run(handle.name, handle.run_id)
    return handle.run_id


async def test_a_failed_run_retried_runs_again_with_its_params_and_metadata(
    runner: InlineWorkflowRunner, store: MemoryStore
) -> None:
    first = await ended(runner, "a", failures=2)
    assert await runner.client.status("retried_flaky", first) == RunStatus.ERROR
    retry = await runner.client.retry("retried_flaky", first)
    assert retry.run_id == f"{first}.retry1"
    await runner.run(retry.name, retry.run_id)
    assert await retry.status() == RunStatus.ERROR  # failed once more
    again = await runner.client.retry("retried_flaky", retry.run_id)
    assert again.run_id == f"{first}.retry2"  # numbered from the first run, not the retry
    await runner.run(again.name, again.run_id)
    assert await again.result(timeout=5) == "done a (t1)"
    [init] = [
        e for e in store.load_run("retried_flaky", again.run_id) if e.kind == EventKind.RUN_INIT
    ]
    assert init.payload["params"] == {"item": "a"}
    assert init.payload["provenance"]["source"] == {
        "retry_of": retry.run_id,
        "retry_root": first,
        "retry_number": 2,
    }
    # The failed runs stay as they ended.
    assert await runner.client.status("retried_flaky", first) == RunStatus.ERROR


async def test_one_retry_however_often_it_is_asked_for(runner: InlineWorkflowRunner) -> None:
    first = await ended(runner, "b", failures=1)
    made = [(await runner.client.retry("retried_flaky", first)).run_id for _ in range(3)]
    assert made == [f"{first}.retry1"] * 3


async def test_cancelled_and_terminated_runs_are_retried_too(
    runner: InlineWorkflowRunner,
) -> None:
    handle = await runner.client.submit("retried_flaky", {"item": "c"})
    await runner.client.terminate("retried_flaky", handle.run_id, reason="test")
    retry = await runner.client.retry("retried_flaky", handle.run_id)
    await runner.run(retry.name, retry.run_id)
    assert await retry.result(timeout=5) == "done c (None)"


@pytest.mark.parametrize("failures", [0, None], ids=["completed", "not ended"])
async def test_a_completed_or_unfinished_run_is_not_retried(
    runner: InlineWorkflowRunner, failures: Any
) -> None:
    if failures is None:
        handle = await runner.client.submit("retried_flaky", {"item": "d"})
        run_id, match = handle.run_id, "has not ended"
    else:
        run_id, match = await ended(runner, "e", failures), "completed"
    with pytest.raises(RunNotRetriable, match=match):
        await runner.client.retry("retried_flaky", run_id)


async def test_retrying_no_such_run_says_so(runner: InlineWorkflowRunner) -> None:
    with pytest.raises(RunNotFoundError):
        await runner.client.retry("retried_flaky", "nope")
