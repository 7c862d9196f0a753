"""Reading legacy message sets (magic v0 and v1; read-only).

Layout of one entry (big-endian)::

    offset      INT64
    messageSize INT32   bytes that follow
    crc         UINT32  CRC-32 (zlib, not CRC-32C) of magic..end
    magic       INT8    0 or 1
    attributes  INT8    bits 0-2 codec (gzip, snappy, lz4), bit 3 timestamp type (v1)
    timestamp   INT64   (v1 only)
    key         BYTES   INT32 length, -1 = null
    value       BYTES   INT32 length, -1 = null

A compressed entry ("wrapper") carries a whole inner message set, compressed, as its value. For v0 the
inner offsets are absolute; for v1 they are relative and the wrapper's offset is that of the last inner
message, so ``absolute = wrapper_offset - last_inner_relative + inner_relative``. With LogAppendTime (v1)
every inner message takes the wrapper's timestamp. LZ4 in v0 used a broken frame header checksum, which
``compression.decompress`` tolerates.

Kafka counterpart: ``org.apache.kafka.common.record.LegacyRecord`` / ``AbstractLegacyRecordBatch``. Each
shallow entry is one batch, exposing the same read interface as ``RecordBatch`` (producer fields -1).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator

from strom.common.error_codes import CorruptMessageError
from strom.record.batch import Record, TimestampType
from strom.record.compression import CompressionType, decompress
from strom.record.header import LOG_OVERHEAD

__all__ = ["LegacyRecordBatch", "LEGACY_RECORD_OVERHEAD_V0"]

#: crc + magic + attributes + key length + value length
LEGACY_RECORD_OVERHEAD_V0 = 14
_ENTRY = struct.Struct(">qiIbb")  # offset, size, crc, magic, attributes
_Q = struct.Struct(">q")
_I = struct.Struct(">i")
_new_record = tuple.__new__


class LegacyRecordBatch:
    """One shallow entry of a v0/v1 message set at ``buf[pos:]``; iterating yields its record(s)."""

    __slots__ = ("_buf", "_pos", "_offset", "_size", "_crc", "magic", "attributes", "_timestamp", "_kv_pos")

    def __init__(self, buf: bytes | bytearray | memoryview, pos: int = 0) -> None:
        if len(buf) - pos < LOG_OVERHEAD + LEGACY_RECORD_OVERHEAD_V0:
            raise CorruptMessageError(f"legacy message at position {pos} is truncated")
        self._buf = buf
        self._pos = pos
        self._offset, size, self._crc, self.magic, self.attributes = _ENTRY.unpack_from(buf, pos)
        if self.magic not in (0, 1):
            raise CorruptMessageError(f"legacy message at position {pos} has magic {self.magic}")
        self._size = size + LOG_OVERHEAD
        p = pos + LOG_OVERHEAD + 6
        if self.magic == 1:
            if len(buf) - p < 8:
                raise CorruptMessageError("legacy v1 message is truncated")
            self._timestamp: int = _Q.unpack_from(buf, p)[0]
            p += 8
        else:
            self._timestamp = -1
        self._kv_pos = p

    # -- header-like accessors (RecordBatch interface) --------------------------------------------
    @property
    def last_offset(self) -> int:
        return self._offset

    @property
    def next_offset(self) -> int:
        return self._offset + 1

    @property
    def base_offset(self) -> int:
        if self.attributes & 0x07 == 0:
            return self._offset
        return self.records()[0].offset

    @property
    def size_in_bytes(self) -> int:
        return self._size

    @property
    def batch_length(self) -> int:
        return self._size - LOG_OVERHEAD

    @property
    def crc(self) -> int:
        return self._crc

    @property
    def compression_type(self) -> CompressionType:
        try:
            return CompressionType.from_attributes(self.attributes)
        except ValueError as exc:
            raise CorruptMessageError(str(exc)) from None

    @property
    def timestamp_type(self) -> TimestampType:
        if self.magic == 0:
            return TimestampType.NO_TIMESTAMP_TYPE
        return TimestampType.LOG_APPEND_TIME if self.attributes & 0x08 else TimestampType.CREATE_TIME

    @property
    def base_timestamp(self) -> int:
        return self._timestamp

    @property
    def max_timestamp(self) -> int:
        return self._timestamp

    partition_leader_epoch = property(lambda self: -1, doc="Always -1 (not stored in v0/v1).")
    producer_id = property(lambda self: -1, doc="Always -1.")
    producer_epoch = property(lambda self: -1, doc="Always -1.")
    base_sequence = property(lambda self: -1, doc="Always -1.")
    last_sequence = property(lambda self: -1, doc="Always -1.")
    is_transactional = property(lambda self: False, doc="Always False.")
    is_control = property(lambda self: False, doc="Always False.")

    @property
    def records_count(self) -> int:
        return 1 if self.attributes & 0x07 == 0 else len(self.records())

    # -- validation -----------------------------------------------------------------------------
    def invalid_reason(self) -> str | None:
        if self._size - LOG_OVERHEAD < LEGACY_RECORD_OVERHEAD_V0:
            return (
                f"message size {self._size - LOG_OVERHEAD} is below the minimum {LEGACY_RECORD_OVERHEAD_V0}"
            )
        if len(self._buf) - self._pos < self._size:
            return f"message is truncated: needs {self._size} bytes, {len(self._buf) - self._pos} available"
        computed = zlib.crc32(memoryview(self._buf)[self._pos + 16 : self._pos + self._size])
        if computed != self._crc:
            return f"message is corrupt (stored crc = {self._crc}, computed crc = {computed})"
        return None

    def is_valid(self) -> bool:
        return self.invalid_reason() is None

    def ensure_valid(self) -> None:
        reason = self.invalid_reason()
        if reason is not None:
            raise CorruptMessageError(reason)

    # -- records --------------------------------------------------------------------------------
    def _key_value(self) -> tuple[bytes | None, bytes | None]:
        buf, p, end = self._buf, self._kv_pos, self._pos + self._size
        if end > len(buf):
            raise CorruptMessageError("legacy message is truncated")
        out: list[bytes | None] = []
        for _ in range(2):
            if p + 4 > end:
                raise CorruptMessageError("legacy message key/value overruns the message")
            (n,) = _I.unpack_from(buf, p)
            p += 4
            if n < 0:
                out.append(None)
            else:
                if p + n > end:
                    raise CorruptMessageError("legacy message key/value overruns the message")
                out.append(bytes(buf[p : p + n]))
                p += n
        return out[0], out[1]

    def records(self) -> list[Record]:
        """The record (uncompressed entry) or the inner records with absolute offsets (wrapper)."""
        key, value = self._key_value()
        codec = self.attributes & 0x07
        if codec == 0:
            return [_new_record(Record, (self._offset, self._timestamp, key, value, (), self._size))]
        if value is None:
            raise CorruptMessageError("compressed legacy wrapper has a null value")
        try:
            inner_buf = decompress(self.compression_type, value)
        except ValueError as exc:
            raise CorruptMessageError(f"cannot decompress legacy message set: {exc}") from None
        inner: list[LegacyRecordBatch] = []
        pos = 0
        while len(inner_buf) - pos >= LOG_OVERHEAD:
            entry = LegacyRecordBatch(inner_buf, pos)
            if entry.attributes & 0x07:
                raise CorruptMessageError("nested compressed legacy messages are not allowed")
            inner.append(entry)
            pos += entry.size_in_bytes
        if pos != len(inner_buf) or not inner:
            raise CorruptMessageError("compressed legacy message set is empty or has trailing bytes")
        log_append = self.magic == 1 and bool(self.attributes & 0x08)
        shift = self._offset - inner[-1]._offset if self.magic == 1 else 0
        out = []
        for entry in inner:
            k, v = entry._key_value()
            ts = self._timestamp if log_append else entry._timestamp
            out.append(_new_record(Record, (entry._offset + shift, ts, k, v, (), entry.size_in_bytes)))
        return out

    def __iter__(self) -> Iterator[Record]:
        return iter(self.records())

    def control_record_type(self) -> int:
        raise CorruptMessageError("legacy (magic v0/v1) batches have no control records")

    def end_txn_marker(self) -> tuple[int, int]:
        raise CorruptMessageError("legacy (magic v0/v1) batches have no transaction markers")

    def __repr__(self) -> str:
        return (
            f"LegacyRecordBatch(magic={self.magic}, offset={self._offset}, size={self._size}, "
            f"codec={self.attributes & 0x07})"
        )
