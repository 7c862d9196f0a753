"""``MemoryRecords``: a sequence of concatenated record batches, plus the public record-layer API.

Layout: batches back to back, each starting with ``baseOffset INT64, batchLength INT32`` (the same 12
bytes for every magic), the magic byte at offset 16 deciding how the rest is read: 2 is a
``RecordBatch``; 0 and 1 are legacy message-set entries (``LegacyRecordBatch``, read-only). A Fetch
response may end with a partial batch; it is skipped silently (``valid_bytes`` stops before it).

Kafka counterpart: ``org.apache.kafka.common.record.MemoryRecords`` and ``ByteBufferLogInputStream``.
This module also re-exports the builder/reader API so callers can ``from strom.record.records import``
everything. Views only; the buffer must not change while in use.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

from strom.common.error_codes import CorruptMessageError
from strom.record.batch import (
    ControlRecordType,
    Header,
    Record,
    RecordBatch,
    TimestampType,
    parse_control_record_key,
    parse_end_txn_marker_value,
)
from strom.record.builder import (
    MemoryRecordsBuilder,
    record_size,
    record_size_upper_bound,
    upper_bound_size,
)
from strom.record.compression import CompressionType
from strom.record.control import build_control_batch
from strom.record.header import LOG_OVERHEAD, MAGIC_OFFSET
from strom.record.legacy import LEGACY_RECORD_OVERHEAD_V0, LegacyRecordBatch
from strom.record.split import split_into_builders, split_records

__all__ = [
    "MemoryRecords",
    "AnyBatch",
    "Record",
    "Header",
    "RecordBatch",
    "LegacyRecordBatch",
    "TimestampType",
    "ControlRecordType",
    "CompressionType",
    "MemoryRecordsBuilder",
    "build_control_batch",
    "record_size",
    "record_size_upper_bound",
    "upper_bound_size",
    "split_records",
    "split_into_builders",
    "parse_control_record_key",
    "parse_end_txn_marker_value",
]

AnyBatch = RecordBatch | LegacyRecordBatch
_I = struct.Struct(">i")


class MemoryRecords:
    """Iterate the batches in ``buf`` (bytes, bytearray or memoryview)."""

    __slots__ = ("_buf",)

    def __init__(self, buf: bytes | bytearray | memoryview) -> None:
        self._buf = buf

    @property
    def buffer(self) -> bytes | bytearray | memoryview:
        return self._buf

    @property
    def size_in_bytes(self) -> int:
        """All bytes, a trailing partial batch included."""
        return len(self._buf)

    def __len__(self) -> int:
        return len(self._buf)

    def _spans(self) -> Iterator[tuple[int, int, int]]:
        """``(pos, size, magic)`` of every complete batch; raises on impossible sizes or magic."""
        buf = self._buf
        n = len(buf)
        pos = 0
        while n - pos >= LOG_OVERHEAD:
            (length,) = _I.unpack_from(buf, pos + 8)
            if length < LEGACY_RECORD_OVERHEAD_V0:
                raise CorruptMessageError(
                    f"batch at position {pos} has size {length}, below the minimum record overhead "
                    f"{LEGACY_RECORD_OVERHEAD_V0}"
                )
            size = length + LOG_OVERHEAD
            if n - pos < size:
                return  # partial trailing batch
            magic = buf[pos + MAGIC_OFFSET]
            if magic > 2:  # buf[...] is unsigned, so negative magics show up as > 127
                raise CorruptMessageError(f"batch at position {pos} has unsupported magic {magic}")
            yield pos, size, magic
            pos += size

    def batches(self) -> Iterator[AnyBatch]:
        """Every complete batch in order (``RecordBatch`` for v2, ``LegacyRecordBatch`` for v0/v1)."""
        buf = self._buf
        for pos, _size, magic in self._spans():
            yield RecordBatch(buf, pos) if magic == 2 else LegacyRecordBatch(buf, pos)

    __iter__ = batches

    def records(self, skip_control: bool = False) -> Iterator[Record]:
        """All records of all complete batches (control records too unless ``skip_control``)."""
        for batch in self.batches():
            if skip_control and batch.is_control:
                continue
            yield from batch.records()

    @property
    def valid_bytes(self) -> int:
        """Bytes taken by complete batches (Kafka's ``validBytes``); CRCs are not checked."""
        total = 0
        for _pos, size, _magic in self._spans():
            total += size
        return total

    @property
    def has_partial_batch(self) -> bool:
        """True when bytes are left after the last complete batch."""
        return self.valid_bytes < len(self._buf)

    def first_batch_size(self) -> int | None:
        """Size of the first batch from its length field, or ``None`` with fewer than 12 bytes."""
        if len(self._buf) < LOG_OVERHEAD:
            return None
        return _I.unpack_from(self._buf, 8)[0] + LOG_OVERHEAD

    def ensure_valid(self) -> None:
        """Validate every complete batch (sizes and CRC); raise ``CorruptMessageError`` on the first bad one."""
        for batch in self.batches():
            batch.ensure_valid()

    def __repr__(self) -> str:
        return f"MemoryRecords(size={len(self._buf)})"
