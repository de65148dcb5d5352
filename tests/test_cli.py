"""The ``lockgate`` command line: parsing and exit codes in process, then the real thing in
subprocesses, with a worker process serving a small workflows module on an SQLite file."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lockgate import RunStatus
from lockgate.cli import main
from lockgate.demo._board import Board
from lockgate.demo._demo import crash_lessons
from lockgate.stores import SQLiteStore, ValkeyStore
from valkey_server import shared_url

WORKFLOWS = textwrap.dedent(
    """
    from lockgate import step, workflow

    @step
    async def add(a: int, b: int) -> int:
        return a + b

    @workflow(name="cli_adder")
    async def adder(ctx, a: int, b: int) -> int:
        return await add(a, b)

    @workflow(name="cli_waiter")
    async def waiter(ctx, who: str) -> dict:
        got = await ctx.wait_for_signal("go")
        return {"who": who, "got": got}

    @workflow(name="cli_failer")
    async def failer(ctx) -> None:
        raise RuntimeError("boom")

    NOT_A_WORKFLOW = 3
    """
)


def _one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    assert lines[0].startswith("lockgate: error: ")
    return lines[0]


# -- in process: parsing, configuration and exit codes ---------------------------------------


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A working directory holding a workflows module with a name of its own, so imports made
    by one test never leak a stale module into another."""
    yield from enter_home(tmp_path, monkeypatch)


def enter_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """What the ``home`` fixture does, for other modules' fixtures."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LOCKGATE_STORE_URL", raising=False)
    monkeypatch.setattr(sys, "path", list(sys.path))
    module = f"wf_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{module}.py").write_text(WORKFLOWS.replace("cli_", f"{module}_"))
    (tmp_path / "broken_mod.py").write_text("import no_such_module_here\n")
    monkeypatch.setenv("CLI_TEST_MODULE", module)
    # The store the commands name exists, as a worker or `lockgate store init` would have left
    # it: commands other than those refuse a missing one (tests/test_sqlite_file.py).
    SQLiteStore(tmp_path / "cli.db").close()
    yield tmp_path
    for name in (module, "broken_mod"):
        sys.modules.pop(name, None)


def _module() -> str:
    return os.environ["CLI_TEST_MODULE"]


STORE = "sqlite:///cli.db"


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["runs", "list", "x", "--store", "mongodb://localhost"], "unknown store URL scheme"),
        (["runs", "list", "x", "--store", "memory://"], "inside one process"),
        (["runs", "list", "x", "--store", "sqlite:///no/such/dir/x.db"], "does not exist"),
        (["runs", "list", "x", "--store", "sqlite:///x.db?namespace=a"], "no option 'namespace'"),
        (["runs", "list", "x"], "LOCKGATE_STORE_URL"),
        (["submit", "x", "--params", "{oops", "--store", STORE], "--params is not valid JSON"),
        (["submit", "x", "--params", "[1, 2]", "--store", STORE], "must be a JSON object"),
        (["submit", "nobody", "--store", STORE], "unknown workflow nobody: no worker"),
        (["runs", "show", "x", "r1", "--store", STORE], "no run 'r1'"),
        (["runs", "cancel", "x", "r1", "--store", STORE], "no run 'r1'"),
        (["runs", "terminate", "x", "r1", "--store", STORE], "no run 'r1'"),
        (["runs", "events", "x", "r1", "--store", STORE], "no run 'r1'"),
        (["worker", "broken_mod", "--store", STORE], "cannot import 'broken_mod'"),
        (["worker", "no_such_mod", "--store", STORE], "cannot import 'no_such_mod'"),
        (["worker", "os", "--store", STORE], "defines no @workflow"),
        (["worker", "{m}:missing", "--store", STORE], "has no attribute 'missing'"),
        (["worker", "{m}:NOT_A_WORKFLOW", "--store", STORE], "is not a @workflow"),
    ],
)
def test_user_errors_exit_2_with_one_line(
    home: Path, capsys: pytest.CaptureFixture[str], argv: list[str], match: str
) -> None:
    argv = [arg.replace("{m}", _module()) for arg in argv]
    assert main(argv) == 2
    assert match in _one_error_line(capsys.readouterr().err)


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        ([], "required: COMMAND"),
        (["runs"], "required: COMMAND"),
        (["runs", "list"], "required: NAME"),
        (["runs", "list", "x", "--limit", "0"], "must be 1 or more"),
        (["runs", "list", "x", "--status", "done"], "invalid choice"),
        (["worker", "m", "--shutdown-grace", "-1"], "must be a finite number"),
        (["worker", "m", "--health-port", "70000"], "65535"),
        (["submit", "x", "--delay", "soon"], "not a number of seconds"),
        (["frobnicate"], "invalid choice"),
    ],
)
def test_usage_errors_are_argparse_s_exit_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], match: str
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: lockgate")
    assert match in err
    assert "Traceback" not in err


def test_help_and_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    assert "worker" in capsys.readouterr().out
    assert main(["runs", "show", "--help"]) == 0
    assert "RUN_ID" in capsys.readouterr().out
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("lockgate ")


DOCS = Path(__file__).parents[1] / "docs" / "cli.md"


def test_the_cli_page_agrees_with_the_command_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/cli.md shows ``lockgate --help`` as it prints, every status ``--status`` takes,
    and the format generation a new SQLite file gets."""
    from lockgate.stores.sqlite._file import FORMAT_GENERATION

    page = DOCS.read_text()
    monkeypatch.setenv("COLUMNS", "100")
    assert main(["--help"]) == 0
    printed = capsys.readouterr().out
    shown = page.split("$ lockgate --help\n", 1)[1].split("```", 1)[0]
    assert shown.strip() == printed.strip()
    status_row = next(line for line in page.splitlines() if line.startswith("| `--status S`"))
    assert [s.strip("` ,") for s in status_row.split(":", 1)[1].split("|")[0].split()] == [
        str(s) for s in RunStatus
    ]
    assert f"format_generation             {FORMAT_GENERATION}\n" in page


def test_the_environment_names_the_store(
    home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOCKGATE_STORE_URL", STORE)
    assert main(["runs", "list", "anything"]) == 0
    assert "no runs of workflow 'anything'" in capsys.readouterr().err
    assert (home / "cli.db").exists()


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main([*argv, "--store", STORE])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["runs", "show", "bad\nname", "r1"], "workflow name 'bad\\nname' holds U+000A"),
        (["runs", "show", "w", "r\x00"], "run id 'r\\x00' holds U+0000"),
        (["runs", "terminate", "w", "r\t1"], "run id"),
        (["runs", "cancel", "w\x1f", "r1"], "workflow name"),
        (["runs", "list", "n" * 257], "at most 256"),
        (["runs", "signal", "w", "r1", "go\n"], "signal name"),
        (["runs", "signal", "w", "r1", "go", "--signal-id", "a\u2028b"], "signal id"),
        (["submit", "w\x7f"], "workflow name"),
        (["submit", "w", "--idempotency-key", "k" * 257], "idempotency key"),
        (["trigger", "a\rb", "--event", "{}"], "workflow name"),
    ],
)
def test_names_and_ids_the_rules_refuse_exit_2_with_one_line_before_the_store_opens(
    home: Path, capsys: pytest.CaptureFixture[str], argv: list[str], match: str
) -> None:
    # A store file nobody made: the name is refused before the store is opened, so neither
    # the store's own "no such store" error nor a new file comes of it.
    code = main([*argv, "--store", "sqlite:///unopened.db"])
    err = capsys.readouterr().err
    assert code == 2
    assert match in _one_error_line(err)
    assert not (home / "unopened.db").exists()


def test_runs_terminate_on_valkey_ends_the_run_named_and_not_its_lookalike(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Workflow ``billing:eu`` run ``42`` and workflow ``billing`` run ``eu:42`` are two runs:
    terminating one leaves the other queued, and each shows its own params."""
    namespace = f"cli{uuid.uuid4().hex[:10]}"
    url = f"{shared_url()}?namespace={namespace}"
    store = ValkeyStore(shared_url(), namespace=namespace)
    store.submit_run("billing:eu", "42", {"region": "eu"})
    store.submit_run("billing", "eu:42", {"region": "all"})

    assert main(["runs", "terminate", "billing:eu", "42", "--store", url]) == 0
    assert capsys.readouterr().out.strip() == "run 42 terminated"
    statuses = {
        (i.name, i.run_id): i.status
        for n in ("billing:eu", "billing")
        for i in store.list_runs(n)[0]
    }
    assert statuses == {
        ("billing:eu", "42"): RunStatus.TERMINATED,
        ("billing", "eu:42"): RunStatus.PENDING,
    }
    assert main(["runs", "show", "billing", "eu:42", "--json", "--store", url]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert (shown["run"]["params"], shown["run"]["status"]) == ({"region": "all"}, "pending")
    assert main(["runs", "terminate", "billing", "42", "--store", url]) == 2
    assert "no run '42' of workflow 'billing'" in _one_error_line(capsys.readouterr().err)
    store.close()


def test_submit_with_app_checks_params_and_queues_a_run(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    name, app = f"{_module()}_adder", ["--app", _module()]
    code, _, err = _run(capsys, "submit", name, "--params", '{"a": 1}', *app)
    assert code == 2
    assert "needs parameter 'b'" in _one_error_line(err)
    code, _, err = _run(capsys, "submit", "other", *app)
    assert code == 2
    assert "--app" in _one_error_line(err)
    twice = [
        _run(capsys, "submit", name, "--params", '{"a": 1, "b": 2}', "--idempotency-key", "k", *app)
        for _ in range(2)
    ]
    assert [code for code, _, _ in twice] == [0, 0]
    run_id = twice[0][1].strip()
    assert twice[1][1].strip() == run_id
    assert len(run_id) == 32
    code, out, _ = _run(capsys, "runs", "list", name)
    assert code == 0
    assert run_id in out
    assert "pending" in out
    code, _, err = _run(
        capsys, "submit", name, "--params", '{"a": 5, "b": 2}', "--idempotency-key", "k"
    )
    assert code == 2
    assert "idempotency" in _one_error_line(err).lower()


def test_a_run_no_worker_serves_can_be_inspected_and_terminated(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    name = f"{_module()}_waiter"
    code, out, _ = _run(capsys, "submit", name, "--params", '{"who": "me"}', "--app", _module())
    run_id = out.strip()
    code, out, _ = _run(capsys, "runs", "show", name, run_id)
    assert code == 0
    assert "status       pending" in out
    assert '{"who":"me"}' in out
    assert "run:init" in out
    assert "waiting on   a worker to claim it, 1st in line" in out
    code, out, err = _run(
        capsys, "submit", name, "--params", '{"who": "x"}', "--wait", "--timeout", "0.3"
    )
    assert code == 1
    assert "still pending after 0.3s" in _one_error_line(err)
    code, out, _ = _run(capsys, "runs", "terminate", name, run_id, "--reason", "test")
    assert code == 0
    assert "terminated" in out
    code, out, _ = _run(capsys, "runs", "show", name, run_id)
    assert "error        terminated: test\n" in out
    assert "terminated: terminated" not in out
    code, out, _ = _run(capsys, "runs", "events", name, run_id)
    assert out.splitlines()[-1].split(None, 2)[1:] == ["run:error", "terminated: test"]
    code, _, err = _run(capsys, "runs", "terminate", name, run_id)
    assert code == 0
    assert "already ended (terminated)" in err
    code, _, err = _run(capsys, "runs", "cancel", name, run_id)
    assert code == 0
    assert "already ended" in err
    code, _, err = _run(capsys, "runs", "signal", name, run_id, "go")
    assert code == 1
    assert "has ended" in _one_error_line(err)
    code, _, err = _run(capsys, "runs", "signal", name, run_id, "go", "--payload", "3")
    assert code == 2
    assert "--payload must be a JSON object" in _one_error_line(err)
    code, out, _ = _run(capsys, "runs", "events", name, run_id, "--json")
    events = [json.loads(line) for line in out.splitlines()]
    assert [e["kind"] for e in events][-1] == "run:error"
    assert events[-1]["payload"]["code"] == "terminated"
    code, out, _ = _run(capsys, "runs", "list", name, "--status", "terminated", "--json")
    assert [json.loads(line)["run_id"] for line in out.splitlines()] == [run_id]
    code, out, _ = _run(capsys, "runs", "retry", name, run_id, "--plan")
    assert code == 0
    assert out.splitlines()[0].split() == ["retry", "run", f"{run_id}.retry1"]
    assert out.splitlines()[-1].split() == ["in", "doubt", "none"]
    code, _, err = _run(capsys, "runs", "show", name, f"{run_id}.retry1")
    assert code == 2, "--plan started the retry"
    code, out, err = _run(capsys, "runs", "retry", name, run_id)
    assert code == 0
    assert out.strip() == f"{run_id}.retry1"
    assert f"retried as run {run_id}.retry1" in err
    code, out, _ = _run(capsys, "runs", "retry", name, run_id)  # asked twice: one retry
    assert (code, out.strip()) == (0, f"{run_id}.retry1")
    code, out, err = _run(capsys, "runs", "retry", name, f"{run_id}.retry1")
    assert code == 2
    assert "has not ended (pending)" in _one_error_line(err)
    assert out == ""
    code, out, _ = _run(capsys, "runs", "show", name, f"{run_id}.retry1", "--json")
    assert json.loads(out)["run"]["params"] == {"who": "me"}


def test_store_info_and_backup(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    name = f"{_module()}_adder"
    _run(capsys, "submit", name, "--params", '{"a": 1, "b": 2}', "--app", _module())
    code, out, _ = _run(capsys, "store", "info")
    shown = dict(line.split(None, 1) for line in out.splitlines())
    assert code == 0
    assert shown["path"] == str(home / "cli.db")
    assert shown[f"workflows.{name}.pending"] == "1"
    code, out, _ = _run(capsys, "store", "info", "--json")
    assert json.loads(out)["workflows"] == {name: {"pending": 1}}
    code, out, _ = _run(capsys, "store", "backup", "copy.db")
    assert code == 0
    assert f"to {home / 'copy.db'}" in out
    assert (home / "copy.db").stat().st_mode & 0o077 == 0
    code, _, err = _run(capsys, "store", "backup", "copy.db")
    assert code == 2
    assert "already exists" in _one_error_line(err)
    assert main(["runs", "list", name, "--store", "sqlite:///copy.db"]) == 0
    assert "pending" in capsys.readouterr().out


# -- end to end: subprocesses around a worker process ----------------------------------------

ENV = {k: v for k, v in os.environ.items() if k not in ("LOCKGATE_STORE_URL", "LOCKGATE_DEBUG")}
E2E_STORE = "sqlite:///e2e.db"


def lockgate(
    cwd: Path, *argv: str, store_env: str | None = None, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """``lockgate ARGV`` in ``cwd``; ``store_env`` sets LOCKGATE_STORE_URL for it, ``stdin``
    is its standard input (none otherwise)."""
    env = ENV if store_env is None else {**ENV, "LOCKGATE_STORE_URL": store_env}
    return subprocess.run(
        [sys.executable, "-m", "lockgate", *argv],
        cwd=cwd,
        env=env,
        input=stdin,
        stdin=subprocess.DEVNULL if stdin is None else None,
        capture_output=True,
        text=True,
        timeout=30,
    )


def _start_worker(cwd: Path, store: str, log: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as sink:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "lockgate",
                "worker",
                "wf_module",
                "--store",
                store,
                "--concurrency",
                "4",
                "--poll-interval",
                "0.05",
                "--timer-interval",
                "0.2",
            ],
            cwd=cwd,
            env=ENV,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )


def _stop(process: subprocess.Popen[bytes]) -> int:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            return process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
    return process.wait()


def _until(what: str, check: Any, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _wait_ready(db: Path, process: subprocess.Popen[bytes], log: Path) -> None:
    """Until the worker has recorded its workflows on the store (it does so when it starts)."""

    def ready() -> bool:
        assert process.poll() is None, log.read_text()
        if not db.exists():
            return False
        store = SQLiteStore(db)
        try:
            return store.get_workflow_policy("cli_waiter") is not None
        finally:
            store.close()

    _until("the worker to start", ready)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A directory with wf_module.py and e2e.db, and a worker process serving the one on the
    other for the whole module."""
    cwd = tmp_path_factory.mktemp("cli_e2e")
    (cwd / "wf_module.py").write_text(WORKFLOWS)
    log = cwd / "worker.log"
    process = _start_worker(cwd, E2E_STORE, log)
    try:
        _wait_ready(cwd / "e2e.db", process, log)
        yield cwd
    finally:
        _stop(process)


def _status(cwd: Path, name: str, run_id: str) -> RunStatus | None:
    store = SQLiteStore(cwd / "e2e.db")
    try:
        info = store.get_run(name, run_id)
        return info.status if info else None
    finally:
        store.close()


def test_submit_wait_prints_the_run_id_then_the_result(served: Path) -> None:
    done = lockgate(
        served, "submit", "cli_adder", "--params", '{"a": 2, "b": 3}', "--wait", store_env=E2E_STORE
    )
    assert done.returncode == 0, done.stderr
    run_id, result = done.stdout.splitlines()
    assert json.loads(result) == 5
    shown = lockgate(served, "runs", "show", "cli_adder", run_id, "--store", E2E_STORE)
    assert shown.returncode == 0, shown.stderr
    fields = dict(line.split(None, 1) for line in shown.stdout.split("\n\n")[0].splitlines())
    assert fields["status"] == "complete"
    assert fields["result"] == "5"
    assert "step:done" in shown.stdout
    assert "add -> 5" in shown.stdout


def test_params_from_standard_input(served: Path) -> None:
    done = lockgate(
        served, "submit", "cli_adder", "--params", "-", "--wait", "--store", E2E_STORE,
        stdin='\ufeff{"a": 20,\n "b": 22}\n',
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[1]) == 42
    assert done.stderr == ""


def test_submit_wait_of_a_run_that_fails_exits_1(served: Path) -> None:
    done = lockgate(served, "submit", "cli_failer", "--wait", "--store", E2E_STORE)
    assert done.returncode == 1
    assert len(done.stdout.split()) == 1  # the run id, printed before the wait
    assert "'cli_failer': boom" in _one_error_line(done.stderr)


def test_a_signal_finishes_a_waiting_run(served: Path) -> None:
    started = lockgate(
        served, "submit", "cli_waiter", "--params", '{"who": "ann"}', "--store", E2E_STORE
    )
    assert started.returncode == 0, started.stderr
    run_id = started.stdout.strip()
    _until("the run to wait", lambda: _status(served, "cli_waiter", run_id) == "signal_waiting")
    shown = lockgate(served, "runs", "show", "cli_waiter", run_id, "--store", E2E_STORE)
    assert "signal_waiting" in shown.stdout
    assert "signal 'go', no deadline" in shown.stdout
    sent = lockgate(
        served, "runs", "signal", "cli_waiter", run_id, "go", "--payload", '{"n": 1}',
        "--signal-id", "s1", "--store", E2E_STORE,
    )  # fmt: skip
    assert sent.returncode == 0, sent.stderr
    assert "delivered" in sent.stdout
    again = lockgate(
        served, "runs", "signal", "cli_waiter", run_id, "go", "--payload", '{"n": 2}',
        "--signal-id", "s1", "--store", E2E_STORE,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == (
        f"signal 'go' not sent: run {run_id} already had signal id 's1' (a duplicate); "
        "the first send stands and this payload was dropped"
    )
    _until("the run to end", lambda: _status(served, "cli_waiter", run_id) == "complete")
    events = lockgate(
        served, "runs", "events", "cli_waiter", run_id, "--json", "--store", E2E_STORE
    )
    journal = [json.loads(line) for line in events.stdout.splitlines()]
    assert journal[-1]["kind"] == "run:complete"
    assert journal[-1]["payload"]["result"] == {"who": "ann", "got": {"n": 1}}
    late = lockgate(served, "runs", "cancel", "cli_waiter", run_id, "--wait", "--store", E2E_STORE)
    assert late.returncode == 1
    assert f"run {run_id} had already ended (complete); nothing to cancel" in _one_error_line(
        late.stderr
    )


def test_cancel_ends_a_waiting_run_cancelled(served: Path) -> None:
    started = lockgate(
        served, "submit", "cli_waiter", "--params", '{"who": "bo"}', "--store", E2E_STORE
    )
    run_id = started.stdout.strip()
    _until("the run to wait", lambda: _status(served, "cli_waiter", run_id) == "signal_waiting")
    cancelled = lockgate(
        served, "runs", "cancel", "cli_waiter", run_id, "--reason", "test", "--store", E2E_STORE
    )
    assert cancelled.returncode == 0, cancelled.stderr
    assert "cancel requested" in cancelled.stdout
    _until("the cancel", lambda: _status(served, "cli_waiter", run_id) == "cancelled")
    again = lockgate(served, "runs", "cancel", "cli_waiter", run_id, "--wait", "--store", E2E_STORE)
    assert again.returncode == 0, again.stderr
    assert f"run {run_id} had already been cancelled" in again.stderr
    listed = lockgate(served, "runs", "list", "cli_waiter", "--store", E2E_STORE)
    row = next(line for line in listed.stdout.splitlines() if line.startswith(run_id))
    assert row.split()[1] == "cancelled"
    waited = lockgate(served, "submit", "cli_waiter", "--params", '{"who": "cy"}', "--wait")
    assert waited.returncode == 2  # no --store and no LOCKGATE_STORE_URL


USER_ERRORS = {
    "unknown scheme": (
        ["runs", "list", "cli_adder", "--store", "mongodb://h"],
        "unknown store URL",
    ),
    "missing directory": (["runs", "list", "x", "--store", "sqlite:///no/x.db"], "does not exist"),
    "unknown workflow": (["submit", "cli_nobody"], "unknown workflow cli_nobody: no worker"),
    "malformed params": (["submit", "cli_adder", "--params", "{'a': 1}"], "not valid JSON"),
    "params not an object": (["submit", "cli_adder", "--params", '"a"'], "a JSON object"),
    "params off the signature": (
        ["submit", "cli_adder", "--params", '{"a": 1}', "--app", "wf_module"],
        "needs parameter 'b'",
    ),
}


def test_user_errors_exit_2_with_one_line_in_a_subprocess(served: Path) -> None:
    """All at once, in parallel processes, since each one only starts and refuses."""
    processes = {
        case: subprocess.Popen(
            [sys.executable, "-m", "lockgate", *argv],
            cwd=served,
            env={**ENV, "LOCKGATE_STORE_URL": E2E_STORE},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for case, (argv, _) in USER_ERRORS.items()
    }
    for case, process in processes.items():
        out, err = process.communicate(timeout=30)
        assert process.returncode == 2, (case, err)
        assert USER_ERRORS[case][1] in _one_error_line(err), case
        assert out == "", case


def test_the_worker_stops_on_sigterm_and_exits_0(served: Path) -> None:
    log = served / "second.log"
    process = _start_worker(served, "sqlite:///second.db", log)
    try:
        _wait_ready(served / "second.db", process, log)
    finally:
        code = _stop(process)
    assert code == 0, log.read_text()
    assert "worker stopped" in log.read_text()


# -- lockgate demo ---------------------------------------------------------------------------


def test_the_demo_prints_plain_lines_when_not_on_a_terminal_and_exits_0(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "lockgate", "demo"],
        cwd=tmp_path,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "\x1b" not in done.stdout
    assert "worker 1 died (exit 70) inside charge_card of A-102" in done.stdout
    assert "A-103  cancelled" in done.stdout
    summary = " ".join(done.stdout.split())  # its closing lines are wrapped to fit
    assert "with the same ctx.idempotency_key" in summary
    assert "DIFFERENT" not in summary
    assert list(tmp_path.iterdir()) == []


def test_the_crash_summary_agrees_with_how_many_orders_it_names() -> None:
    one = " ".join(crash_lessons(["A-102"], same=True))
    assert (
        "while A-102 was inside charge_card. Worker 2 took it over and replayed its journal:" in one
    )
    two = " ".join(crash_lessons(["A-101", "A-102"], same=True))
    assert "while A-101 and A-102 were inside" in two
    assert "took them over and replayed their journals:" in two
    three = " ".join(crash_lessons(["A-100", "A-101", "A-102"], same=False))
    assert "while A-100, A-101 and A-102 were inside" in three
    assert "with a DIFFERENT (!) ctx.idempotency_key" in three
    assert all(len(line) <= 88 for line in crash_lessons(["A-102"], same=True))


def test_the_board_redraws_in_place_on_a_terminal_and_prints_changes_otherwise(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    rows = [("A-1", "pending", "run:init", "r1"), ("A-2", "pending", "run:init", "r2")]
    moved = [("A-1", "complete", "run:complete", "r1"), rows[1]]
    plain, live = io.StringIO(), io.StringIO()
    for stream, is_live in ((plain, False), (live, True)):
        board = Board(stream, live=is_live)
        board.show(rows)
        board.say("something happened")
        board.show(rows)
        board.show(moved)
        board.close()
    lines = plain.getvalue().splitlines()
    assert [line.split()[1:3] for line in lines] == [
        ["A-1", "pending"],
        ["A-2", "pending"],
        ["something", "happened"],
        ["A-1", "complete"],
    ]
    drawn = live.getvalue()
    assert drawn.startswith("\x1b[?25l")
    assert drawn.endswith("\x1b[?25h")
    assert drawn.count("\x1b[4F\x1b[J") == 3  # erased for the story line, the change, the close
    assert drawn.count("ORDER  STATUS") == 4


def test_runs_list_filters_by_gate_key_and_show_says_why_a_run_waits(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from lockgate import SQLiteStore

    store = SQLiteStore(home / "cli.db")
    for run_id, key in (("a1", "acme"), ("a2", "acme"), ("g1", "globex")):
        store.submit_run("gated", run_id, {}, concurrency_key=key, concurrency_max=1)
    assert store.claim_next_run("gated", "worker/1") == "a1"
    store.close()
    code, out, _ = _run(capsys, "runs", "list", "gated", "--gate-key", "acme", "--json")
    assert code == 0
    assert sorted(json.loads(line)["run_id"] for line in out.splitlines()) == ["a1", "a2"]
    code, out, _ = _run(
        capsys, "runs", "list", "gated", "--gate-key", "acme", "--status", "pending", "--json"
    )
    assert [json.loads(line)["run_id"] for line in out.splitlines()] == ["a2"]
    code, out, _ = _run(capsys, "runs", "show", "gated", "a2")
    assert code == 0
    assert 'waiting on   Limit "acme" 1/1 running, 1st in line' in out


def test_trigger_buffers_and_prints_the_run_a_full_batch_fired(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = SQLiteStore(home / "cli.db")
    store.record_workflow_policy(
        "cli_digest",
        {
            "version": "v1",
            "version_behavior": "auto_upgrade",
            "concurrency": None,
            "rate": None,
            "trigger": {
                "key": "user_id",
                "key_callable": False,
                "mode": "collect",
                "window_seconds": 60.0,
                "max_events": 2,
            },
        },
    )
    store.record_workflow_policy("cli_plain", {"version": "v1", "trigger": None})
    store.close()
    code, out, _ = _run(capsys, "trigger", "cli_digest", "--event", '{"user_id": "u1"}')
    assert (code, out.strip()) == (0, "buffered")
    code, out, _ = _run(capsys, "trigger", "cli_digest", "--event", '{"user_id": "u1", "n": 2}')
    assert code == 0
    run_id = out.strip()
    assert run_id.startswith("trg-")
    code, out, _ = _run(capsys, "runs", "show", "cli_digest", run_id)
    assert '"count":2' in out.replace(" ", "")
    code, _, err = _run(capsys, "trigger", "cli_plain", "--event", "{}")
    assert code == 2
    assert "no Collect or Debounce trigger" in _one_error_line(err)
    code, _, err = _run(capsys, "trigger", "cli_digest", "--event", "[1]")
    assert code == 2
    assert "--event must be a JSON object" in _one_error_line(err)
