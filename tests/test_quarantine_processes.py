"""Quarantine with real ``lockgate worker`` processes: a body that SIGKILLs its own worker every
time is quarantined after ``--poison-max-retries`` + 1 crashes, the runs submitted beside it
complete, ``lockgate runs list --status quarantined`` finds it and ``lockgate runs retry``
releases it once its code is fixed.

Workers run one attempt at a time (``--concurrency 1``): a crash then takes down the poison
run's attempt alone. (Runs that shared the dying worker would each count that crash too: the
store sees lapsed leases, not which body killed the process.) The test starts a new worker
whenever one dies and waits for states, never for fixed times.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from lockgate import EventKind, RunStatus, WorkflowClient
from lockgate.stores import SQLiteStore

T = TypeVar("T")

NAME = "poison_mixed"
#: Seconds any one state may take to come about, on a machine whose cores are all busy.
DEADLINE = 90.0
MAX_RETRIES = 2
WORKERS = 2

WORKFLOWS = textwrap.dedent(
    """
    import os
    import signal
    from pathlib import Path

    from lockgate import step, workflow

    HERE = Path(__file__).parent

    @step
    def maybe_die(kill: bool) -> str:
        if kill and not (HERE / "fixed").exists():
            with open(HERE / "crashes.txt", "a") as record:
                record.write(f"{os.getpid()}\\n")
            os.kill(os.getpid(), signal.SIGKILL)
        return "alive"

    @workflow(name="poison_mixed")
    async def poison_mixed(ctx, n: int, kill: bool = False) -> int:
        assert await maybe_die(kill) == "alive"
        return n
    """
)


def until(what: str, check: Callable[[], T | None], timeout: float = DEADLINE) -> T:
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        time.sleep(0.05)


class Workers:
    """``lockgate worker`` processes on one SQLite file, replaced as they die."""

    def __init__(self, cwd: Path) -> None:
        self.cwd = cwd
        self.url = f"sqlite:///{cwd / 'lockgate.db'}?lock_ttl=1.5&heartbeat_interval=0.3"
        self.procs: list[subprocess.Popen[bytes]] = []
        (cwd / "poison_module.py").write_text(WORKFLOWS)

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "lockgate", *args, "--store", self.url],
            cwd=self.cwd,
            env=self._env(),
            capture_output=True,
            text=True,
            timeout=DEADLINE,
            check=False,
        )

    def _env(self) -> dict[str, str]:
        return {k: v for k, v in os.environ.items() if not k.startswith("LOCKGATE_")}

    def start(self) -> None:
        log = (self.cwd / f"worker-{len(self.procs)}.log").open("wb")
        command = [
            "worker",
            "poison_module",
            *("--store", self.url),
            *("--concurrency", "1", "--poll-interval", "0.05"),
            *("--orphan-scan-interval", "0.2", "--poison-max-retries", str(MAX_RETRIES)),
        ]
        self.procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "lockgate", *command],
                cwd=self.cwd,
                env=self._env(),
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        )
        log.close()

    def keep_alive(self) -> None:
        """Start a worker for each that died, so ``WORKERS`` are running."""
        alive = [p for p in self.procs if p.poll() is None]
        for _ in range(WORKERS - len(alive)):
            self.start()

    def killed(self) -> int:
        return sum(1 for p in self.procs if p.returncode == -9)

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=DEADLINE)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def logs(self) -> str:
        return "\n".join(p.read_text(errors="replace") for p in sorted(self.cwd.glob("*.log")))


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[Workers]:
    cluster = Workers(tmp_path)
    yield cluster
    cluster.stop()


def test_a_body_that_kills_its_worker_is_quarantined_and_the_rest_complete(
    workers: Workers, tmp_path: Path
) -> None:
    workers.keep_alive()
    store = SQLiteStore(tmp_path / "lockgate.db", lock_ttl=1.5, heartbeat_interval=0.3)
    until("a worker recorded the workflow", lambda: store.get_workflow_policy(NAME))
    client = WorkflowClient(store)

    async def submit_all() -> tuple[str, list[str]]:
        poison = (await client.submit(NAME, {"n": 0, "kill": True}, run_id="poison")).run_id
        others = [(await client.submit(NAME, {"n": n})).run_id for n in range(1, 9)]
        return poison, others

    poison, others = asyncio.run(submit_all())

    def settled() -> bool:
        workers.keep_alive()
        info = store.get_run(NAME, poison)
        assert info is not None
        assert info.status in (RunStatus.PENDING, RunStatus.IN_PROGRESS, RunStatus.QUARANTINED), (
            f"{info.status}\n{workers.logs()}"
        )
        done = all(store.get_run(NAME, r).status == RunStatus.COMPLETE for r in others)  # type: ignore[union-attr]
        return info.status == RunStatus.QUARANTINED and done

    until("the poison run is quarantined and the others complete", settled)
    crashes = (tmp_path / "crashes.txt").read_text().split()
    assert len(crashes) == MAX_RETRIES + 1
    assert workers.killed() == MAX_RETRIES + 1
    last = store.get_last_event(NAME, poison)
    assert last is not None
    assert last.kind == EventKind.RUN_ERROR
    assert last.payload["detail"]["crashes"] == MAX_RETRIES + 1
    requeued = [e for e in store.load_run(NAME, poison) if e.kind == EventKind.RUN_REQUEUED]
    assert [e.payload["crashes"] for e in requeued] == list(range(1, MAX_RETRIES + 1))
    for run_id in others:
        assert [e.kind for e in store.load_run(NAME, run_id)][-1] == EventKind.RUN_COMPLETE

    listed = workers.cli("runs", "list", NAME, "--status", "quarantined", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [line for line in listed.stdout.splitlines() if line] != []
    assert all('"quarantined"' in line for line in listed.stdout.splitlines() if line)
    assert '"poison"' in listed.stdout
    shown = workers.cli("runs", "show", NAME, poison)
    assert shown.returncode == 0, shown.stderr
    assert "quarantined" in shown.stdout

    # The body is fixed; a retry releases the run and it completes on the workers.
    (tmp_path / "fixed").write_text("")
    retried = workers.cli("runs", "retry", NAME, poison)
    assert retried.returncode == 0, retried.stderr
    retry_id = retried.stdout.strip().split()[-1]

    def retry_done() -> bool:
        workers.keep_alive()
        info = store.get_run(NAME, retry_id)
        return info is not None and info.status == RunStatus.COMPLETE

    until(f"the retry {retry_id} completes", retry_done)
    assert store.get_run(NAME, poison).status == RunStatus.QUARANTINED  # type: ignore[union-attr]
    assert workers.killed() == MAX_RETRIES + 1
    store.close()
