"""What a log read returns: raw batch bytes plus where they came from.

Kafka counterparts: ``FetchDataInfo`` and ``LogOffsetMetadata``. Immutable values, thread-safe.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from strom.storage.file_records import FileRegion

__all__ = ["LogOffsetMetadata", "FetchDataInfo", "FetchData"]


@dataclass(frozen=True, slots=True)
class LogOffsetMetadata:
    """An offset plus the segment and byte position of the batch that holds it (-1 when unknown)."""

    message_offset: int
    segment_base_offset: int = -1
    relative_position_in_segment: int = -1


@dataclass(frozen=True, slots=True)
class FetchDataInfo:
    """Whole record batches read straight from a segment file.

    ``records`` starts with the batch that contains ``fetch_offset`` (which may begin before it; clients skip
    records below their fetch offset) and holds only whole batches. It is empty when nothing is readable at
    ``fetch_offset`` (at the log end, at/after ``max_offset``, or when ``min_one_message`` was false and the first
    batch alone exceeds ``max_bytes``). A zero-copy read gives a :class:`FileRegion` of the segment file instead
    of bytes (same range, same rules).
    """

    fetch_offset: int
    records: bytes | FileRegion
    segment_base_offset: int = -1
    first_offset_position: int = -1
    first_batch_base_offset: int = -1

    @property
    def fetch_offset_metadata(self) -> LogOffsetMetadata:
        return LogOffsetMetadata(self.fetch_offset, self.segment_base_offset, self.first_offset_position)

    @property
    def size(self) -> int:
        return len(self.records)

    @classmethod
    def empty(cls, fetch_offset: int) -> FetchDataInfo:
        return cls(fetch_offset, b"")


FetchData = FetchDataInfo
"""Alias: ``LogSegment.read`` returns the same type."""
