"""Flow control: per-key concurrency limits, rate limits, batching and debouncing."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lockgate._lazy import lazy_exports

if TYPE_CHECKING:
    from lockgate.flow._policies import Collect, Debounce, Limit, Rate

__all__ = ["Collect", "Debounce", "Limit", "Rate"]


if not TYPE_CHECKING:  # a type checker sees the imports above, not a __getattr__
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "lockgate.flow._policies": ("Collect", "Debounce", "Limit", "Rate"),
        },
    )
