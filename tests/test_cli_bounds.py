"""Bad input on the command line, through ``python -m lockgate`` as a user runs it: exit 2 and
one line on stderr, never a traceback, and nothing written. JSON options nested past what a
reader can hold or holding a lone surrogate, and a store URL's ``shard_count`` past its bound."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from lockgate.stores import SQLiteStore
from test_cli import lockgate

WORKFLOWS = textwrap.dedent(
    """
    from typing import Any

    from lockgate import Collect, workflow

    @workflow(name="bounds_take")
    async def take(ctx, **params: Any) -> int:
        return len(params)

    @workflow(name="bounds_collect", trigger=Collect(key="k", max_events=10, window_seconds=60))
    async def collect(ctx, key: str, events: list, count: int) -> int:
        return count
    """
)
STORE = "sqlite:///cli.db"
#: 100,000 nested arrays in an object: more than Python's JSON reader can recurse into.
DEEP = '{"a": ' + "[" * 100_000 + "]" * 100_000 + "}"
#: A JSON object whose string is a lone surrogate, spelled as a JSON escape.
LONE = '{"k": "a", "x": "\\ud800"}'


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / "bounds_wf.py").write_text(WORKFLOWS)
    SQLiteStore(tmp_path / "cli.db").close()
    return tmp_path


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    assert lines[0].startswith("lockgate: error: "), err
    return lines[0]


COMMANDS = {
    "submit --params": ["submit", "bounds_take", "--app", "bounds_wf", "--params"],
    "runs signal --payload": ["runs", "signal", "bounds_take", "r-1", "go", "--payload"],
    "trigger --event": ["trigger", "bounds_collect", "--app", "bounds_wf", "--event"],
}


@pytest.mark.parametrize("command", COMMANDS)
def test_json_nested_100_000_deep_from_a_file_exits_2_with_one_line(
    home: Path, command: str
) -> None:
    (home / "deep.json").write_text(DEEP)
    done = lockgate(home, *COMMANDS[command], "@deep.json", "--store", STORE)
    assert done.returncode == 2, done.stderr
    line = one_error_line(done.stderr)
    assert "@deep.json is nested too deeply" in line


@pytest.mark.parametrize("command", COMMANDS)
def test_a_lone_surrogate_in_a_json_option_exits_2_with_one_line(home: Path, command: str) -> None:
    (home / "lone.json").write_text(LONE)
    for given in ("@lone.json", LONE):
        done = lockgate(home, *COMMANDS[command], given, "--store", STORE)
        assert done.returncode == 2, done.stderr
        line = one_error_line(done.stderr)
        assert "holds a lone surrogate" in line, line
        assert "at $.x," in line, line
    store = SQLiteStore(home / "cli.db")
    try:
        assert store.list_runs("bounds_take")[0] == []
    finally:
        store.close()


def test_a_shard_count_past_its_bound_exits_2_at_once_with_one_line(home: Path) -> None:
    for count in ("99999999999", "4097", "0"):
        url = f"valkey://127.0.0.1:1/0?shard_count={count}"
        done = lockgate(home, "runs", "list", "bounds_take", "--store", url)
        assert done.returncode == 2, done.stderr
        line = one_error_line(done.stderr)
        assert "shard_count must be a whole number from 1 to 4096" in line, line


def test_runs_a_store_already_holds_with_a_lone_surrogate_are_listed_and_shown(
    home: Path,
) -> None:
    store = SQLiteStore(home / "cli.db")
    try:
        # Written straight to the store, as a version that did not refuse them would have.
        store.submit_run("bounds_take", "old-1", {"note": "x\ud800y"})
    finally:
        store.close()
    for argv in (["runs", "list", "bounds_take"], ["runs", "show", "bounds_take", "old-1"]):
        done = lockgate(home, *argv, "--store", STORE)
        assert done.returncode == 0, done.stderr
        assert "old-1" in done.stdout
        assert "Traceback" not in done.stderr
