"""What submit checks before it queues anything: params by name (the workflow not imported)
against the payload cap its workers recorded, and params of an imported workflow against the
body's annotations. Through the client and through ``lockgate submit``."""

from __future__ import annotations

import json
import os
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from pydantic import BaseModel

from lockgate import (
    Collect,
    ConfigurationError,
    InvalidParamsError,
    ManualClock,
    MemoryStore,
    PayloadTooLarge,
    SQLiteStore,
    WorkflowClient,
    WorkflowContext,
    WorkflowSpec,
    workflow,
)
from lockgate.cli import main
from lockgate.worker._registration import policy_record
from test_cli import _one_error_line

if TYPE_CHECKING:
    from decimal import Decimal as OnlyForTypeCheckers

TEN_MB = {"blob": "x" * 10_000_000}


def _record(store: Any, name: str, **declared: Any) -> None:
    """What a worker serving ``name``, declared with ``declared``, records when it starts."""
    spec = WorkflowSpec(name=name, version="v1", **declared)
    store.record_workflow_policy(name, policy_record(spec))


def _nothing_queued(store: Any, name: str) -> None:
    assert store.get_pending_count(name) == 0
    assert store.list_runs(name) == ([], None)


@pytest.fixture
def memory(clock: ManualClock) -> MemoryStore:
    return MemoryStore(clock=clock)


@pytest.fixture
def by_name(memory: MemoryStore, clock: ManualClock) -> WorkflowClient:
    """A client in a process that imports none of the workflows it submits."""
    return WorkflowClient(memory, clock=clock)


# -- params by name, against the recorded cap --------------------------------------------------


async def test_ten_megabytes_of_params_by_name_are_refused_against_the_recorded_cap(
    memory: MemoryStore, by_name: WorkflowClient
) -> None:
    _record(memory, "bn_default")
    with pytest.raises(PayloadTooLarge, match="max_event_payload_bytes=1000000") as caught:
        await by_name.submit("bn_default", TEN_MB)
    assert caught.value.limit == 1_000_000
    assert caught.value.size > 10_000_000
    _nothing_queued(memory, "bn_default")


async def test_a_small_recorded_cap_refuses_params_the_default_would_take(
    memory: MemoryStore, by_name: WorkflowClient
) -> None:
    _record(memory, "bn_small", max_event_payload_bytes=1_000)
    with pytest.raises(PayloadTooLarge, match="max_event_payload_bytes=1000"):
        await by_name.submit("bn_small", {"blob": "x" * 2_000})
    _nothing_queued(memory, "bn_small")
    handle = await by_name.submit("bn_small", {"blob": "x" * 100})
    assert memory.get_run("bn_small", handle.run_id) is not None


async def test_a_large_or_no_recorded_cap_takes_what_the_workers_take(
    memory: MemoryStore, by_name: WorkflowClient
) -> None:
    _record(memory, "bn_large", max_event_payload_bytes=20_000_000)
    _record(memory, "bn_uncapped", max_event_payload_bytes=None)
    for name in ("bn_large", "bn_uncapped"):
        handle = await by_name.submit(name, TEN_MB)
        assert memory.load_run(name, handle.run_id)[0].payload["params"] == TEN_MB


async def test_params_by_name_with_no_record_are_held_to_the_default_cap(
    memory: MemoryStore, by_name: WorkflowClient
) -> None:
    with pytest.raises(PayloadTooLarge, match="max_event_payload_bytes=1000000"):
        await by_name.submit("bn_unrecorded", TEN_MB)
    _nothing_queued(memory, "bn_unrecorded")
    # A record from a lockgate that did not record the cap: the default cap too.
    memory.record_workflow_policy("bn_old_record", {"version": "v1"})
    with pytest.raises(PayloadTooLarge):
        await by_name.submit("bn_old_record", TEN_MB)


async def test_an_unreadable_recorded_cap_is_refused_by_name(
    memory: MemoryStore, by_name: WorkflowClient
) -> None:
    memory.record_workflow_policy("bn_bad", {"version": "v1", "max_event_payload_bytes": "lots"})
    with pytest.raises(ConfigurationError, match="unreadable payload cap"):
        await by_name.submit("bn_bad", {})
    _nothing_queued(memory, "bn_bad")


async def test_signals_and_updates_by_name_take_the_recorded_cap_too(
    memory: MemoryStore, by_name: WorkflowClient
) -> None:
    _record(memory, "bn_sig_small", max_event_payload_bytes=1_000)
    _record(memory, "bn_sig_large", max_event_payload_bytes=5_000_000)
    memory.submit_run("bn_sig_small", "r1", {})
    memory.submit_run("bn_sig_large", "r1", {})
    with pytest.raises(PayloadTooLarge, match="signal 'go'"):
        await by_name.signal("bn_sig_small", "r1", "go", {"blob": "x" * 2_000})
    with pytest.raises(PayloadTooLarge, match="update 'set'"):
        await by_name.update("bn_sig_small", "r1", "set", {"blob": "x" * 2_000}, timeout=0)
    two_mb = {"blob": "x" * 2_000_000}
    assert await by_name.signal("bn_sig_large", "r1", "go", two_mb) == "buffered"


async def test_trigger_events_by_name_take_the_recorded_cap(
    memory: MemoryStore, by_name: WorkflowClient
) -> None:
    _record(memory, "bn_digest", max_event_payload_bytes=1_000, trigger=Collect("user", 2, 60))
    with pytest.raises(PayloadTooLarge, match="trigger event of 'bn_digest'"):
        await by_name.trigger("bn_digest", {"user": "u1", "blob": "x" * 2_000})
    assert await by_name.trigger("bn_digest", {"user": "u1"}) is None  # buffered


# -- params of an imported workflow, against the body's annotations ----------------------------


class Order(BaseModel):
    sku: str
    qty: int


@dataclass
class Window:
    start: int
    end: int


@workflow(name="typed_params")
async def typed_params(
    ctx: WorkflowContext,
    n: int,
    who: str = "anyone",
    *,
    limit: int = None,  # noqa: RUF013  # a default is the body's own, not checked
    ratio: float = 1.0,
    when: datetime | None = None,
    tags: list[str] | None = None,
    order: Order | None = None,
    window: Window | None = None,
    loose=None,
    anything: Any = None,
) -> int:
    return n


@workflow(name="typed_extras")
async def typed_extras(ctx: WorkflowContext, **counts: int) -> int:
    return sum(counts.values())


@pytest.mark.parametrize(
    ("params", "parameter", "match"),
    [
        ({"n": "x"}, "n", "parameter 'n' must be int"),
        ({"n": "5"}, "n", "parameter 'n' must be int"),
        ({"n": 5.0}, "n", "parameter 'n' must be int"),
        ({"n": True}, "n", "parameter 'n' must be int"),
        ({"n": None}, "n", "parameter 'n' must be int"),
        ({"n": 1, "who": 7}, "who", "parameter 'who' must be str"),
        ({"n": 1, "ratio": "1.5"}, "ratio", "parameter 'ratio'"),
        ({"n": 1, "when": "soon"}, "when", "parameter 'when'"),
        ({"n": 1, "tags": ["a", 2]}, "tags", "parameter 'tags' at 1 must be"),
        ({"n": 1, "order": {"sku": "a", "qty": "2"}}, "order", "parameter 'order' at qty"),
        ({"n": 1, "order": {"sku": "a"}}, "order", "Field required"),
        ({"n": 1, "window": {"start": 1}}, "window", "parameter 'window'"),
    ],
)
async def test_a_value_the_annotation_does_not_allow_is_refused_at_submit_naming_it(
    memory: MemoryStore,
    by_name: WorkflowClient,
    params: dict[str, Any],
    parameter: str,
    match: str,
) -> None:
    with pytest.raises(InvalidParamsError, match=match) as caught:
        await by_name.submit("typed_params", params)
    assert caught.value.parameter == parameter
    assert caught.value.workflow == "typed_params"
    assert "\n" not in str(caught.value)
    _nothing_queued(memory, "typed_params")


async def test_values_that_fit_are_stored_as_given_not_converted(
    memory: MemoryStore, by_name: WorkflowClient
) -> None:
    params = {
        "n": 3,
        "ratio": 2,  # an int is a float
        "when": "2026-01-02T03:04:05+00:00",
        "tags": ["a"],
        "order": {"sku": "a", "qty": 2},
        "window": {"start": 1, "end": 2},
        "loose": {"any": ["json", 1]},
        "anything": [None, "x"],
    }
    handle = await by_name.submit("typed_params", params)
    assert memory.load_run("typed_params", handle.run_id)[0].payload["params"] == params
    # Defaults are not checked: `limit` defaults to None, which is not an int.
    await by_name.submit("typed_params", {"n": 1})


async def test_an_annotated_var_keyword_checks_each_extra_value(
    memory: MemoryStore, by_name: WorkflowClient
) -> None:
    await by_name.submit("typed_extras", {"a": 1, "b": 2})
    with pytest.raises(InvalidParamsError, match="parameter 'b' must be int") as caught:
        await by_name.submit("typed_extras", {"a": 1, "b": "two"})
    assert caught.value.parameter == "b"


@workflow(name="typed_partly_unresolved")
async def typed_partly_unresolved(
    ctx: WorkflowContext, n: int, hint: OnlyForTypeCheckers | None = None
) -> int:
    return n


async def test_an_annotation_that_does_not_resolve_leaves_only_that_parameter_unchecked(
    memory: MemoryStore, by_name: WorkflowClient
) -> None:
    with pytest.raises(InvalidParamsError, match="parameter 'n' must be int"):
        await by_name.submit("typed_partly_unresolved", {"n": "x"})
    await by_name.submit("typed_partly_unresolved", {"n": 1, "hint": ["not", "checked"]})


# -- lockgate submit ---------------------------------------------------------------------------

APP = textwrap.dedent(
    """
    from lockgate import workflow

    @workflow(name="cli_typed")
    async def typed(ctx, n: int) -> int:
        return n
    """
)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LOCKGATE_STORE_URL", raising=False)
    monkeypatch.setattr(sys, "path", list(sys.path))
    module = f"typed_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{module}.py").write_text(APP)
    monkeypatch.setenv("SUBMIT_CHECKS_MODULE", module)
    yield tmp_path
    sys.modules.pop(module, None)


def test_lockgate_submit_refuses_ten_megabytes_by_name_with_exit_2(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = SQLiteStore(home / "app.db")
    _record(store, "cli_by_name")
    store.close()
    argv = ["submit", "cli_by_name", "--params", json.dumps(TEN_MB), "--store", "sqlite:///app.db"]
    assert main(argv) == 2
    assert "over max_event_payload_bytes=1000000" in _one_error_line(capsys.readouterr().err)
    store = SQLiteStore(home / "app.db")
    _nothing_queued(store, "cli_by_name")
    store.close()


def test_lockgate_submit_refuses_a_value_off_the_annotation_with_exit_2(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    SQLiteStore(home / "app.db").close()
    module = os.environ["SUBMIT_CHECKS_MODULE"]
    argv = ["submit", "cli_typed", "--app", module, "--store", "sqlite:///app.db"]
    assert main([*argv, "--params", '{"n": "x"}']) == 2
    assert "parameter 'n' must be int" in _one_error_line(capsys.readouterr().err)
    store = SQLiteStore(home / "app.db")
    _nothing_queued(store, "cli_typed")
    store.close()
    assert main([*argv, "--params", '{"n": 4}']) == 0
    assert len(capsys.readouterr().out.strip()) == 32
