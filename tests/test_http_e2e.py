"""End to end over real HTTP: ``lockgate serve`` and a worker as processes of their own on one
SQLite file; httpx as the caller."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from http_support import DEADLINE, PROCS, ServeProcess, env
from lockgate.http import hash_token

TOKEN = "e2e-token"
WORKER = [sys.executable, str(PROCS / "worker_main.py")]
SERVE = [sys.executable, "-m", "lockgate", "serve", "http_workflows:WORKFLOWS"]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[str]:
    db = tmp_path / "lockgate.db"
    tokens = tmp_path / "tokens"
    tokens.write_text(f"read,write,admin {hash_token(TOKEN)} e2e\n")
    serve = ServeProcess(
        ["http_workflows:WORKFLOWS", "--store", f"sqlite:///{db}", "--tokens", str(tokens)],
        tmp_path / "serve.log",
    )
    log = (tmp_path / "worker.log").open("wb")
    worker = subprocess.Popen(
        [*WORKER, "--store", str(db), "--workflows", "http_workflows", "--concurrency", "8"],
        stderr=log,
        env=env(),
        cwd=PROCS,
    )
    try:
        yield serve.url
    finally:
        worker.terminate()
        assert worker.wait(DEADLINE) == 0
        log.close()
        assert serve.stop() == 0


async def result(http: httpx.AsyncClient, name: str, run_id: str) -> dict[str, Any]:
    answer: dict[str, Any] = (
        await http.get(f"/{name}/runs/{run_id}/result", params={"wait": DEADLINE - 5})
    ).json()
    assert answer["done"], answer
    return answer


def max_overlap(record: Path) -> int:
    """Most runs between their start and end lines at once."""
    now = most = 0
    for line in sorted(record.read_text().splitlines(), key=lambda row: int(row.split()[1])):
        now += 1 if line.startswith("start") else -1
        most = max(most, now)
    return most


async def test_submit_signal_result_collect_and_limit(cluster: str, tmp_path: Path) -> None:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx.AsyncClient(base_url=cluster, headers=headers, timeout=DEADLINE) as http:
        made = await http.post("/http_wait/runs", json={"order": "o-1"})
        assert made.status_code == 201
        run_id = made.json()["run_id"]
        sent = await http.post(f"/http_wait/runs/{run_id}/signals/go", json={"paid": True})
        assert sent.status_code == 200
        done = await result(http, "http_wait", run_id)
        assert done["result"] == {"order": "o-1", "amount": 1, "go": {"paid": True}, "bumped": 0}

        fired = [
            (await http.post("/http_collect/events", json={"k": "acme", "n": n})).json()["run_id"]
            for n in (10, 20, 30)
        ]
        assert fired[:2] == [None, None]
        assert (await result(http, "http_collect", fired[2]))["result"] == 60

        record = tmp_path / "limited.txt"
        body = {"tenant": "t1", "record": str(record), "pause": 0.15}
        submits = await asyncio.gather(
            *(http.post("/http_limited/runs", json=body) for _ in range(8))
        )
        assert [s.status_code for s in submits] == [201] * 8
        ids = [s.json()["run_id"] for s in submits]
        shown = (await http.get(f"/http_limited/runs/{ids[-1]}")).json()
        assert shown["gates"]["concurrency"] == {"key": "t1", "max": 2}
        for one in ids:
            assert (await result(http, "http_limited", one))["result"] == "t1"
        assert len(record.read_text().splitlines()) == 16
        assert max_overlap(record) <= 2  # Limit(max=2) held across HTTP submits


def test_serve_refuses_a_public_host_without_tokens(tmp_path: Path) -> None:
    run = subprocess.run(
        [*SERVE, "--store", f"sqlite:///{tmp_path / 'x.db'}", "--host", "0.0.0.0", "--port", "0"],
        capture_output=True,
        env={k: v for k, v in env().items() if k != "LOCKGATE_HTTP_TOKENS"},
        cwd=PROCS,
        timeout=DEADLINE,
    )
    assert run.returncode == 2
    lines = run.stderr.decode().splitlines()
    assert len(lines) == 1
    assert "--insecure" in lines[0]
    assert not (tmp_path / "x.db").exists()  # refused before opening anything


def test_serve_refuses_a_malformed_tokens_file(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("root secret\n")
    run = subprocess.run(
        [*SERVE, "--store", f"sqlite:///{tmp_path / 'x.db'}", "--tokens", str(tokens)],
        capture_output=True,
        env=env(),
        cwd=PROCS,
        timeout=DEADLINE,
    )
    assert run.returncode == 2
    assert run.stderr.decode().count("\n") == 1
    assert "unknown scope" in run.stderr.decode()
