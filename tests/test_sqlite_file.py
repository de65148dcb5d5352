"""An SQLite store and its file: a store is created only where creating one is asked for, and a
store whose file is deleted, moved or replaced under it stops instead of carrying on in a file
nobody else can see (in process, and ``lockgate worker`` in a real process)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from lockgate import (
    RunStatus,
    SQLiteStore,
    StoreFileError,
    StoreFileGone,
    StoreUnavailable,
    WorkerOptions,
    WorkflowClient,
    WorkflowContext,
    WorkflowWorker,
    open_store,
    step,
    workflow,
)
from lockgate.cli import main
from lockgate.stores.sqlite import _rows as _sqlite_rows
from test_cli import _one_error_line, _until


def _names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


# -- creating a store is explicit -----------------------------------------------------------


def test_a_missing_file_is_created_by_default_and_the_store_says_it_created_it(
    tmp_path: Path,
) -> None:
    store = SQLiteStore(tmp_path / "app.db")
    assert store.created
    store.close()
    again = SQLiteStore(tmp_path / "app.db")
    assert not again.created
    again.close()


def test_create_false_refuses_a_missing_file_saying_how_to_create_it_and_writes_nothing(
    tmp_path: Path,
) -> None:
    path = tmp_path / "app.db"
    with pytest.raises(StoreFileError, match="does not exist") as caught:
        SQLiteStore(path, create=False)
    assert f"lockgate store init --store sqlite:///{path}" in str(caught.value)
    assert "\n" not in str(caught.value)
    assert _names(tmp_path) == []


def test_create_false_refuses_an_empty_file_and_leaves_it_as_it_was(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    path.touch()
    with pytest.raises(StoreFileError, match="empty"):
        SQLiteStore(path, create=False)
    assert _names(tmp_path) == ["app.db"]
    assert path.stat().st_size == 0


def test_create_false_opens_an_existing_store(tmp_path: Path) -> None:
    SQLiteStore(tmp_path / "app.db").submit_run("wf", "r1", {})
    store = SQLiteStore(tmp_path / "app.db", create=False)
    assert not store.created
    info = store.get_run("wf", "r1")
    assert info is not None
    store.close()


def test_the_url_says_whether_to_create(tmp_path: Path) -> None:
    with pytest.raises(StoreFileError, match="does not exist"):
        open_store(f"sqlite:///{tmp_path}/app.db?create=false")
    assert _names(tmp_path) == []
    store = open_store(f"sqlite:///{tmp_path}/app.db?create=true")
    assert getattr(store, "created", None) is True
    store.close()


# -- the CLI creates a store only when asked --------------------------------------------------

COMMANDS = {
    "runs list": ["runs", "list", "wf"],
    "runs show": ["runs", "show", "wf", "r1"],
    "runs events": ["runs", "events", "wf", "r1"],
    "runs cancel": ["runs", "cancel", "wf", "r1"],
    "runs terminate": ["runs", "terminate", "wf", "r1"],
    "runs signal": ["runs", "signal", "wf", "r1", "go"],
    "submit": ["submit", "wf", "--params", "{}"],
    "trigger": ["trigger", "wf", "--event", "{}"],
    "store info": ["store", "info"],
    "store backup": ["store", "backup", "copy.db"],
}


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LOCKGATE_STORE_URL", raising=False)
    return tmp_path


@pytest.mark.parametrize("argv", list(COMMANDS.values()), ids=list(COMMANDS))
def test_a_command_on_a_missing_file_exits_2_with_how_to_create_it_and_creates_nothing(
    folder: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    assert main([*argv, "--store", "sqlite:///app.db"]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert f"lockgate store init --store sqlite:///{folder / 'app.db'}" in line
    assert _names(folder) == []


def test_a_store_named_by_the_environment_is_not_created_either(
    folder: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOCKGATE_STORE_URL", "sqlite:///app.db")
    assert main(["runs", "list", "wf"]) == 2
    assert "does not exist" in _one_error_line(capsys.readouterr().err)
    assert _names(folder) == []


def test_store_init_creates_the_store_once_then_other_commands_use_it(
    folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = ["--store", "sqlite:///app.db"]
    assert main(["store", "init", *url]) == 0
    assert "created" in capsys.readouterr().out
    assert (folder / "app.db").stat().st_size > 0
    assert main(["runs", "list", "wf", *url]) == 0
    assert "no runs of workflow 'wf'" in capsys.readouterr().err
    assert main(["store", "init", *url]) == 0
    assert "already" in capsys.readouterr().out


def test_a_url_asking_for_creation_creates_the_store_from_any_command(
    folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["runs", "list", "wf", "--store", "sqlite:///app.db?create=true"]) == 0
    assert (folder / "app.db").stat().st_size > 0


# -- the file deleted or replaced under an open store ------------------------------------------

REMOVALS = {
    "db, wal and shm": ("", "-wal", "-shm"),
    "db alone": ("",),
    "wal and shm": ("-wal", "-shm"),
}


@pytest.mark.parametrize("suffixes", list(REMOVALS.values()), ids=list(REMOVALS))
def test_a_store_whose_files_are_deleted_refuses_the_next_claim_and_every_call_after(
    tmp_path: Path, suffixes: tuple[str, ...]
) -> None:
    path = tmp_path / "app.db"
    store = SQLiteStore(path)
    store.submit_run("wf", "r1", {})
    for suffix in suffixes:
        os.unlink(f"{path}{suffix}")
    with pytest.raises(StoreFileGone) as caught:
        store.claim_next_run("wf", "w/1")
    assert not isinstance(caught.value, StoreUnavailable)
    assert caught.value.reason == "deleted"
    assert caught.value.path == f"{path}{suffixes[0]}"
    assert caught.value.path in str(caught.value)
    # From then on the store refuses everything, reads included: nothing more goes to a file
    # no other process can see.
    for call in (
        lambda: store.get_run("wf", "r1"),
        lambda: store.submit_run("wf", "r2", {}),
        lambda: store.claim_next_run("wf", "w/1"),
    ):
        with pytest.raises(StoreFileGone):
            call()
    store.close()


def test_a_store_whose_file_is_replaced_or_moved_refuses_the_next_claim(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    replaced = SQLiteStore(path)
    SQLiteStore(tmp_path / "other.db").close()
    os.replace(tmp_path / "other.db", path)
    with pytest.raises(StoreFileGone) as caught:
        replaced.claim_next_run("wf", "w/1")
    assert caught.value.reason == "replaced"
    replaced.close()

    moved = SQLiteStore(tmp_path / "moved-from.db")
    os.rename(tmp_path / "moved-from.db", tmp_path / "moved-to.db")
    with pytest.raises(StoreFileGone, match=r"moved-from\.db"):
        moved.claim_next_run("wf", "w/1")
    moved.close()


def test_other_calls_notice_within_the_check_interval(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between claims a call checks at most every FILE_CHECK_SECONDS; set to 0, each does."""
    monkeypatch.setattr(_sqlite_rows, "FILE_CHECK_SECONDS", 0.0)
    path = tmp_path / "app.db"
    writer = SQLiteStore(path)
    writer.submit_run("wf", "r1", {})
    os.unlink(f"{path}-wal")
    with pytest.raises(StoreFileGone, match="-wal"):
        writer.submit_run("wf", "r2", {})
    writer.close()

    reader = SQLiteStore(tmp_path / "read.db")
    reader.submit_run("wf", "r1", {})
    os.unlink(tmp_path / "read.db")
    with pytest.raises(StoreFileGone):
        reader.get_run("wf", "r1")
    reader.close()


def test_a_new_store_on_the_path_is_its_own_and_the_old_one_keeps_refusing(
    tmp_path: Path,
) -> None:
    path = tmp_path / "app.db"
    old = SQLiteStore(path)
    old.submit_run("wf", "r1", {})
    for suffix in ("", "-wal", "-shm"):
        os.unlink(f"{path}{suffix}")
    new = SQLiteStore(path)
    assert new.created
    assert new.get_run("wf", "r1") is None
    new.submit_run("wf", "r2", {})
    with pytest.raises(StoreFileGone):
        old.claim_next_run("wf", "w/1")
    assert new.claim_next_run("wf", "w/1") == "r2"
    old.close()
    new.close()


def test_other_processes_opening_and_closing_the_file_do_not_trip_the_check(
    tmp_path: Path,
) -> None:
    path = tmp_path / "app.db"
    store = SQLiteStore(path)
    for n in range(2):
        subprocess.run(
            [
                sys.executable,
                "-c",
                "import sys; from lockgate import SQLiteStore; "
                "s = SQLiteStore(sys.argv[1], create=False); "
                "s.submit_run('wf', sys.argv[2], {}); s.close()",
                str(path),
                f"r{n}",
            ],
            check=True,
            timeout=60,
        )
        other = SQLiteStore(path)
        other.close()
    assert store.claim_next_run("wf", "w/1") == "r0"
    store.close()


# -- a worker on a file deleted under it ------------------------------------------------------

GATES: dict[str, asyncio.Event] = {}
STEP_RUNS = {"n": 0}


@step
async def gone_slow_step() -> int:
    STEP_RUNS["n"] += 1
    GATES["started"].set()
    await GATES["release"].wait()
    return 1


@workflow(name="gone_inflight")
async def gone_inflight(ctx: WorkflowContext) -> int:
    return await gone_slow_step()


async def test_a_worker_stops_with_one_error_and_drops_the_attempt_in_flight_quietly(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every call checks, so the attempt's next write is the one that meets the file gone
    # (with the default interval it could land in the window, in the lost file).
    monkeypatch.setattr(_sqlite_rows, "FILE_CHECK_SECONDS", 0.0)
    GATES.update(started=asyncio.Event(), release=asyncio.Event())
    STEP_RUNS["n"] = 0
    path = tmp_path / "app.db"
    store = SQLiteStore(path)
    await WorkflowClient(store).submit("gone_inflight")
    worker = WorkflowWorker(
        workflows=[gone_inflight],
        store=store,
        options=WorkerOptions(claim_poll_interval=0.02, shutdown_grace=5.0),
    )
    caplog.set_level(logging.INFO, logger="lockgate")
    serving = asyncio.create_task(worker.run())
    await asyncio.wait_for(GATES["started"].wait(), 20)
    for suffix in ("", "-wal", "-shm"):
        os.unlink(f"{path}{suffix}")
    GATES["release"].set()
    with pytest.raises(StoreFileGone):
        await asyncio.wait_for(serving, 20)
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1, [r.getMessage() for r in errors]
    assert str(path) in errors[0].getMessage()
    assert errors[0].exc_info is None
    assert any("attempt dropped" in r.getMessage() for r in caplog.records)
    assert not [r for r in caplog.records if r.levelno == logging.WARNING]
    assert STEP_RUNS["n"] == 1
    store.close()


# -- `lockgate worker` on a file deleted under it ----------------------------------------------

WORKFLOWS = textwrap.dedent(
    """
    from lockgate import workflow

    @workflow(name="gone_echo")
    async def echo(ctx, n: int) -> int:
        return n
    """
)
ENV = {k: v for k, v in os.environ.items() if k not in ("LOCKGATE_STORE_URL", "LOCKGATE_DEBUG")}


def _status(path: Path, run_id: str) -> RunStatus | None:
    store = SQLiteStore(path, create=False)
    try:
        info = store.get_run("gone_echo", run_id)
        return info.status if info is not None else None
    finally:
        store.close()


@pytest.mark.parametrize(
    "suffixes", [REMOVALS["db, wal and shm"], REMOVALS["wal and shm"]], ids=["db", "wal"]
)
def test_lockgate_worker_logs_one_error_and_exits_1_when_its_file_is_deleted(
    tmp_path: Path, suffixes: tuple[str, ...]
) -> None:
    (tmp_path / "gone_wf.py").write_text(WORKFLOWS)
    path, log = tmp_path / "app.db", tmp_path / "worker.log"
    argv = ["worker", "gone_wf", "--store", "sqlite:///app.db", "--poll-interval", "0.05"]
    with open(log, "wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "lockgate", *argv],
            cwd=tmp_path,
            env=ENV,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    try:
        _until("the worker's start-up line", lambda: " serving " in log.read_text())
        assert "created" in log.read_text().splitlines()[0], log.read_text()
        store = SQLiteStore(path, create=False)
        store.submit_run("gone_echo", "r1", {"n": 1})
        store.close()
        _until("the run to complete", lambda: _status(path, "r1") == RunStatus.COMPLETE)
        for suffix in suffixes:
            os.unlink(f"{path}{suffix}")
        code = process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    text = log.read_text()
    assert code == 1, text
    errors = [line for line in text.splitlines() if " ERROR " in line]
    assert len(errors) == 1, text
    assert f"{path}{suffixes[0]}" in errors[0]
    assert "Traceback" not in text
    assert text.splitlines()[-1].startswith("lockgate: error: "), text
    if "" in suffixes:
        # And the next CLI call refuses, rather than making an empty store where workers
        # are expected.
        argv = [
            "submit",
            "gone_echo",
            "--params",
            json.dumps({"n": 2}),
            "--store",
            "sqlite:///app.db",
        ]
        submitted = subprocess.run(
            [sys.executable, "-m", "lockgate", *argv],
            cwd=tmp_path,
            env=ENV,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert submitted.returncode == 2, submitted.stderr
        assert "lockgate store init" in _one_error_line(submitted.stderr)
        assert not path.exists()
