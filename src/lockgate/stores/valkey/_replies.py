"""Valkey's replies read back whatever the client made of them (bytes or text, pairs or a flat
list), and a script's refusal (``LG:<CODE> <detail>``) as the lockgate error it stands for."""

from __future__ import annotations

from typing import Any

from lockgate._errors import (
    DuplicateRunError,
    EventAfterTerminal,
    IdempotencyConflict,
    LockgateError,
    LockLost,
    RunFinishedError,
    RunGatedError,
    RunNotFoundError,
    RunOwnedError,
)
from lockgate.stores.valkey._keys import split_member


def script_error(message: str) -> LockgateError:
    """A script's ``LG:<CODE> <detail>`` reply as the lockgate error it stands for."""
    code, _, detail = message.partition(" ")
    code = code.removeprefix("LG:")
    if code == "NOT_FOUND":
        return RunNotFoundError(*split_member(detail))
    if code == "DUPLICATE":
        return DuplicateRunError(*split_member(detail))
    if code == "LOCK_LOST":
        return LockLost(detail)
    if code == "AFTER_TERMINAL":
        return EventAfterTerminal(detail)
    if code == "FINISHED":
        return RunFinishedError(detail)
    if code == "OWNED":
        return RunOwnedError(detail)
    if code == "GATED":
        return RunGatedError(detail)
    if code == "IDEMPOTENCY":
        return IdempotencyConflict(detail)
    return LockgateError(message)


def decode_hash(raw: Any) -> dict[str, str]:
    if isinstance(raw, dict):
        return {as_text(k): as_text(v) for k, v in raw.items()}
    items = list(raw)
    return {as_text(items[i]): as_text(items[i + 1]) for i in range(0, len(items), 2)}


def scored(raw: Any) -> dict[str, float]:
    """A ``WITHSCORES`` reply as member -> score, whether the client paired it up or not."""
    items = list(raw)
    if items and isinstance(items[0], list | tuple):
        return {as_text(member): float(score) for member, score in items}
    return {as_text(items[i]): float(items[i + 1]) for i in range(0, len(items), 2)}


def as_text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def config_value(raw: Any, name: str) -> str:
    """One parameter of a ``CONFIG GET`` answer, paired up by the client or not."""
    if isinstance(raw, dict):
        answer = {as_text(k): v for k, v in raw.items()}
    else:
        items = list(raw)
        answer = {as_text(items[i]): items[i + 1] for i in range(0, len(items) - 1, 2)}
    return as_text(answer.get(name, "noeviction"))
