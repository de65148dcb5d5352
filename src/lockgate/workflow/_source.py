"""What a workflow consumes a stream from: the :class:`Source` protocol and its :class:`Batch`
(values a body receives, so they live in `workflow/`; `streams/sources/` implements them), and
the :class:`StreamProgress` ``ctx.consume`` returns.

Offsets follow Kafka's convention throughout: a committed offset, like a batch's
:attr:`Batch.next_offset`, is the offset of the next record to read, not of the last one read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar, runtime_checkable

T = TypeVar("T")


@dataclass(frozen=True)
class Batch(Generic[T]):
    """Records of one partition of a source, in order: ``offset`` is where the batch starts
    (its first record's offset) and :attr:`next_offset` where the next batch of the partition
    starts.

    ``end_offset`` is given when the batch covers more offsets than it holds records (a Kafka
    batch whose undecodable records went to the dead-letter topic, or a topic with gaps in its
    offsets); None means the records sit at consecutive offsets from ``offset``.
    """

    source_id: str
    partition: int
    offset: int
    records: list[T]
    end_offset: int | None = None

    def __post_init__(self) -> None:
        for what in ("partition", "offset"):
            value = getattr(self, what)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"Batch {what} must be an integer >= 0, got {value!r}")
        if not isinstance(self.records, list):
            raise TypeError(f"Batch records must be a list, not {type(self.records).__name__}")
        end = self.end_offset
        if end is not None and (
            isinstance(end, bool) or not isinstance(end, int) or end < self.offset
        ):
            raise ValueError(
                f"Batch end_offset must be an integer >= offset ({self.offset}), got {end!r}"
            )

    @property
    def next_offset(self) -> int:
        """The offset after the batch: what a commit of the batch records."""
        return self.end_offset if self.end_offset is not None else self.offset + len(self.records)


@runtime_checkable
class Source(Protocol[T]):
    """A stream ``ctx.consume`` reads in batches, one partition per batch, and whose progress
    it commits.

    The engine calls :meth:`seek` when a run resumes, so the source restarts where the run's
    journal says the stream stands (its committed offsets may lag behind), and :meth:`commit`
    after each batch's step is journaled. A source is called from worker threads, one call at
    a time.
    """

    #: Names the stream's records (a topic, for Kafka); the batches carry it.
    source_id: str

    def poll(self, timeout_ms: int = 5000) -> Batch[T] | None:
        """The next batch, or None when no record came within ``timeout_ms``."""
        ...

    def seek(self, source_id: str, partition: int, offset: int) -> None:
        """Read ``partition`` from ``offset`` on, dropping what was read ahead of it."""
        ...

    def commit(self, source_id: str, partition: int, offset: int) -> None:
        """Record that ``partition`` was handled up to (not including) ``offset``."""
        ...

    def get_committed(self, source_id: str, partition: int) -> int | None:
        """The offset last committed for ``partition``, or None when none was."""
        ...

    def partitions(self) -> list[tuple[str, int]]:
        """Every ``(source_id, partition)`` the source reads."""
        ...


@dataclass(frozen=True)
class StreamProgress:
    """What one ``ctx.consume`` call handled: how many batches, how many records in them, and
    per ``(source_id, partition)`` the offset after the last batch handled. It is made from
    the journaled outcomes only, so a replay of the run returns the same value."""

    batches: int
    records: int
    positions: dict[tuple[str, int], int] = field(default_factory=dict)
