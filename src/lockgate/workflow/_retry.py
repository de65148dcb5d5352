"""Retry policy for steps."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from lockgate._errors import (
    ConfigurationError,
    Fatal,
    NestedDurableOperationError,
    Poison,
    StepResultTypeError,
    Transient,
    UnboundContextError,
)

_PRIVATE_RNG = random.Random()
#: Bad input, broken invariants and mistakes in the code: retrying runs into them again.
_NEVER_RETRIED = (
    Poison,
    Fatal,
    StepResultTypeError,
    NestedDurableOperationError,
    UnboundContextError,
)


@dataclass(frozen=True)
class RetryPolicy:
    """How a failing step is retried.

    ``max_attempts`` counts the first try (1 means no retry). The delay after attempt ``n`` is
    ``initial_backoff * backoff_multiplier ** (n - 1)``, capped at ``max_backoff``; ``jitter`` is
    the randomized fraction of it. ``retryable`` limits retries to those exception types (None
    retries every ``Exception``). :class:`Transient` is always retried, :class:`Poison` and
    :class:`Fatal` never are, whatever ``retryable`` says.
    """

    max_attempts: int = 3
    initial_backoff: float = 0.1
    max_backoff: float = 30.0
    backoff_multiplier: float = 2.0
    retryable: tuple[type[BaseException], ...] | None = None
    jitter: float = 0.5

    def __post_init__(self) -> None:
        if (
            isinstance(self.max_attempts, bool)
            or not isinstance(self.max_attempts, int)
            or self.max_attempts < 1
        ):
            raise ConfigurationError(
                f"RetryPolicy(max_attempts=...) must be an integer >= 1, got {self.max_attempts!r}"
            )
        for name in ("initial_backoff", "max_backoff"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
                raise ConfigurationError(
                    f"RetryPolicy({name}=...) must be a finite number >= 0, got {value!r}"
                )
        if (
            not isinstance(self.backoff_multiplier, int | float)
            or not math.isfinite(self.backoff_multiplier)
            or self.backoff_multiplier < 1
        ):
            raise ConfigurationError(
                f"RetryPolicy(backoff_multiplier=...) must be a finite number >= 1, "
                f"got {self.backoff_multiplier!r}"
            )
        if not isinstance(self.jitter, int | float) or not 0 <= self.jitter <= 1:
            raise ConfigurationError("RetryPolicy(jitter=...) must be between 0 and 1")
        if self.retryable is not None and not all(
            isinstance(t, type) and issubclass(t, BaseException) for t in self.retryable
        ):
            raise ConfigurationError(
                "RetryPolicy(retryable=...) must be a tuple of exception types"
            )

    def should_retry(self, attempt: int, exc: BaseException) -> bool:
        """True if failed ``attempt`` (1-based) should be retried for ``exc``."""
        if attempt >= self.max_attempts:
            return False
        if isinstance(exc, _NEVER_RETRIED):
            return False
        if isinstance(exc, Transient):
            return True
        if self.retryable is None:
            return isinstance(exc, Exception)
        return isinstance(exc, self.retryable)

    def backoff_seconds(self, attempt: int, rng: random.Random | None = None) -> float:
        """Delay before the attempt after ``attempt`` (1-based), jittered after the cap."""
        delay = min(
            self.max_backoff, self.initial_backoff * self.backoff_multiplier ** max(0, attempt - 1)
        )
        draw = (rng or _PRIVATE_RNG).random()
        return delay * (1 - self.jitter) + draw * delay * self.jitter


DEFAULT_RETRY = RetryPolicy()
