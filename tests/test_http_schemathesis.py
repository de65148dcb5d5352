"""Schemathesis against the live server's OpenAPI document: every operation, a bounded number
of generated requests each, with a token holding every scope. No answer may be a 5xx, and
every answer must conform to the document (status, content type, headers, body schema)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from http_support import app_server, http_workflows
from lockgate.http import TokenTable, create_app
from lockgate.stores import MemoryStore

TOKEN = "schemathesis-token"
#: Generated requests per operation.
EXAMPLES = 12
NAMES = ["http_wait", "http_small", "http_collect", "http_limited", "http_ask"]
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]


@pytest.fixture(scope="module")
def live() -> Iterator[str]:
    store = MemoryStore()
    app = create_app(
        store,
        workflows=http_workflows().WORKFLOWS,
        tokens=TokenTable.parse(f"read,write,admin {TOKEN}"),
    )
    with app_server(app) as url:
        yield url


def test_no_5xx_and_every_answer_conforms(live: str) -> None:
    api = schemathesis.openapi.from_url(f"{live}/openapi.json")
    operations = [result.ok() for result in api.get_all_operations()]
    served = httpx.get(f"{live}/openapi.json").json()["paths"]
    assert len(operations) == sum(len(ops) for ops in served.values()) == 17
    auth = {"Authorization": f"Bearer {TOKEN}"}
    params = {
        "http_wait": {"order": "a"},
        "http_small": {},
        "http_limited": {"tenant": "t", "record": "/dev/null"},
        "http_ask": {"question": "q"},
    }
    runs = {
        name: httpx.post(f"{live}/{name}/runs", json=body, headers=auth).json()["run_id"]
        for name, body in params.items()
    }
    runs["http_collect"] = "none-yet"
    tried: list[str] = []
    for operation in operations:

        @given(case=operation.as_strategy(), name=st.sampled_from(NAMES), real=st.booleans())
        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            derandomize=True,
            database=None,
            phases=[Phase.explicit, Phase.generate],  # a failure is reported, not shrunk
        )
        def conforms(case: Any, name: str, real: bool) -> None:
            # Aim most requests at served workflows and runs that exist, so the handlers past
            # the 404s are what is explored.
            if case.path_parameters and "name" in case.path_parameters and real:
                case.path_parameters["name"] = name
                if "run_id" in case.path_parameters:
                    case.path_parameters["run_id"] = runs[name]
            # Long polls and update waits kept short (an update's default wait is 30 s).
            query = dict(case.query or {})
            if "/updates/" in case.operation.path:
                query.setdefault("timeout", 0.1)
            for slow in ("wait", "timeout"):
                if isinstance(query.get(slow), int | float):
                    query[slow] = min(query[slow], 0.2) or 0.05
            case.query = query
            case.call_and_validate(headers={"Authorization": f"Bearer {TOKEN}"}, checks=CHECKS)

        conforms()
        tried.append(operation.label)
    assert len(tried) == len(operations)
