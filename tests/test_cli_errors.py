"""How the command line reports what it cannot work with, one line and the right exit code
each: JSON given as @FILE or on stdin, store files it may not use, what answers at a Valkey URL;
and Ctrl-C on a command that waits."""

from __future__ import annotations

import contextlib
import ctypes
import io
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from lockgate.cli import main
from lockgate.stores import SQLiteStore
from test_cli import ENV, WORKFLOWS, _module, _one_error_line, _run, _until, enter_home
from valkey_server import ValkeyServer, http_server


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """test_cli's ``home``: a working directory with a workflows module of its own."""
    yield from enter_home(tmp_path, monkeypatch)


# -- JSON from a file or stdin ---------------------------------------------------------------


def _store(home: Path) -> SQLiteStore:
    return SQLiteStore(home / "cli.db")


def test_json_options_read_a_file_or_stdin(
    home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    adder, waiter, app = f"{_module()}_adder", f"{_module()}_waiter", ["--app", _module()]
    (home / "params.json").write_text('{"a": 1,\n "b": 2}\n')
    code, out, err = _run(capsys, "submit", adder, "--params", "@params.json", *app)
    assert code == 0, err
    from_file = out.strip()
    monkeypatch.setattr(sys, "stdin", io.StringIO('{"who": "stdin"}'))
    code, out, err = _run(capsys, "submit", waiter, "--params", "-", *app)
    assert code == 0, err
    from_stdin = out.strip()
    (home / "payload.json").write_text('{"big": "' + "x" * 200_000 + '"}')
    code, out, err = _run(
        capsys, "runs", "signal", waiter, from_stdin, "go", "--payload", "@payload.json"
    )
    assert code == 0, err
    store = _store(home)
    try:
        assert store.get_run(adder, from_file).params == {"a": 1, "b": 2}
        assert store.get_run(waiter, from_stdin).params == {"who": "stdin"}
        buffered = store.peek_signal(waiter, from_stdin, "go")
        assert buffered is not None
        assert buffered["payload"] == {"big": "x" * 200_000}
    finally:
        store.close()


JSON_INPUT_ERRORS = {
    "missing file": ("@missing.json", None, "--params @missing.json: no such file"),
    "a directory": ("@adir", None, "--params @adir: is a directory, not a file"),
    "no file named": ("@", None, "--params @ names no file"),
    "invalid JSON": (
        "@bad.json",
        '{"a": 1,\n "b": }',
        "--params @bad.json is not valid JSON: Expecting value: line 2 column 7",
    ),
    "NaN in a file": ("@nan.json", '{"a": NaN}', "--params @nan.json: NaN is not JSON"),
    "Infinity on stdin": ("-", '{"a": [Infinity]}', "--params (stdin): Infinity is not JSON"),
    "-Infinity inline": ('{"a": -Infinity}', None, "--params: -Infinity is not JSON"),
    "empty stdin": ("-", "", "--params (stdin) is empty"),
    "not UTF-8": ("@latin1.json", b'{"a": "\xe9"}', "--params @latin1.json is not UTF-8 text"),
}


@pytest.mark.parametrize("case", JSON_INPUT_ERRORS)
def test_json_option_problems_exit_2_with_one_line(
    home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    given, content, match = JSON_INPUT_ERRORS[case]
    (home / "adir").mkdir()
    if given == "-":
        monkeypatch.setattr(sys, "stdin", io.StringIO(content))
    elif content is not None:
        target = home / given.removeprefix("@")
        if isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.write_text(content)
    code, _, err = _run(
        capsys, "submit", f"{_module()}_adder", "--params", given, "--app", _module()
    )
    assert code == 2
    assert match in _one_error_line(err)


# -- a store file that cannot be used --------------------------------------------------------


@pytest.mark.parametrize("value", ["abc", "", "-3", "0", "1.5"])
def test_a_damaged_format_generation_is_one_line_and_the_file_is_left_alone(
    home: Path, capsys: pytest.CaptureFixture[str], value: str
) -> None:
    _store(home).close()
    with sqlite3.connect(home / "cli.db") as conn:
        conn.execute("UPDATE lg_meta SET value = ? WHERE key = 'format_generation'", (value,))
    conn.close()
    before = (home / "cli.db").read_bytes()
    for argv in (["store", "info"], ["runs", "list", "x"]):
        code, _, err = _run(capsys, *argv)
        assert code == 2
        line = _one_error_line(err)
        assert f"format generation is damaged ({value!r} is not" in line
    assert (home / "cli.db").read_bytes() == before


def _unprivileged() -> Callable[[], None] | None:
    """For a subprocess: as root, drop the capabilities that let root read and write any file
    (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH) from its bounding set, so file modes bind it as
    they bind anyone else; None when not root, where they bind already."""
    if os.geteuid() != 0:
        return None
    libc = ctypes.CDLL(None, use_errno=True)

    def drop() -> None:
        for capability in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
            if libc.prctl(24, capability, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
                raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")

    return drop


def _lockgate_unprivileged(cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lockgate", *argv],
        cwd=cwd,
        env=ENV,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
        preexec_fn=_unprivileged(),  # only a prctl between fork and exec
    )


def test_files_this_user_may_not_read_or_write_are_one_line_each(tmp_path: Path) -> None:
    secret = tmp_path / "secret.json"
    secret.write_text("{}")
    secret.chmod(0o000)
    SQLiteStore(tmp_path / "s.db").close()  # commands other than worker create no store
    done = _lockgate_unprivileged(
        tmp_path, "submit", "x", "--params", "@secret.json", "--store", "sqlite:///s.db"
    )
    assert done.returncode == 2, done.stderr
    assert "--params @secret.json: cannot read it (permission denied)" in _one_error_line(
        done.stderr
    )

    db = tmp_path / "ro.db"
    store = SQLiteStore(db)
    store.submit_run("w", "r1", {})
    store.close()
    before = db.read_bytes()
    db.chmod(0o444)
    for argv in (["runs", "list", "w"], ["runs", "show", "w", "r1"], ["submit", "w"]):
        done = _lockgate_unprivileged(tmp_path, *argv, "--store", "sqlite:///ro.db")
        assert done.returncode == 2, (argv, done.stderr)
        line = _one_error_line(done.stderr)
        assert f"{db} is read-only for this user" in line, argv
        assert "even for commands that only read" in line
    assert db.read_bytes() == before


# -- what answers at a Valkey URL -------------------------------------------------------------


@pytest.fixture(scope="module")
def valkey_ports() -> Iterator[dict[str, int]]:
    """Ports to point ``--store`` at: a plain Valkey, one with a password, an HTTP server."""
    plain, guarded = ValkeyServer().start(), ValkeyServer(password="cli-Pa55").start()
    try:
        with http_server() as http:
            yield {"plain": plain.port, "guarded": guarded.port, "http": http}
    finally:
        plain.close()
        guarded.close()


VALKEY_PROBLEMS = {
    "not valkey": ("valkey://127.0.0.1:{http}/0", "is not a Valkey server"),
    "no password": ("valkey://127.0.0.1:{guarded}/0", "needs a password and the URL gives none"),
    "wrong password": ("valkey://:nope@127.0.0.1:{guarded}/0", "refused the password"),
    "no such database": ("valkey://127.0.0.1:{plain}/99", "has no database 99"),
    "database not a number": ("valkey://127.0.0.1:{plain}/abc", "'abc' is not a number"),
    "unknown option": ("valkey://127.0.0.1:{plain}/0?frob=1", "takes no option 'frob'"),
    "tls to a plain server": ("valkeys://127.0.0.1:{plain}/0", "does not speak TLS"),
}


@pytest.mark.parametrize("case", VALKEY_PROBLEMS)
def test_valkey_url_problems_exit_2_with_one_line(
    valkey_ports: dict[str, int], capsys: pytest.CaptureFixture[str], case: str
) -> None:
    url, match = VALKEY_PROBLEMS[case]
    started = time.monotonic()
    assert main(["runs", "list", "x", "--store", url.format(**valkey_ports)]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert match in line
    assert "cannot reach" not in line
    assert "nope" not in line
    assert time.monotonic() - started < 3, "told at once, not after a timeout"


# -- the journal URL --------------------------------------------------------------------------

#: ``--journal`` values that cannot be a journal, with a store of each kind, and what the one
#: line says: it names the journal URL, never the store's.
JOURNAL_PROBLEMS = {
    "empty, with SQLite": ("sqlite:///cli.db", "", "the journal URL is empty"),
    "empty, with Valkey": ("valkey://127.0.0.1:1/0", "", "the journal URL is empty"),
    "blank, with Valkey": ("valkey://127.0.0.1:1/0", "  ", "the journal URL is empty"),
    "no scheme": ("valkey://127.0.0.1:1/0", "127.0.0.1:9092", "journal URL '127.0.0.1:9092'"),
}


@pytest.mark.parametrize("case", JOURNAL_PROBLEMS)
def test_a_journal_url_that_cannot_be_one_is_said_to_be_the_journal_url(
    home: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    store, journal, match = JOURNAL_PROBLEMS[case]
    assert main(["runs", "list", "x", "--store", store, "--journal", journal]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert match in line
    assert "store URL" not in line


def test_an_empty_journal_is_said_so_by_a_worker_and_by_journal_replay(home: Path) -> None:
    """In processes, as a shell runs them: exit 2, one line naming the journal."""
    env = {k: v for k, v in ENV.items() if k != "LOCKGATE_JOURNAL_URL"}
    worker = [_module(), "--store", "valkey://127.0.0.1:1/0", "--journal", ""]
    for argv, match in (
        (["worker", *worker], "the journal URL is empty"),
        (["journal", "replay", "--journal", ""], "--journal is empty"),
    ):
        done = subprocess.run(
            [sys.executable, "-m", "lockgate", *argv],
            cwd=home,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 2, done.stderr
        line = _one_error_line(done.stderr)
        assert match in line
        assert "store URL" not in line


# -- Ctrl-C -----------------------------------------------------------------------------------


def _interrupt_twice(process: subprocess.Popen[str]) -> tuple[int, str]:
    """Ctrl-C, and again as soon as the first is reported (an impatient user): the exit code
    and all of stderr."""
    process.send_signal(signal.SIGINT)
    assert process.stderr is not None
    first = process.stderr.readline()
    with contextlib.suppress(ProcessLookupError):
        process.send_signal(signal.SIGINT)
    _, rest = process.communicate(timeout=30)
    return process.wait(), first + rest


def _interruptible() -> None:
    """Ctrl-C as a terminal delivers it: a suite run in the background (CI, nohup) has SIGINT
    ignored, which a child inherits and Python then honours (no KeyboardInterrupt at all)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _cli(cwd: Path, *argv: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "lockgate", *argv, "--store", "sqlite:///idle.db"],
        cwd=cwd,
        env=ENV,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_interruptible,  # only a signal() between fork and exec
    )


def test_ctrl_c_on_a_waiting_command_exits_130_with_one_line(tmp_path: Path) -> None:
    """``submit --wait`` and ``runs cancel --wait`` on a store no worker serves wait forever;
    Ctrl-C ends them at once with exit 130 and one line, even pressed twice."""
    (tmp_path / "wf_idle.py").write_text(WORKFLOWS)
    SQLiteStore(tmp_path / "idle.db").close()  # commands other than worker create no store
    submit = _cli(
        tmp_path, "submit", "cli_waiter", "--params", '{"who": "x"}', "--app", "wf_idle", "--wait"
    )
    assert submit.stdout is not None
    run_id = submit.stdout.readline().strip()
    assert len(run_id) == 32, run_id
    code, err = _interrupt_twice(submit)
    assert (code, err) == (130, "lockgate: interrupted\n")

    cancel = _cli(tmp_path, "runs", "cancel", "cli_waiter", run_id, "--wait")

    def cancel_requested() -> bool:
        store = SQLiteStore(tmp_path / "idle.db")
        try:
            info = store.get_run("cli_waiter", run_id)
            return info is not None and info.cancel_requested_at is not None
        finally:
            store.close()

    _until("the cancel to be asked for", cancel_requested)
    code, err = _interrupt_twice(cancel)
    assert (code, err) == (130, "lockgate: interrupted\n")
