"""The committed docs/openapi.json is the document the app serves.

Regenerate it with ``python -m lockgate.http.openapi > docs/openapi.json``."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from http_support import http_workflows
from lockgate.http import create_app
from lockgate.http.openapi import render
from lockgate.stores import MemoryStore

COMMITTED = Path(__file__).resolve().parents[1] / "docs" / "openapi.json"


def test_committed_document_is_what_the_generator_prints() -> None:
    assert COMMITTED.read_text() == render(), (
        "docs/openapi.json drifted from the app: run "
        "`python -m lockgate.http.openapi > docs/openapi.json`"
    )


@pytest.mark.parametrize("workflows", [(), "served"])
async def test_served_document_equals_the_committed_one(workflows: object) -> None:
    served = http_workflows().WORKFLOWS if workflows == "served" else ()
    app = create_app(MemoryStore(), workflows=served)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://lockgate") as client:
        document = (await client.get("/openapi.json")).json()
    assert document == json.loads(COMMITTED.read_text())


def test_every_error_answer_is_documented_as_a_problem() -> None:
    document = json.loads(COMMITTED.read_text())
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            if path in ("/livez", "/readyz", "/metrics"):
                continue
            for status in ("401", "403", "404", "422"):
                content = operation["responses"][status]["content"]
                assert "application/problem+json" in content, (method, path, status)
