"""What ``lockgate`` imports to start: ``--version`` and ``--help`` nothing of lockgate beyond
the command line's entry (nor argparse), ``runs list`` only the store its URL names. Each
command line runs in a fresh interpreter, which reports the modules it ended with
(``sys.modules``), and each has a budget of modules beyond those of ``python -c pass``: what it
imports today, so that an import added to its path fails here. No timing is asserted:
``bench/cli_start.py`` measures it (docs/performance.md)."""

from __future__ import annotations

import argparse
import ast
import asyncio
import importlib
import json
import os
import pkgutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import lockgate
from lockgate import SQLiteStore, ValkeyStore, WorkflowClient, WorkflowContext, workflow
from lockgate.cli import _exits, _main, _runs
from lockgate.stores import Store
from lockgate.workflow._interrupt import InterruptAction
from valkey_server import ValkeyServer

#: What no command reading runs needs: the Kafka client and Avro, the HTTP stack and the
#: console's templates, metrics.
HEAVY = (
    "confluent_kafka",
    "fastavro",
    "fastapi",
    "starlette",
    "uvicorn",
    "jinja2",
    "prometheus_client",
)
#: Besides those, what neither --version nor --help needs.
NOT_FOR_HELP = (*HEAVY, "redis", "pydantic", "asyncio", "sqlite3", "typing")
#: All of lockgate that --version imports (not even argparse), and --help.
ENTRY = {"lockgate", "lockgate._lazy", "lockgate.cli", "lockgate.cli._main"}
HELP_ENTRY = {*ENTRY, "lockgate.cli._help"}
#: What a command reading runs on SQLite does without: logging (set up by nobody there),
#: hashlib (it loads OpenSSL), getpass (termios), signal (enum).
NOT_FOR_SQLITE_READS = ("logging", "hashlib", "getpass", "signal")
#: The most modules each command line may import beyond ``python -c pass``'s, and the most of
#: lockgate's own: what they import now (Python 3.11). On Valkey, what redis-py imports to load
#: and to open one connection (``REDIS_CONNECTS``) is not counted, so that another redis-py does
#: not move the budget (redis-py 8 imports importlib.metadata, hmac and idna as it connects).
BUDGETS = {
    "--version": (11, 4),
    "--help": (13, 5),
    "runs list (SQLite)": (86, 40),
    "runs list (Valkey)": (55, 50),
}

# Runs `lockgate ARGV` as the console script does (`from lockgate.cli import run`), then
# writes the names in sys.modules to the file named by the first argument.
PROGRAM = """
import atexit, json, sys
out = sys.argv[1]
sys.argv = ["lockgate", *sys.argv[2:]]
atexit.register(lambda: open(out, "w").write(json.dumps(sorted(sys.modules))))
from lockgate.cli import run
run()
"""

NAME = "cli_imports_listed"

#: redis-py loaded and one connection tried, to a loopback port nothing listens on.
REDIS_CONNECTS = """
import redis
try:
    redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=1).ping()
except redis.ConnectionError:
    pass
"""


@workflow(name=NAME)
async def cli_imports_listed(ctx: WorkflowContext, n: int) -> int:
    return n


def imported(tmp_path: Path, *argv: str) -> set[str]:
    """The modules ``lockgate ARGV`` ended with, after checking that it succeeded."""
    out = tmp_path / "modules.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOCKGATE_")}
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM, str(out), *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    modules: list[str] = json.loads(out.read_text())
    return set(modules)


def bare_modules(code: str = "pass") -> set[str]:
    """The modules ``python -c CODE`` ends with, found the same way."""
    done = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport json, sys; print(json.dumps(sorted(sys.modules)))"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return set(json.loads(done.stdout))


def within_budget(modules: set[str], command: str, beside: str = "pass") -> None:
    """``modules`` within ``command``'s budget, counting those neither ``python -c pass`` nor
    ``python -c BESIDE`` imports."""
    beyond = modules - bare_modules() - bare_modules(beside)
    own = {m for m in modules if m.split(".")[0] == "lockgate"}
    most, most_own = BUDGETS[command]
    assert len(beyond) <= most, (command, len(beyond), sorted(beyond))
    assert len(own) <= most_own, (command, len(own), sorted(own))


def loaded(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return [name for name in names if name in modules]


async def _submit(store: Store, count: int) -> None:
    client = WorkflowClient(store)
    for n in range(count):
        await client.submit(NAME, {"n": n})


@pytest.mark.parametrize(("flag", "entry"), [("--version", ENTRY), ("--help", HELP_ENTRY)])
def test_version_and_help_import_only_the_entry(tmp_path: Path, flag: str, entry: set[str]) -> None:
    modules = imported(tmp_path, flag)
    assert loaded(modules, NOT_FOR_HELP) == []
    assert {m for m in modules if m.split(".")[0] == "lockgate"} == entry
    assert "argparse" not in modules
    within_budget(modules, flag)


def test_runs_list_on_sqlite_imports_the_sqlite_store_alone(tmp_path: Path) -> None:
    store = SQLiteStore(str(tmp_path / "runs.db"), create=True)
    asyncio.run(_submit(store, 3))
    store.close()
    modules = imported(tmp_path, "runs", "list", NAME, "--store", f"sqlite:///{tmp_path}/runs.db")
    assert "lockgate.stores.sqlite._store" in modules  # it did read the store
    assert loaded(modules, (*HEAVY, "redis", "pydantic", "asyncio")) == []
    assert [
        m for m in modules if m.startswith(("lockgate.stores.valkey", "lockgate.stores.kafka"))
    ] == []
    assert [m for m in modules if m.startswith(("lockgate.worker.", "lockgate.streams"))] == []
    assert loaded(modules, NOT_FOR_SQLITE_READS) == []
    within_budget(modules, "runs list (SQLite)")


@pytest.fixture(scope="module")
def valkey() -> Iterator[str]:
    server = ValkeyServer().start()
    try:
        yield server.url
    finally:
        server.close()


def test_runs_list_on_valkey_imports_redis_but_no_kafka_nor_http(
    tmp_path: Path, valkey: str
) -> None:
    store = ValkeyStore(valkey, namespace="cli-imports")
    asyncio.run(_submit(store, 3))
    store.close()
    modules = imported(tmp_path, "runs", "list", NAME, "--store", f"{valkey}?namespace=cli-imports")
    assert "redis" in modules
    assert loaded(modules, (*HEAVY, "pydantic")) == []
    assert [m for m in modules if m.startswith("lockgate.stores.kafka")] == []
    within_budget(modules, "runs list (Valkey)", beside=REDIS_CONNECTS)


def test_every_command_has_its_line_in_the_table() -> None:
    """``lockgate --help`` lists :data:`COMMANDS` without importing the commands' modules: each
    module adds exactly the commands the table gives it, with the same help line."""
    modules = {module for module, _ in _main.COMMANDS.values()}
    for module in modules:
        group = argparse.ArgumentParser().add_subparsers()
        importlib.import_module(f"lockgate.cli.{module}").add_parsers(group, [])
        added = {action.dest: action.help for action in group._choices_actions}
        assert added == {
            name: line for name, (home, line) in _main.COMMANDS.items() if home == module
        }


def test_what_the_parsers_copy_agrees_with_its_source() -> None:
    assert tuple(action.value for action in InterruptAction) == _runs.INTERRUPT_ACTIONS
    assert _main.INTERRUPTED == _exits.INTERRUPTED


def test_every_package_resolves_every_name_it_exports() -> None:
    """Each package's names are imported on first use: every one in ``__all__`` resolves, and
    ``lockgate.workflow`` stays the decorator once the subpackage of that name is imported."""
    for info in pkgutil.walk_packages(lockgate.__path__, "lockgate."):
        if not info.ispkg or info.name.split(".")[1] in ("http", "console"):
            continue  # those two import their extra on purpose, and test_public_surface checks them
        package = importlib.import_module(info.name)
        for name in getattr(package, "__all__", ()):
            assert getattr(package, name) is not None, f"{info.name}.{name}"
    importlib.import_module("lockgate.workflow._spec")
    assert lockgate.workflow is workflow
    from lockgate import workflow as again

    assert again is workflow


@pytest.mark.parametrize("argv", [["--help"], ["--help", "runs"], ["-h", "runs", "list"]])
def test_help_before_a_command_lists_every_command(
    capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    assert _main.main(argv) == 0
    listed = capsys.readouterr().out
    for name, (_, line) in _main.COMMANDS.items():
        assert f"    {name} " in listed, name
        assert line.split()[0] in listed


def test_help_without_argparse_is_the_page_argparse_prints(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``lockgate --help`` writes its page itself (``cli/_help``): at every width it lays it
    out, the page is byte for byte the one the parser formats; narrower, argparse does it."""
    from lockgate.cli._help import top_help
    from lockgate.cli._parser import build_parser

    laid_out = 0
    for columns in range(1, 201):
        page = top_help(columns - 2)
        monkeypatch.setenv("COLUMNS", str(columns))  # what the parser's formatter reads
        expected = build_parser().format_help()
        if page is None:
            assert columns < 50 or sys.version_info >= (3, 14), columns
            continue
        laid_out += 1
        assert page == expected, columns
    assert laid_out > 0 or sys.version_info >= (3, 14)


def test_help_with_its_page_printed_by_argparse_is_the_same(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A terminal too narrow for the page's own layout gets argparse's, through ``main``."""
    for columns in ("30", "100"):
        monkeypatch.setenv("COLUMNS", columns)
        assert _main.main(["--help"]) == 0
        ours = capsys.readouterr().out
        assert _main.main(["--he"]) == 0  # an abbreviation: always argparse's
        assert capsys.readouterr().out == ours


@pytest.mark.parametrize(
    "argv",
    [["bound", "status", "--help"], ["topics", "list", "--help"], ["dev", "--help"]],
)
def test_the_parsers_of_a_command_group_import_nothing_its_handlers_need(
    tmp_path: Path, argv: list[str]
) -> None:
    """Building a command's parsers (what any command line naming it does first) imports
    neither the Kafka client, redis nor asyncio, nor the stores, worker or streams: the
    handler that runs imports what it needs."""
    modules = imported(tmp_path, *argv)
    assert f"lockgate.cli._{argv[0]}" in modules  # its parsers were built
    assert loaded(modules, (*HEAVY, "redis", "pydantic", "asyncio", "sqlite3")) == []
    handlers_own = ("lockgate.cli._commands", "lockgate.worker", "lockgate.streams", "lockgate.dev")
    assert [m for m in modules if m.startswith(handlers_own)] == []
    # Of the stores, only the URL's parsing (its default environment variables).
    assert {m for m in modules if m.startswith("lockgate.stores")} <= {
        "lockgate.stores",
        "lockgate.stores._urls",
    }


def test_the_cli_imports_no_private_name_of_another_package() -> None:
    """A name with a leading underscore is its package's own: the CLI uses what the other
    packages make public (``stores.opener._open.is_valkey_url``, not its scheme set). Private
    modules (``lockgate.stores.opener._open``) are fine; private names inside them are not."""
    src = Path(lockgate.__file__).parent
    found = []
    for path in sorted((src / "cli").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom) or node.level or not node.module:
                continue
            parts = node.module.split(".")
            if parts[0] != "lockgate" or parts[1:2] == ["cli"]:
                continue
            for alias in node.names:
                name = src.joinpath(*parts[1:], alias.name)
                private = alias.name.startswith("_") and not alias.name.startswith("__")
                if private and not (name.with_suffix(".py").exists() or name.is_dir()):
                    found.append(f"{path.name}: {node.module}.{alias.name}")
    assert found == []
