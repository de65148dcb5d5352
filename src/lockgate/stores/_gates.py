"""Flow-control gates as every store applies them at claim time: a run's stamped gates, token
buckets, and the fair order in which queued runs are offered to a claim."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Gates:
    """The gates a run was stamped with at submit (all None: ungated)."""

    concurrency_key: str | None = None
    concurrency_max: int | None = None
    rate_key: str | None = None
    rate_per_second: float | None = None
    rate_burst: int | None = None

    @property
    def limited(self) -> bool:
        return self.concurrency_key is not None and self.concurrency_max is not None

    @property
    def rated(self) -> bool:
        return self.rate_key is not None and self.rate_per_second is not None

    def to_dict(self) -> dict[str, Any]:
        return {
            "concurrency_key": self.concurrency_key,
            "concurrency_max": self.concurrency_max,
            "rate_key": self.rate_key,
            "rate_per_second": self.rate_per_second,
            "rate_burst": self.rate_burst,
        }


def fair_bucket(owner: str | None, gates: Gates) -> str:
    """The bucket claims rotate across: one per owner and set of gates, so a tenant with
    thousands of queued runs does not starve one with a few. The runs of one bucket share every
    gate, so when one of them is refused, all of them are, and a claim moves on."""
    parts = (
        owner,
        gates.concurrency_key,
        gates.concurrency_max,
        gates.rate_key,
        gates.rate_per_second,
        gates.rate_burst,
    )
    return "\x1f".join("" if part is None else str(part) for part in parts)


def refill(tokens: float, updated_at: float, now: float, gates: Gates) -> float:
    """A token bucket's tokens at ``now``: refilled continuously, capped at the burst."""
    assert gates.rate_per_second is not None
    capacity = float(gates.rate_burst or 1)
    return min(capacity, tokens + max(0.0, now - updated_at) * gates.rate_per_second)
