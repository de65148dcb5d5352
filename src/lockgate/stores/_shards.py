"""The shard rule, one explicit function that every backend and every producer shares: which
shard a run belongs to (its Limit's key, else its Rate's, else its run id, hashed). Valkey keys
a shard's keys with it and Kafka picks the journal partition with it (partition = shard), so a
producer in any language that follows :func:`shard_for` agrees with both."""

from __future__ import annotations

import hashlib


def shard_for(key: str, shard_count: int) -> int:
    """The shard of shard key ``key``: the first 8 bytes of the SHA-1 of its UTF-8 encoding,
    read as a big-endian unsigned integer, modulo ``shard_count``. Spelled out (never Python's
    salted ``hash()``) so every process, and a client in any language, agrees."""
    digest = hashlib.sha1(key.encode(), usedforsecurity=False).digest()
    return int.from_bytes(digest[:8], "big") % shard_count


def shard_key(concurrency_key: str | None, rate_key: str | None, fallback: str) -> str:
    """The key a run's shard is hashed from: its Limit's key, else its Rate's, else
    ``fallback`` (its run id, or a fired run's trigger key)."""
    if concurrency_key is not None:
        return concurrency_key
    return rate_key if rate_key is not None else fallback
