"""The fixed 61-byte RecordBatch v2 header: layout, parsing and in-place rewrites.

Layout (big-endian)::

    0  baseOffset INT64          8  batchLength INT32       12 partitionLeaderEpoch INT32
    16 magic INT8                17 crc UINT32 (CRC-32C of bytes 21..end)
    21 attributes INT16          23 lastOffsetDelta INT32   27 baseTimestamp INT64
    35 maxTimestamp INT64        43 producerId INT64        51 producerEpoch INT16
    53 baseSequence INT32        57 recordsCount INT32      61 records...

Kafka counterpart: ``DefaultRecordBatch``'s header accessors. Pure functions, no I/O.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from strom.record.crc import crc32c

__all__ = [
    "HEADER_SIZE",
    "LOG_OVERHEAD",
    "MAGIC_OFFSET",
    "CRC_OFFSET",
    "ATTRIBUTES_OFFSET",
    "BatchHeader",
    "parse_header",
    "batch_size_at",
    "compute_crc",
    "set_base_offset",
    "set_partition_leader_epoch",
    "set_max_timestamp_log_append",
    "COMPRESSION_MASK",
    "TIMESTAMP_TYPE_MASK",
    "TRANSACTIONAL_FLAG",
    "CONTROL_FLAG",
    "NO_PRODUCER_ID",
    "NO_SEQUENCE",
]

HEADER_SIZE = 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: what precedes the length-counted part
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
MAX_TIMESTAMP_OFFSET = 35

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_FLAG = 0x10
CONTROL_FLAG = 0x20
NO_PRODUCER_ID = -1
NO_SEQUENCE = -1

_HEADER = struct.Struct(">qiibIhiqqqhii")
_QI = struct.Struct(">qi")
_Q = struct.Struct(">q")
_I = struct.Struct(">i")
_U = struct.Struct(">I")


class BatchHeader(NamedTuple):
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        """Whole batch size in bytes, header included."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_FLAG)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_FLAG)

    @property
    def timestamp_type(self) -> int:
        return 1 if self.attributes & TIMESTAMP_TYPE_MASK else 0

    @property
    def last_sequence(self) -> int:
        if self.base_sequence < 0:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) & 0x7FFFFFFF


def parse_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Parse the 61-byte header at ``pos`` (caller checks ``len(buf) - pos >= HEADER_SIZE``)."""
    return BatchHeader._make(_HEADER.unpack_from(buf, pos))


def batch_size_at(buf: bytes | bytearray | memoryview, pos: int = 0) -> tuple[int, int]:
    """Return ``(base_offset, whole_batch_size)`` from the first 12 bytes at ``pos``."""
    base, length = _QI.unpack_from(buf, pos)
    return base, length + LOG_OVERHEAD


def compute_crc(buf: bytes | bytearray | memoryview, pos: int = 0, size: int | None = None) -> int:
    """CRC-32C over attributes..end of the batch starting at ``pos``."""
    if size is None:
        size = batch_size_at(buf, pos)[1]
    mv = memoryview(buf)
    return crc32c(mv[pos + ATTRIBUTES_OFFSET : pos + size])


def set_base_offset(buf: bytearray | memoryview, base_offset: int, pos: int = 0) -> None:
    """Rewrite baseOffset in place (not covered by the CRC)."""
    _Q.pack_into(buf, pos, base_offset)


def set_partition_leader_epoch(buf: bytearray | memoryview, epoch: int, pos: int = 0) -> None:
    """Rewrite partitionLeaderEpoch in place (not covered by the CRC)."""
    _I.pack_into(buf, pos + 12, epoch)


def set_max_timestamp_log_append(buf: bytearray | memoryview, timestamp: int, pos: int = 0) -> None:
    """Mark the batch LogAppendTime with ``timestamp`` as maxTimestamp and recompute the CRC."""
    attrs = struct.unpack_from(">h", buf, pos + ATTRIBUTES_OFFSET)[0]
    struct.pack_into(">h", buf, pos + ATTRIBUTES_OFFSET, attrs | TIMESTAMP_TYPE_MASK)
    _Q.pack_into(buf, pos + MAX_TIMESTAMP_OFFSET, timestamp)
    _U.pack_into(buf, pos + CRC_OFFSET, compute_crc(buf, pos))
