"""Reading one RecordBatch (magic v2): a lazy view over bytes, and the Record value type.

Batch layout: the 61-byte header documented in ``strom.record.header`` followed by ``recordsCount``
records (one compressed block when attributes bits 0-2 name a codec). Each record::

    length          VARINT   bytes that follow this field
    attributes      INT8     (unused, 0)
    timestampDelta  VARLONG  relative to baseTimestamp
    offsetDelta     VARINT   relative to baseOffset
    keyLength       VARINT   -1 = null key
    key             BYTES
    valueLength     VARINT   -1 = null value
    value           BYTES
    headersCount    VARINT
    headers         [headerKeyLength VARINT, headerKey UTF-8, headerValueLength VARINT (-1 = null), value]

A control batch (attributes bit 5) holds one record whose key is ``version INT16, type INT16``; for
ABORT/COMMIT markers the value is ``version INT16, coordinatorEpoch INT32``.

Kafka counterpart: ``org.apache.kafka.common.record.DefaultRecordBatch`` / ``DefaultRecord`` /
``ControlRecordType`` / ``EndTransactionMarker``. Objects are immutable views; not thread-safe only in
the sense that the underlying buffer must not be mutated while a view is in use.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from enum import IntEnum
from typing import Any, NamedTuple

from strom.common.error_codes import CorruptMessageError
from strom.record.compression import CompressionType, decompress
from strom.record.crc import crc32c
from strom.record.header import (
    ATTRIBUTES_OFFSET,
    CONTROL_FLAG,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    parse_header,
)
from strom.record.varint import decode_varint, decode_varlong

__all__ = [
    "Record",
    "Header",
    "RecordBatch",
    "TimestampType",
    "ControlRecordType",
    "parse_control_record_key",
    "parse_end_txn_marker_value",
    "decode_records",
    "DELETE_HORIZON_FLAG",
    "NO_TIMESTAMP",
]

DELETE_HORIZON_FLAG = 0x40
NO_TIMESTAMP = -1

Header = tuple[str, bytes | None]


class TimestampType(IntEnum):
    """Batch timestamp type (attributes bit 3); NO_TIMESTAMP_TYPE for magic v0 message sets."""

    NO_TIMESTAMP_TYPE = -1
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


class ControlRecordType(IntEnum):
    """The ``type`` in a control record's key (Kafka's ``ControlRecordType``)."""

    UNKNOWN = -1
    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6


class Record(NamedTuple):
    """One decoded record with absolute offset and timestamp.

    ``size_in_bytes`` is the encoded size inside the (uncompressed) batch, length varint included
    (Kafka's ``DefaultRecord.sizeInBytes``); 0 when the record was not decoded from bytes.
    """

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()
    size_in_bytes: int = 0


_new_record = tuple.__new__
_HH = struct.Struct(">hh")
_HI = struct.Struct(">hi")
_VALID_MAGIC = 2


def parse_control_record_key(key: bytes | None) -> int:
    """The control type in a control record key; ``ControlRecordType.UNKNOWN`` (-1) for unknown types.

    Raises ``CorruptMessageError`` when the key is missing, shorter than 4 bytes or has a negative version.
    """
    if key is None or len(key) < 4:
        raise CorruptMessageError("control record key is null or shorter than 4 bytes")
    version, ctype = _HH.unpack_from(key)
    if version < 0:
        raise CorruptMessageError(f"invalid control record key version {version}")
    try:
        return ControlRecordType(ctype)
    except ValueError:
        return ControlRecordType.UNKNOWN


def parse_end_txn_marker_value(value: bytes | None) -> int:
    """The coordinator epoch in an ABORT/COMMIT marker value (``version INT16, coordinatorEpoch INT32``)."""
    if value is None or len(value) < 6:
        raise CorruptMessageError("end transaction marker value is null or shorter than 6 bytes")
    version, epoch = _HI.unpack_from(value)
    if version < 0:
        raise CorruptMessageError(f"invalid end transaction marker version {version}")
    return epoch


def read_headers(data: bytes, p: int, count: int) -> tuple[tuple[Header, ...], int]:
    """``count`` headers from ``p``: ``((key, value), ...)`` and the position after them (CorruptMessageError on
    a negative count or a null key, IndexError/ValueError past the buffer). A key that is not UTF-8 is decoded
    with U+FFFD for what does not decode, as Java's ``new String(bytes, UTF_8)`` in Kafka's consumer."""
    if count < 0:
        raise CorruptMessageError(f"invalid negative header count {count}")
    out = []
    for _ in range(count):
        klen, p = decode_varint(data, p)
        if klen < 0:
            raise CorruptMessageError("null header key")
        hkey = data[p : p + klen].decode("utf-8", "replace")
        p += klen
        vlen, p = decode_varint(data, p)
        if vlen < 0:
            out.append((hkey, None))
        else:
            out.append((hkey, data[p : p + vlen]))
            p += vlen
    return tuple(out), p


def decode_records(
    data: bytes,
    start: int,
    end: int,
    count: int,
    base_offset: int,
    base_timestamp: int,
    log_append_time: int | None = None,
    into: tuple[type, str, int, int, int | None] | None = None,
) -> list[Any]:
    """Decode ``count`` v2 records from ``data[start:end]`` (uncompressed): the one record-by-record decoder.

    Offsets and timestamps are made absolute; with ``log_append_time`` set every record gets that
    timestamp (LogAppendTime batches). Raises ``CorruptMessageError`` on any inconsistency.

    The records are :class:`Record` tuples, or with ``into = (cls, topic, partition, timestamp_type,
    leader_epoch)`` tuples of ``cls`` laid out as the consumer's ``ConsumerRecord`` (topic, partition, offset,
    timestamp, timestamp_type, key, value, headers, key size, value size, leader epoch), built directly so
    the consumer's slow path makes no intermediate tuple.
    """
    if into is not None:
        cls, topic, partition, timestamp_type, leader_epoch = into
    out: list[Record] = []
    append = out.append
    p = start
    try:
        for _ in range(count):
            # One- and two-byte varints (lengths and deltas below 8192) are decoded inline: the common case.
            rec_start = p
            b = data[p]
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                p += 1
            else:
                c = data[p + 1]
                if c < 0x80:
                    b = (b & 0x7F) | (c << 7)
                    length = (b >> 1) ^ -(b & 1)
                    p += 2
                else:
                    length, p = decode_varint(data, p)
            rec_end = p + length
            p += 1  # attributes (unused)
            b = data[p]
            if b < 0x80:
                ts = base_timestamp + ((b >> 1) ^ -(b & 1))
                p += 1
            else:
                c = data[p + 1]
                if c < 0x80:
                    b = (b & 0x7F) | (c << 7)
                    ts = base_timestamp + ((b >> 1) ^ -(b & 1))
                    p += 2
                else:
                    ts, p = decode_varlong(data, p)
                    ts += base_timestamp
            b = data[p]
            if b < 0x80:
                offset = base_offset + ((b >> 1) ^ -(b & 1))
                p += 1
            else:
                c = data[p + 1]
                if c < 0x80:
                    b = (b & 0x7F) | (c << 7)
                    offset = base_offset + ((b >> 1) ^ -(b & 1))
                    p += 2
                else:
                    offset, p = decode_varint(data, p)
                    offset += base_offset
            b = data[p]
            if b & 1:  # negative: -1 is a null key (other negative lengths too, as Kafka reads them)
                if b < 0x80:
                    p += 1
                else:
                    _, p = decode_varint(data, p)
                key = None
                ksize = -1
            else:
                if b < 0x80:
                    p += 1
                    b >>= 1
                else:
                    b, p = decode_varint(data, p)
                key = data[p : p + b]
                ksize = b
                p += b
            b = data[p]
            if b & 1:
                if b < 0x80:
                    p += 1
                else:
                    _, p = decode_varint(data, p)
                value = None
                vsize = -1
            else:
                if b < 0x80:
                    p += 1
                    b >>= 1
                else:
                    c = data[p + 1]
                    if c < 0x80:
                        b = ((b & 0x7F) | (c << 7)) >> 1
                        p += 2
                    else:
                        b, p = decode_varint(data, p)
                value = data[p : p + b]
                vsize = b
                p += b
            if data[p] == 0:
                headers: tuple[Header, ...] = ()
                p += 1
            else:
                hcount, p = decode_varint(data, p)
                headers, p = read_headers(data, p, hcount)
            if p != rec_end:
                raise CorruptMessageError(
                    f"record at offset {offset}: length field says {length} bytes, found {p - rec_end + length}"
                )
            if log_append_time is not None:
                ts = log_append_time
            if into is None:
                append(_new_record(Record, (offset, ts, key, value, headers, p - rec_start)))
            else:
                append(_new_record(cls, (topic, partition, offset, ts, timestamp_type, key, value, headers, ksize,
                                         vsize, leader_epoch)))
            p = rec_end
    except CorruptMessageError:
        raise
    except (IndexError, ValueError) as exc:  # ran off the buffer, overlong varint
        raise CorruptMessageError(f"malformed record #{len(out)}: {exc}") from None
    if p != end:
        raise CorruptMessageError(
            f"records block has {end - p:+d} bytes unaccounted for after {count} records"
            if p < end
            else f"records overrun the batch by {p - end} bytes"
        )
    return out


class RecordBatch:
    """A lazy view over one magic-v2 batch at ``buf[pos:]`` (Kafka's ``DefaultRecordBatch``).

    The 61-byte header is parsed at construction (the buffer must hold at least that much and the
    magic must be 2, else ``CorruptMessageError``); records are decoded by ``records()``/iteration (each
    call decodes again; a compressed block is decompressed only once and kept). ``is_valid`` /
    ``ensure_valid`` check sizes and the CRC-32C; iteration does not (Kafka's ``check.crcs`` is the
    caller's choice). Header fields reflect the buffer at construction time.
    """

    __slots__ = ("_buf", "_pos", "_h", "_data")

    def __init__(self, buf: bytes | bytearray | memoryview, pos: int = 0) -> None:
        if len(buf) - pos < HEADER_SIZE:
            raise CorruptMessageError(
                f"record batch at position {pos} is truncated: {len(buf) - pos} bytes, header needs {HEADER_SIZE}"
            )
        magic = buf[pos + MAGIC_OFFSET]
        if magic != _VALID_MAGIC:
            raise CorruptMessageError(f"record batch at position {pos} has magic {magic}, expected 2")
        self._buf = buf
        self._pos = pos
        self._h: BatchHeader = parse_header(buf, pos)
        self._data: bytes | None = None

    # -- header ---------------------------------------------------------------------------------
    @property
    def header(self) -> BatchHeader:
        return self._h

    @property
    def base_offset(self) -> int:
        return self._h.base_offset

    @property
    def last_offset_delta(self) -> int:
        return self._h.last_offset_delta

    @property
    def last_offset(self) -> int:
        return self._h.base_offset + self._h.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self._h.base_offset + self._h.last_offset_delta + 1

    @property
    def batch_length(self) -> int:
        return self._h.batch_length

    @property
    def size_in_bytes(self) -> int:
        return self._h.batch_length + LOG_OVERHEAD

    @property
    def partition_leader_epoch(self) -> int:
        return self._h.partition_leader_epoch

    @property
    def magic(self) -> int:
        return self._h.magic

    @property
    def crc(self) -> int:
        return self._h.crc

    @property
    def attributes(self) -> int:
        return self._h.attributes

    @property
    def compression_type(self) -> CompressionType:
        """The codec; ``CorruptMessageError`` for the unassigned ids 5-7."""
        try:
            return CompressionType.from_attributes(self._h.attributes)
        except ValueError as exc:
            raise CorruptMessageError(str(exc)) from None

    @property
    def timestamp_type(self) -> TimestampType:
        return (
            TimestampType.LOG_APPEND_TIME
            if self._h.attributes & TIMESTAMP_TYPE_MASK
            else TimestampType.CREATE_TIME
        )

    @property
    def is_transactional(self) -> bool:
        return self._h.is_transactional

    @property
    def is_control(self) -> bool:
        return self._h.is_control

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self._h.attributes & DELETE_HORIZON_FLAG)

    @property
    def base_timestamp(self) -> int:
        return self._h.base_timestamp

    @property
    def max_timestamp(self) -> int:
        return self._h.max_timestamp

    @property
    def producer_id(self) -> int:
        return self._h.producer_id

    @property
    def producer_epoch(self) -> int:
        return self._h.producer_epoch

    @property
    def base_sequence(self) -> int:
        return self._h.base_sequence

    @property
    def last_sequence(self) -> int:
        return self._h.last_sequence

    @property
    def records_count(self) -> int:
        return self._h.records_count

    # -- validation -----------------------------------------------------------------------------
    def invalid_reason(self) -> str | None:
        """Why the batch is invalid (sizes, CRC), or ``None`` when it is valid."""
        h = self._h
        size = h.batch_length + LOG_OVERHEAD
        if size < HEADER_SIZE:
            return f"batch size {size} is smaller than the minimum batch overhead {HEADER_SIZE}"
        available = len(self._buf) - self._pos
        if available < size:
            return f"batch is truncated: header says {size} bytes, only {available} available"
        if h.records_count < 0:
            return f"invalid negative record count {h.records_count}"
        if h.attributes & 0x07 > 4:
            return f"unknown compression codec id {h.attributes & 0x07}"
        mv = memoryview(self._buf)
        computed = crc32c(mv[self._pos + ATTRIBUTES_OFFSET : self._pos + size])
        if computed != h.crc:
            return f"record batch is corrupt (stored crc = {h.crc}, computed crc = {computed})"
        return None

    def is_valid(self) -> bool:
        """True when sizes are consistent and the stored CRC-32C matches the bytes."""
        return self.invalid_reason() is None

    def ensure_valid(self) -> None:
        """Raise ``CorruptMessageError`` with the reason when :meth:`is_valid` is false."""
        reason = self.invalid_reason()
        if reason is not None:
            raise CorruptMessageError(reason)

    # -- records --------------------------------------------------------------------------------
    def to_bytes(self) -> bytes:
        """This batch's bytes (a copy when the underlying buffer is larger or not ``bytes``)."""
        size = self.size_in_bytes
        buf = self._buf
        if type(buf) is bytes and self._pos == 0 and len(buf) == size:
            return buf
        return bytes(memoryview(buf)[self._pos : self._pos + size])

    def _records_block(self) -> tuple[bytes, int, int]:
        """``(data, start, end)`` of the uncompressed records, decompressing once."""
        h = self._h
        size = h.batch_length + LOG_OVERHEAD
        if size < HEADER_SIZE or len(self._buf) - self._pos < size:
            raise CorruptMessageError(self.invalid_reason() or "batch is truncated")
        codec = h.attributes & 0x07
        data = self._data
        if data is None:
            buf = self._buf
            if codec == 0 and type(buf) is bytes:
                return buf, self._pos + HEADER_SIZE, self._pos + size
            block = memoryview(buf)[self._pos + HEADER_SIZE : self._pos + size]
            if codec == 0:
                data = bytes(block)
            else:
                try:
                    data = decompress(self.compression_type, block)
                except ValueError as exc:
                    raise CorruptMessageError(f"cannot decompress record batch: {exc}") from None
            self._data = data
        return data, 0, len(data)

    def records(self) -> list[Record]:
        """All records with absolute offsets/timestamps (LogAppendTime batches use maxTimestamp)."""
        h = self._h
        data, start, end = self._records_block()
        log_append = h.max_timestamp if h.attributes & TIMESTAMP_TYPE_MASK else None
        return decode_records(data, start, end, h.records_count, h.base_offset, h.base_timestamp, log_append)

    def __iter__(self) -> Iterator[Record]:
        return iter(self.records())

    def __len__(self) -> int:
        return self._h.records_count

    def control_record_type(self) -> int:
        """The type of the control record (a ``ControlRecordType``; UNKNOWN for unrecognised types).

        Raises ``CorruptMessageError`` when this is not a control batch or it holds no record.
        """
        if not self._h.attributes & CONTROL_FLAG:
            raise CorruptMessageError("control_record_type() called on a batch that is not a control batch")
        recs = self.records()
        if not recs:
            raise CorruptMessageError("control batch holds no control record")
        return parse_control_record_key(recs[0].key)

    def end_txn_marker(self) -> tuple[int, int]:
        """``(control_type, coordinator_epoch)`` of an ABORT/COMMIT control batch."""
        ctype = self.control_record_type()
        if ctype not in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
            raise CorruptMessageError(f"control batch type {ctype} is not a transaction marker")
        return ctype, parse_end_txn_marker_value(self.records()[0].value)

    def __repr__(self) -> str:
        h = self._h
        return (
            f"RecordBatch(base_offset={h.base_offset}, last_offset={h.base_offset + h.last_offset_delta}, "
            f"count={h.records_count}, size={h.batch_length + LOG_OVERHEAD}, "
            f"codec={h.attributes & 0x07}, producer_id={h.producer_id}, "
            f"producer_epoch={h.producer_epoch}, base_sequence={h.base_sequence}, "
            f"transactional={h.is_transactional}, control={h.is_control})"
        )
