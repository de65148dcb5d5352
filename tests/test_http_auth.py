"""Who may do what: every endpoint without a token, with a wrong one and with each scope; and
bodies over the cap (100 MB) refused without being read whole."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from http_support import DEADLINE, app_server, http_workflows
from lockgate.http import TokenTable, create_app, hash_token
from lockgate.stores import MemoryStore

WORKFLOWS = http_workflows().WORKFLOWS
TOKENS = {"read": "r-token", "write": "w-token", "admin": "a-token", "all": "root-token"}
TABLE = TokenTable.parse(
    f"read {hash_token(TOKENS['read'])} reader\n"
    f"write {TOKENS['write']}\n"
    f"admin {hash_token(TOKENS['admin'])} operator\n"
    f"read,write,admin {TOKENS['all']}\n"
)
#: (method, path template, scope it needs, body)
ENDPOINTS: list[tuple[str, str, str, Any]] = [
    ("POST", "/http_wait/runs", "write", {"order": "a"}),
    ("POST", "/http_collect/events", "write", {"k": "x"}),
    ("GET", "/http_wait/runs", "read", None),
    ("GET", "/http_wait/runs/{run}", "read", None),
    ("GET", "/http_wait/runs/{run}/events", "read", None),
    ("GET", "/http_wait/runs/{run}/result", "read", None),
    ("POST", "/http_wait/runs/{run}/signals/go", "write", {}),
    ("POST", "/http_wait/runs/{run}/updates/bump?timeout=0.1", "write", {}),
    ("POST", "/http_wait/runs/{run}/queries/state", "write", {}),
    ("POST", "/http_wait/runs/{run}/cancel", "admin", {}),
    ("POST", "/http_wait/runs/{run}/terminate", "admin", {}),
    ("POST", "/http_wait/runs/{run}/pause", "admin", None),
    ("POST", "/http_wait/runs/{run}/unpause", "admin", None),
    ("POST", "/http_wait/runs/{run}/resume", "admin", {"action": "approve"}),
]
IDS = [f"{method} {path.split('?')[0]}" for method, path, _, _ in ENDPOINTS]
MB = 1024 * 1024


@pytest.fixture
def store() -> MemoryStore:
    return MemoryStore()


@pytest.fixture
async def http(store: MemoryStore) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(store, workflows=WORKFLOWS, tokens=TABLE)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://lockgate") as client:
        yield client


def bearer(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token is not None else {}


async def call(
    http: httpx.AsyncClient, endpoint: tuple[str, str, str, Any], run: str, token: str | None
) -> httpx.Response:
    method, path, _, body = endpoint
    return await http.request(
        method, path.format(run=run), json=body, headers=bearer(token) if token else {}
    )


async def existing_run(http: httpx.AsyncClient) -> str:
    made = await http.post("/http_wait/runs", json={"order": "a"}, headers=bearer("root-token"))
    assert made.status_code == 201
    run_id: str = made.json()["run_id"]
    return run_id


def shape(response: httpx.Response) -> tuple[int, dict[str, Any], str | None]:
    return response.status_code, response.json(), response.headers.get("www-authenticate")


@pytest.mark.parametrize("endpoint", ENDPOINTS, ids=IDS)
async def test_no_token_or_a_wrong_one_is_401_alike_for_runs_that_exist_or_not(
    http: httpx.AsyncClient, endpoint: tuple[str, str, str, Any]
) -> None:
    real = await existing_run(http)
    answers = []
    for token in (None, "wrong", hash_token(TOKENS["all"]), ""):
        for run in (real, "no-such-run"):
            response = await call(http, endpoint, run, token)
            headers = bearer(token) if token is not None else {}
            if token == "":
                headers = {"Authorization": "Basic cm9vdDpyb290"}
                response = await http.request(
                    endpoint[0], endpoint[1].format(run=run), json=endpoint[3], headers=headers
                )
            assert response.status_code == 401, response.text
            assert response.headers["content-type"].startswith("application/problem+json")
            answers.append(shape(response))
    assert all(answer == answers[0] for answer in answers)  # nothing says whether it exists
    assert answers[0][1]["code"] == "unauthenticated"
    assert answers[0][2] == 'Bearer realm="lockgate"'


@pytest.mark.parametrize("endpoint", ENDPOINTS, ids=IDS)
async def test_each_scope(http: httpx.AsyncClient, endpoint: tuple[str, str, str, Any]) -> None:
    real = await existing_run(http)
    needed = endpoint[2]
    for scope in ("read", "write", "admin"):
        answers = [await call(http, endpoint, run, TOKENS[scope]) for run in (real, "no-such")]
        if scope == needed:
            assert all(a.status_code not in (401, 403) for a in answers), answers[0].text
            assert answers[1].status_code == 404 or endpoint[1].count("/") <= 2
        else:
            assert [a.status_code for a in answers] == [403, 403], answers[0].text
            assert answers[0].json() == answers[1].json()
            assert answers[0].json()["code"] == "forbidden"
    allowed = await call(http, endpoint, real, TOKENS["all"])
    assert allowed.status_code not in (401, 403)


async def test_probes_metrics_and_openapi_are_open(http: httpx.AsyncClient) -> None:
    for path in ("/livez", "/readyz", "/metrics", "/openapi.json"):
        assert (await http.get(path)).status_code == 200


def test_tokens_file_and_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "tokens"
    path.write_text(f"# ops\nread,admin {hash_token('t1')} ops\n\nwrite t2\n")
    table = TokenTable.load(path)
    entry = table.authenticate("Bearer t1")
    assert entry is not None
    assert entry.scopes == {"read", "admin"}
    assert entry.label == "ops"
    assert table.authenticate("Bearer t2") is not None
    assert table.authenticate("Bearer t3") is None
    assert all(len(e.digest) == 32 for e in table.entries)  # hashes only, never the token
    monkeypatch.setenv("LOCKGATE_HTTP_TOKENS", "read t4; write t5")
    from_env = TokenTable.load()
    assert from_env.authenticate("bearer t5") is not None
    monkeypatch.delenv("LOCKGATE_HTTP_TOKENS")
    assert not TokenTable.load()
    for bad in ("read", "root t1", "read t1 label extra"):
        path.write_text(bad + "\n")
        with pytest.raises(Exception, match=r"entry 1"):
            TokenTable.load(path)


class Counted:
    """A request body of ``total`` bytes in 64 KiB chunks that counts what was pulled."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.pulled = 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        chunk = b" " * (64 * 1024)
        while self.pulled < self.total:
            self.pulled += len(chunk)
            yield chunk


async def test_streamed_100_mb_body_is_refused_at_the_cap(http: httpx.AsyncClient) -> None:
    body = Counted(100 * MB)
    response = await http.post(
        "/http_small/runs",
        content=body,
        headers={**bearer(TOKENS["write"]), "content-type": "application/json"},
    )
    assert response.status_code == 413
    assert response.json()["code"] == "payload_too_large"
    limit = 1000 + 64 * 1024  # http_small's cap and the envelope
    assert body.pulled <= limit + 64 * 1024  # the chunk that passed the cap, no more


async def test_unauthenticated_100_mb_body_is_not_read(http: httpx.AsyncClient) -> None:
    body = Counted(100 * MB)
    response = await http.post("/http_small/runs", content=body)
    assert response.status_code == 401
    assert body.pulled <= 64 * 1024


@pytest.fixture
def live(store: MemoryStore) -> Iterator[str]:
    with app_server(create_app(store, workflows=WORKFLOWS, tokens=TABLE)) as url:
        yield url


@pytest.mark.parametrize("declared", [True, False], ids=["content-length", "chunked"])
async def test_100_mb_body_over_loopback_is_refused_without_reading_it(
    live: str, declared: bool
) -> None:
    body = Counted(100 * MB)
    headers = {**bearer(TOKENS["write"]), "content-type": "application/json"}
    if declared:
        headers["content-length"] = str(100 * MB)
    async with httpx.AsyncClient(base_url=live, timeout=DEADLINE) as client:
        try:
            response = await client.post("/http_wait/runs", content=body, headers=headers)
        except httpx.TransportError:
            response = None  # the server closed the connection behind its answer
    if response is not None:
        assert response.status_code == 413
        assert response.json()["code"] == "payload_too_large"
    # What loopback's socket buffers took before the server stopped reading, never the body.
    assert body.pulled < 20 * MB, body.pulled
    async with httpx.AsyncClient(base_url=live, timeout=DEADLINE) as client:
        assert (await client.get("/livez")).status_code == 200  # and the server is still fine
    await asyncio.sleep(0)


async def test_declared_100_mb_is_answered_413_before_any_body_byte(live: str) -> None:
    host, port = live.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(
        (
            f"POST /http_wait/runs HTTP/1.1\r\nHost: {host}\r\n"
            f"Authorization: Bearer {TOKENS['write']}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {100 * MB}\r\n\r\n"
        ).encode()
    )
    await writer.drain()  # the headers only: not one byte of the body is sent
    async with asyncio.timeout(DEADLINE):
        answer = await reader.read()  # to EOF: the server closes behind its answer
    writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413 ")
    assert b"connection: close" in head.lower()
    assert b'"code":"payload_too_large"' in body
