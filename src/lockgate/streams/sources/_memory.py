"""A source of records held in memory, for tests and examples: :class:`InMemorySource`."""

from __future__ import annotations

import threading
from typing import Generic, TypeVar

from lockgate._errors import ConfigurationError
from lockgate.workflow._source import Batch

T = TypeVar("T")

#: The one partition an in-memory source has.
PARTITION = 0


def check_offset(what: str, offset: object) -> int:
    """``offset`` when it is an offset (an integer >= 0), else :class:`TypeError` or
    :class:`ValueError` naming ``what`` it is."""
    if isinstance(offset, bool) or not isinstance(offset, int):
        raise TypeError(f"{what} must be an integer offset, not {type(offset).__name__}")
    if offset < 0:
        raise ValueError(f"{what} must be >= 0, got {offset}")
    return offset


def check_timeout(timeout_ms: object) -> int:
    if isinstance(timeout_ms, bool) or not isinstance(timeout_ms, int):
        raise TypeError(f"poll(timeout_ms=...) takes milliseconds as an int, not {timeout_ms!r}")
    if timeout_ms < 0:
        raise ValueError(f"poll(timeout_ms=...) must be >= 0, got {timeout_ms}")
    return timeout_ms


class InMemorySource(Generic[T]):
    """The ``records`` given, as one partition (0) of ``source_id``, handed out
    ``batch_size`` at a time.

    :meth:`poll` never waits: it returns the next batch, or None once every record was
    handed out. Reading starts at the committed offset (0 when none was committed) unless
    :meth:`seek` moved it; commits are kept in memory, and :meth:`inject_committed` sets one
    directly, as a test does to stand for progress made before a restart.
    """

    def __init__(
        self,
        *,
        source_id: str = "test-topic",
        records: list[T] | None = None,
        batch_size: int = 10,
    ) -> None:
        if not isinstance(source_id, str):
            raise TypeError(f"InMemorySource(source_id=...) must be a str, not {source_id!r}")
        if not source_id:
            raise ConfigurationError("InMemorySource(source_id=...) must not be empty")
        if records is not None and not isinstance(records, list):
            raise TypeError(
                f"InMemorySource(records=...) must be a list, not {type(records).__name__}"
            )
        if isinstance(batch_size, bool) or not isinstance(batch_size, int):
            raise TypeError(f"InMemorySource(batch_size=...) must be an int, not {batch_size!r}")
        if batch_size < 1:
            raise ConfigurationError(
                f"InMemorySource(batch_size=...) must be at least 1, got {batch_size}"
            )
        self.source_id = source_id
        self.batch_size = batch_size
        self._records: list[T] = list(records or [])
        self._committed: int | None = None
        #: The next offset to hand out; None until a poll or a seek fixes it.
        self._cursor: int | None = None
        self._lock = threading.Lock()

    def poll(self, timeout_ms: int = 5000) -> Batch[T] | None:
        """The next ``batch_size`` records (fewer at the end), or None when none is left."""
        check_timeout(timeout_ms)
        with self._lock:
            start = self._cursor if self._cursor is not None else (self._committed or 0)
            records = self._records[start : start + self.batch_size]
            self._cursor = start + len(records)
        if not records:
            return None
        return Batch(self.source_id, PARTITION, start, records)

    def seek(self, source_id: str, partition: int, offset: int) -> None:
        """Hand out records from ``offset`` on (past the end: none)."""
        self._check(source_id, partition)
        offset = check_offset("seek offset", offset)
        with self._lock:
            self._cursor = offset

    def commit(self, source_id: str, partition: int, offset: int) -> None:
        self._check(source_id, partition)
        offset = check_offset("commit offset", offset)
        with self._lock:
            self._committed = offset

    def get_committed(self, source_id: str, partition: int) -> int | None:
        self._check(source_id, partition)
        with self._lock:
            return self._committed

    def partitions(self) -> list[tuple[str, int]]:
        return [(self.source_id, PARTITION)]

    def inject_committed(self, source_id: str, partition: int, offset: int) -> None:
        """Test helper: set the committed offset directly (a poll that follows, with no seek
        or poll before it, starts there). Not a commit: a subclass's ``commit`` is not called."""
        self._check(source_id, partition)
        offset = check_offset("committed offset", offset)
        with self._lock:
            self._committed = offset

    @property
    def remaining(self) -> int:
        """How many records are left to hand out."""
        with self._lock:
            start = self._cursor if self._cursor is not None else (self._committed or 0)
            return max(0, len(self._records) - start)

    def _check(self, source_id: str, partition: int) -> None:
        if source_id != self.source_id:
            raise ValueError(
                f"this InMemorySource is {self.source_id!r}; it has no source {source_id!r}"
            )
        if partition != PARTITION:
            raise ValueError(
                f"InMemorySource {self.source_id!r} has partition {PARTITION} only, "
                f"not {partition!r}"
            )

    def __repr__(self) -> str:
        return (
            f"InMemorySource(source_id={self.source_id!r}, records={len(self._records)}, "
            f"batch_size={self.batch_size})"
        )
