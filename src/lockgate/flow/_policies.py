"""Flow-control declarations. They are validated here and stamped on runs at submit; the store
enforces ``Limit`` and ``Rate`` at claim time, and buffers ``Collect`` and ``Debounce`` events
until a worker's trigger loop (or ``client.trigger`` completing a batch) fires their run."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from lockgate._errors import ConfigurationError

KeySpec = str | Callable[[dict[str, Any]], str]


def _check_key(policy: str, key: object) -> None:
    if isinstance(key, str):
        if not key:
            raise ConfigurationError(f"{policy}(key=...) must name a parameter, not ''")
    elif not callable(key):
        raise ConfigurationError(
            f"{policy}(key=...) must be a parameter name or a function of the params, "
            f"not {type(key).__name__}"
        )


def _resolve(key: KeySpec, params: Mapping[str, Any]) -> str:
    if isinstance(key, str):
        value = params.get(key)
        return "" if value is None else str(value)
    resolved = key(dict(params))
    if not isinstance(resolved, str):
        raise TypeError(f"a key function must return a string, got {type(resolved).__name__}")
    return resolved


def _positive_int(policy: str, field_name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(
            f"{policy}({field_name}=...) must be an integer >= 1, got {value!r}"
        )


def _positive_number(policy: str, field_name: str, value: object) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise ConfigurationError(
            f"{policy}({field_name}=...) must be a finite number > 0, got {value!r}"
        )


@dataclass(frozen=True)
class Limit:
    """At most ``max`` runs sharing a key execute at once; a suspended run frees its slot."""

    key: KeySpec
    max: int

    def __post_init__(self) -> None:
        _check_key("Limit", self.key)
        _positive_int("Limit", "max", self.max)

    def resolve(self, params: Mapping[str, Any]) -> str:
        """The concrete key for a run's params; a missing parameter resolves to ``""``."""
        return _resolve(self.key, params)


@dataclass(frozen=True)
class Rate:
    """A token bucket per key: ``per_second`` refill, ``burst`` capacity (default
    ``ceil(per_second)``, at least 1). Each claim spends one token."""

    key: KeySpec
    per_second: float
    burst: int | None = None
    capacity: int = field(init=False)

    def __post_init__(self) -> None:
        _check_key("Rate", self.key)
        _positive_number("Rate", "per_second", self.per_second)
        if self.burst is not None:
            _positive_int("Rate", "burst", self.burst)
        capacity = self.burst if self.burst is not None else max(1, math.ceil(self.per_second))
        object.__setattr__(self, "capacity", capacity)

    def resolve(self, params: Mapping[str, Any]) -> str:
        return _resolve(self.key, params)


#: A Kafka topic name: what brokers accept.
_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,245}")  # room for the dead-letter topic's ".dlq"


def _check_topic(policy: str, topic: object) -> None:
    if topic is None:
        return
    if not isinstance(topic, str) or not _TOPIC.fullmatch(topic) or topic in (".", ".."):
        raise ConfigurationError(
            f"{policy}(topic=...) must be a Kafka topic name, 1-245 of A-Z a-z 0-9 . _ - "
            f"(not . or ..), got {topic!r}"
        )


@dataclass(frozen=True)
class Collect:
    """Buffer events per key; one run when ``max_events`` arrive or ``window_seconds`` pass
    after the first, whichever comes first. The run gets ``key``, ``events`` and ``count``.
    With a Kafka journal the events live on ``topic`` (``{topic_prefix}.trigger.{name}`` when
    None)."""

    key: KeySpec
    max_events: int
    window_seconds: float
    topic: str | None = None

    def __post_init__(self) -> None:
        _check_key("Collect", self.key)
        _positive_int("Collect", "max_events", self.max_events)
        _positive_number("Collect", "window_seconds", self.window_seconds)
        _check_topic("Collect", self.topic)

    def resolve(self, event: Mapping[str, Any]) -> str:
        return _resolve(self.key, event)


@dataclass(frozen=True)
class Debounce:
    """Buffer events per key; one run once no event arrived for ``window_seconds``. With
    ``max_wait_seconds``, a key that never goes quiet still fires that long after its first
    buffered event, so a steady stream cannot postpone its run for ever. ``topic`` as for
    :class:`Collect`."""

    key: KeySpec
    window_seconds: float
    max_wait_seconds: float | None = None
    topic: str | None = None

    def __post_init__(self) -> None:
        _check_key("Debounce", self.key)
        _positive_number("Debounce", "window_seconds", self.window_seconds)
        if self.max_wait_seconds is not None:
            _positive_number("Debounce", "max_wait_seconds", self.max_wait_seconds)
        _check_topic("Debounce", self.topic)

    def resolve(self, event: Mapping[str, Any]) -> str:
        return _resolve(self.key, event)
