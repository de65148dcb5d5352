"""Prometheus metrics of workers: a known workload, then ``/metrics`` scraped over real HTTP
gives the expected counts; the dashboard's queries name only metrics that exist; names follow
Prometheus conventions.

The workload runs on an in-process worker over a MemoryStore on the system clock (scraped from
its health endpoint), and on a ``lockgate worker`` process over SQLite (scraped from
``--metrics-port``). Metrics live in the process-wide default registry: each test's workflows
have names no other test uses, so its series are its own. Every wait is for a state, bounded.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from lockgate import (
    Collect,
    Limit,
    MemoryStore,
    Rate,
    RunStatus,
    SQLiteStore,
    WorkflowClient,
    WorkflowContext,
    workflow,
)
from lockgate.worker import WorkerOptions, WorkflowWorker

DEADLINE = 60.0
ROOT = Path(__file__).parents[1]
DOCS = ROOT / "docs"

#: Released by the test to let the gated runs end.
RELEASE: dict[str, asyncio.Event] = {}

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@workflow(name="mx_ok")
async def mx_ok(ctx: WorkflowContext, n: int) -> int:
    return n * 2


@workflow(name="mx_bad")
async def mx_bad(ctx: WorkflowContext, n: int) -> int:
    raise ValueError(f"bad {n}")


@workflow(name="mx_limited", concurrency=Limit("tenant", 1))
async def mx_limited(ctx: WorkflowContext, tenant: str) -> str:
    await RELEASE["limited"].wait()
    return tenant


@workflow(name="mx_rated", rate_limit=Rate("tenant", per_second=0.001, burst=1))
async def mx_rated(ctx: WorkflowContext, tenant: str) -> str:
    return tenant


@workflow(name="mx_collect", trigger=Collect(key="user", max_events=100, window_seconds=0.5))
async def mx_collect(ctx: WorkflowContext, key: str, events: list[Any], count: int) -> int:
    return count


def parse(text: str) -> Samples:
    """Every sample of the exposition, by name and labels."""
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def requeues(samples: Samples, workflow: str) -> float:
    """The workflow's requeues, whatever their reason."""
    return sum(
        count
        for (name, labels), count in samples.items()
        if name == "lockgate_runs_requeued_total" and ("workflow", workflow) in labels
    )


def claims_over_requeues(samples: Samples, workflow: str) -> float:
    """Claims less requeues: each run's claim, once, however often it came back.

    A busy machine may hold a worker's heartbeat past a short lease, so a live run can be
    requeued and claimed again; every such claim is matched by a requeue, counted below.
    """
    return value(samples, "lockgate_runs_claimed_total", workflow=workflow) - requeues(
        samples, workflow
    )


async def scrape(url: str) -> Samples:
    async with httpx.AsyncClient() as http:
        answer = await http.get(url, timeout=10)
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("text/plain")
    return parse(answer.text)


async def scrape_until(url: str, what: str, check: Callable[[Samples], bool]) -> Samples:
    deadline = time.monotonic() + DEADLINE
    while True:
        samples = await scrape(url)
        if check(samples):
            return samples
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        await asyncio.sleep(0.02)


async def wait_for(what: str, check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + DEADLINE
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        await asyncio.sleep(0.01)


async def test_a_known_workload_scraped_from_the_health_endpoint() -> None:
    RELEASE["limited"] = asyncio.Event()
    store = MemoryStore(lock_ttl=0.5, heartbeat_interval=0.05)
    options = WorkerOptions(
        claim_poll_interval=0.005,
        timer_poll_interval_s=0.01,
        orphan_scan_interval=0.05,
        shutdown_grace=2.0,
        health_port=0,
        metrics_interval=0.05,
    )
    served = [mx_ok, mx_bad, mx_limited, mx_rated, mx_collect]
    worker = WorkflowWorker(workflows=served, store=store, options=options)
    client = worker.client
    # A worker that claimed this one and died: its lease lapses, the orphan scan requeues it.
    ghost = await client.submit("mx_ok", {"n": 99})
    assert store.claim_next_run("mx_ok", "ghost/0001", None) == ghost.run_id
    ok = [await client.submit("mx_ok", {"n": n}) for n in range(10)]
    bad = [await client.submit("mx_bad", {"n": n}) for n in range(2)]
    limited = [await client.submit("mx_limited", {"tenant": "acme"}) for _ in range(3)]
    rated = [await client.submit("mx_rated", {"tenant": "acme"}) for _ in range(3)]
    for i in range(3):
        assert await client.trigger("mx_collect", {"user": "u1", "i": i}) is None

    task = asyncio.create_task(worker.run())
    try:
        await wait_for("the health endpoint listens", lambda: worker.health_address is not None)
        host, port = worker.health_address or ("", 0)
        url = f"http://{host}:{port}/metrics"
        for handle in [*ok, ghost]:
            assert await handle.result(timeout=DEADLINE) in {n * 2 for n in [*range(10), 99]}
        for handle in bad:
            await wait_for("a failing run ends", lambda h=handle: _status(store, h) == "error")

        # One of each gated workflow runs (or ran); two wait behind its gate, which the
        # sampled gauges tell. A sample is a pass over the workflows one by one: a pass begun
        # before the last mx_ok run was claimed may still say it is queued, so the wait is
        # for a pass that began after.
        def gated(s: Samples) -> bool:
            return (
                value(s, "lockgate_runs_queued", workflow="mx_ok", gate="none") == 0
                and value(s, "lockgate_runs_queued", workflow="mx_limited", gate="limit") == 2
                and value(s, "lockgate_attempts_running", workflow="mx_limited") == 1
                and claims_over_requeues(s, "mx_limited") == 1
                and value(s, "lockgate_runs_queued", workflow="mx_rated", gate="rate") == 2
                and value(s, "lockgate_trigger_fire_delay_seconds_count", workflow="mx_collect")
                == 1
            )

        samples = await scrape_until(url, "the gauges show the gated runs", gated)
        assert value(samples, "lockgate_runs_queued", workflow="mx_limited", gate="none") == 0
        # The ghost was claimed outside this worker: its requeue and this worker's claim
        # of it cancel out, leaving the ten fresh runs.
        assert claims_over_requeues(samples, "mx_ok") == 10
        assert claims_over_requeues(samples, "mx_bad") == 2
        assert value(samples, "lockgate_runs_claimed_total", workflow="mx_rated") == 1
        ended = "lockgate_runs_ended_total"
        assert value(samples, ended, workflow="mx_ok", outcome="completed") == 11
        assert value(samples, ended, workflow="mx_ok", outcome="failed") == 0
        assert value(samples, ended, workflow="mx_bad", outcome="failed") == 2
        assert value(samples, ended, workflow="mx_rated", outcome="completed") == 1
        requeued = "lockgate_runs_requeued_total"
        assert value(samples, requeued, workflow="mx_ok", reason="owner_gone") >= 1
        attempts = "lockgate_run_attempt_duration_seconds_count"
        assert value(samples, attempts, workflow="mx_ok") == value(
            samples, "lockgate_runs_claimed_total", workflow="mx_ok"
        )
        latency = "lockgate_claim_latency_seconds_count"
        assert value(samples, latency, workflow="mx_ok") >= 1
        # The Collect batch fired once its window closed, and its run completes.
        await scrape_until(
            url,
            "the fired Collect run completes and no buffer is open",
            lambda s: (
                value(s, ended, workflow="mx_collect", outcome="completed") == 1
                and value(s, "lockgate_trigger_buffers_open", workflow="mx_collect", source="store")
                == 0
            ),
        )

        RELEASE["limited"].set()
        samples = await scrape_until(
            url,
            "the limited runs end and leave the queue",
            lambda s: (
                value(s, ended, workflow="mx_limited", outcome="completed") == 3
                and value(s, "lockgate_runs_queued", workflow="mx_limited", gate="limit") == 0
            ),
        )
        assert claims_over_requeues(samples, "mx_limited") == 3
        assert all(h.run_id for h in [*limited, *rated])
    finally:
        worker.stop()
        async with asyncio.timeout(DEADLINE):
            await asyncio.gather(task, return_exceptions=True)
    # The worker's endpoints also still answer their JSON; /metrics is no JSON route.
    assert worker.health_address is not None


def _status(store: MemoryStore, handle: Any) -> str:
    info = store.get_run(handle.name, handle.run_id)
    return str(info.status) if info is not None else ""


# -- a worker process, scraped on --metrics-port -----------------------------------------------

WORKFLOWS = textwrap.dedent(
    """
    from lockgate import workflow

    @workflow(name="mx_proc")
    async def mx_proc(ctx, n: int) -> int:
        if n < 0:
            raise ValueError("negative")
        return n + 1
    """
)


@pytest.fixture
def worker_process(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path, str]]:
    (tmp_path / "mx_proc_module.py").write_text(WORKFLOWS)
    url = f"sqlite:///{tmp_path / 'store.db'}"
    log = tmp_path / "worker.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOCKGATE_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    command = ["worker", "mx_proc_module", "--store", url, "--poll-interval", "0.05"]
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "lockgate", *command, "--metrics-port", "0"],
            cwd=tmp_path,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    try:
        yield process, log, url
    finally:
        if process.poll() is None:
            process.terminate()
        try:
            process.wait(timeout=DEADLINE)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


async def test_a_worker_process_serves_its_metrics_on_the_metrics_port(
    worker_process: tuple[subprocess.Popen[bytes], Path, str], tmp_path: Path
) -> None:
    process, log, _ = worker_process
    pattern = re.compile(r"metrics on (http://127\.0\.0\.1:\d+/metrics)")
    deadline = time.monotonic() + DEADLINE
    while (found := pattern.search(log.read_text(errors="replace"))) is None:
        assert process.poll() is None, log.read_text()
        assert time.monotonic() < deadline, log.read_text()
        await asyncio.sleep(0.05)
    url = found.group(1)
    store = SQLiteStore(tmp_path / "store.db")
    try:
        client = WorkflowClient(store)
        handles = [await client.submit("mx_proc", {"n": n}) for n in (1, 2, 3, -1)]
        assert [await h.result(timeout=DEADLINE) for h in handles[:3]] == [2, 3, 4]
        await wait_for(
            "the failing run ends",
            lambda: (
                (info := store.get_run("mx_proc", handles[3].run_id)) is not None
                and info.status == RunStatus.ERROR
            ),
        )
    finally:
        store.close()
    samples = await scrape_until(
        url,
        "the process counts its four runs",
        lambda s: value(s, "lockgate_runs_ended_total", workflow="mx_proc", outcome="failed") == 1,
    )
    ended = "lockgate_runs_ended_total"
    assert value(samples, ended, workflow="mx_proc", outcome="completed") == 3
    assert claims_over_requeues(samples, "mx_proc") == 4
    attempts = value(samples, "lockgate_run_attempt_duration_seconds_count", workflow="mx_proc")
    assert attempts == value(samples, "lockgate_runs_claimed_total", workflow="mx_proc")


def test_metrics_port_without_prometheus_client_is_a_configuration_error(
    tmp_path: Path,
) -> None:
    """With prometheus-client missing, ``--metrics-port`` exits 2 with one line on stderr."""
    (tmp_path / "mx_proc_module.py").write_text(WORKFLOWS)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOCKGATE_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(tmp_path)])
    hide = (
        "import sys; sys.modules['prometheus_client'] = None; "
        "from lockgate.cli import run; sys.argv[0] = 'lockgate'; sys.exit(run())"
    )
    url = f"sqlite:///{tmp_path / 'store.db'}"
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            hide,
            "worker",
            "mx_proc_module",
            "--store",
            url,
            "--metrics-port",
            "0",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        timeout=DEADLINE,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.decode().strip().splitlines()
    assert len(lines) == 1, lines
    assert "lockgate[metrics]" in lines[0]


# -- names and the dashboard -------------------------------------------------------------------

#: The HTTP API's metrics (``lockgate.http``), documented with the workers'.
HTTP_METRICS = {"lockgate_http_requests_total", "lockgate_http_request_duration_seconds"}


def registered() -> dict[str, str]:
    """Every lockgate metric in the default registry: sample-free name to type."""
    import lockgate.metrics._definitions  # noqa: F401 - registers the workers' metrics

    names = {}
    for family in REGISTRY.collect():
        if family.name.startswith("lockgate_"):
            suffix = "_total" if family.type == "counter" else ""
            names[family.name + suffix] = family.type
    return names


def test_metric_names_follow_prometheus_conventions() -> None:
    names = registered()
    assert "lockgate_runs_claimed_total" in names
    for name, kind in names.items():
        assert re.fullmatch(r"lockgate_[a-z][a-z0-9_]*", name), name
        if kind == "counter":
            assert name.endswith("_total"), name
        else:
            assert not name.endswith("_total"), name
        if kind == "histogram":
            assert name.endswith("_seconds"), name
        if any(word in name for word in ("duration", "latency", "delay")):
            assert name.endswith("_seconds"), name


def test_every_metric_is_documented() -> None:
    page = (DOCS / "metrics.md").read_text()
    for name in {*registered(), *HTTP_METRICS}:
        assert f"`{name}`" in page, name


def test_the_dashboard_queries_only_metrics_that_exist() -> None:
    dashboard = json.loads((DOCS / "grafana-dashboard.json").read_text())
    exprs = [
        target["expr"]
        for panel in dashboard["panels"]
        for target in panel.get("targets", [])
        if "expr" in target
    ]
    exprs += [var["definition"] for var in dashboard["templating"]["list"] if "definition" in var]
    assert len(exprs) >= 10
    known = {*registered(), *HTTP_METRICS}
    named = set()
    for expr in exprs:
        for name in re.findall(r"\blockgate_[a-z0-9_]+", expr):
            base = re.sub(r"_(bucket|count|sum)$", "", name)
            assert base in known, f"{name} in {expr!r} is no metric"
            named.add(base)
    # Every worker metric has a panel.
    assert set(registered()) <= named, set(registered()) - named
