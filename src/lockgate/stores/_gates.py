"""Flow-control gates as every store applies them at claim time: a run's stamped gates, token
buckets, and the fair order in which queued runs are offered to a claim."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, NamedTuple


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
    gate, so when one of them is refused, all of them are, and a claim moves on.

    The bucket is the parts as a JSON list: two different owners or sets of gates never give
    one bucket, whatever their text holds (parts joined with a separator did, when an owner or
    a key held the separator)."""
    parts = [
        owner,
        gates.concurrency_key,
        gates.concurrency_max,
        gates.rate_key,
        gates.rate_per_second,
        gates.rate_burst,
    ]
    return json.dumps(parts, separators=(",", ":"))


def refill(tokens: float, updated_at: float, now: float, gates: Gates) -> float:
    """A token bucket's tokens at ``now``: refilled continuously, capped at the burst."""
    assert gates.rate_per_second is not None
    capacity = float(gates.rate_burst or 1)
    return min(capacity, tokens + max(0.0, now - updated_at) * gates.rate_per_second)


#: Seconds added to the wait for a token, so a claim made that long after the refusal finds a
#: whole token despite rounding: epoch seconds near 1.7e9 are doubles 2.4e-7 s apart.
TOKEN_WAIT_SLACK = 1e-6


def token_wait(tokens: float, gates: Gates) -> float | None:
    """Seconds until a bucket holding ``tokens`` (< 1) has one whole token, or None when it
    never refills (a rate of 0)."""
    assert gates.rate_per_second is not None
    if gates.rate_per_second <= 0:
        return None
    return max(0.0, 1.0 - tokens) / gates.rate_per_second + TOKEN_WAIT_SLACK


class Refusal(NamedTuple):
    """Why a gate refused a claim: ``reason`` for messages, and for a ``Rate`` refusal the
    seconds until its bucket has a token (None for a ``Limit`` refusal)."""

    reason: str
    next_token_in: float | None = None


def sooner(first: float | None, second: float | None) -> float | None:
    """The earlier of two optional waits (None is never)."""
    if first is None:
        return second
    if second is None:
        return first
    return min(first, second)


@dataclass(frozen=True)
class WaitReason:
    """Why a queued run has not started: ``gate`` is ``"limit"`` (its key's slots are all
    taken), ``"rate"`` (its key's bucket is empty) or ``"worker"`` (nothing gates it: it waits
    for a worker to claim it). ``position`` is its place among the queued runs of its bucket
    (1 is next)."""

    gate: str
    position: int
    key: str | None = None
    running: int | None = None
    max: int | None = None
    next_token_in: float | None = None

    def describe(self, param: str | None = None) -> str:
        """One line, e.g. ``Limit tenant_id="acme" 2/2 running, 7th in line``."""
        where = f"{_ordinal(self.position)} in line"
        named = f'{param}="{self.key}"' if param else f'"{self.key}"'
        if self.gate == "limit":
            return f"Limit {named} {self.running}/{self.max} running, {where}"
        if self.gate == "rate":
            return f"Rate {named} next token in {self.next_token_in:.2f}s, {where}"
        return f"a worker to claim it, {where}"


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def wait_reason(gates: Gates, position: int, holding: int, tokens: float | None) -> WaitReason:
    """The reason a queued run with ``gates`` waits, given its key's slots held and its
    bucket's tokens now (None when it has no Rate)."""
    if gates.limited and gates.concurrency_max is not None and holding >= gates.concurrency_max:
        return WaitReason("limit", position, gates.concurrency_key, holding, gates.concurrency_max)
    if gates.rated and tokens is not None and tokens < 1:
        assert gates.rate_per_second is not None
        return WaitReason(
            "rate", position, gates.rate_key, next_token_in=(1 - tokens) / gates.rate_per_second
        )
    return WaitReason("worker", position)
