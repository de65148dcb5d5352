"""Print the API's OpenAPI document: ``python -m lockgate.http.openapi > docs/openapi.json``.

The document does not depend on the store or the workflows served, so it is built here on an
in-memory store with none."""

from __future__ import annotations

import json
from typing import Any


def document() -> dict[str, Any]:
    from lockgate.http import create_app
    from lockgate.stores import MemoryStore

    spec: dict[str, Any] = create_app(MemoryStore()).openapi()
    return spec


def render() -> str:
    return json.dumps(document(), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    print(render(), end="")
