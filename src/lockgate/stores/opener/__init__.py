"""Opening a store from its URL: above every backend, since it names each one's class."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lockgate._lazy import lazy_exports

if TYPE_CHECKING:
    from lockgate.stores.opener._open import is_valkey_url, open_store

__all__ = ["is_valkey_url", "open_store"]


if not TYPE_CHECKING:  # a type checker sees the imports above, not a __getattr__
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "lockgate.stores.opener._open": ("is_valkey_url", "open_store"),
        },
    )
