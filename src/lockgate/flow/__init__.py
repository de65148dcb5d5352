"""Flow control: per-key concurrency limits, rate limits, batching and debouncing."""

from lockgate.flow._policies import Collect, Debounce, Limit, Rate

__all__ = ["Collect", "Debounce", "Limit", "Rate"]
