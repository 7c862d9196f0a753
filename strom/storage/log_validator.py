"""Validate a produced payload of RecordBatch v2 and assign offsets, decoding records only where a check needs them.

Kafka counterpart: ``LogValidator`` (the in-place paths ``assignOffsetsNonCompressed`` /
``validateMessagesAndAssignOffsetsCompressed`` and the recompression of ``buildRecordsAndAssignOffsets``) plus
the size checks of ``UnifiedLog.analyzeAndValidateRecords``.

Per batch: a whole header (61 bytes) and a ``batchLength`` that fits the payload, magic 2, the CRC-32C, size
<= ``max.message.bytes`` (MESSAGE_TOO_LARGE, code 10, as Kafka), ``recordsCount == lastOffsetDelta + 1`` and > 0,
no control batch from a client, and for CreateTime topics with ``message.timestamp.before/after.max.ms`` set,
every record's timestamp within those bounds of broker time (the records are read for it, a compressed batch
decompressed, as Kafka's ``validateTimestamp`` does; INVALID_TIMESTAMP). Then, in a private copy of the
payload: baseOffset and partitionLeaderEpoch are rewritten, and for LogAppendTime topics maxTimestamp, the
timestamp-type attribute bit and the CRC. Compressed batches are handled the same way when the topic's
``compression.type`` is ``producer`` or the batch's own codec.

When the topic names another codec (``uncompressed``, ``gzip``, ``snappy``, ``lz4``, ``zstd``), each client batch
is rewritten with it, as Kafka's ``buildRecordsAndAssignOffsets`` does: the records block is decompressed, its
records checked (as many as ``recordsCount`` says, nothing after them), and compressed again with the topic's
codec at its ``compression.<codec>.level``; the header keeps the producer id, epoch, base sequence, transactional
flag and timestamps, with the codec bits, ``batchLength`` and the CRC set anew. Records whose offset deltas are
not 0, 1, 2 ... are renumbered (Kafka rewrites them too). A batch that grows past ``max.message.bytes`` is
MESSAGE_TOO_LARGE. Control batches are never recompressed ("do not compress control records unless they are
written compressed", as Kafka). The record bytes themselves are not re-encoded otherwise: keys, values,
headers and timestamp deltas stay byte for byte.

For compacted topics every record must have a key (INVALID_RECORD, "Compacted topic cannot accept message
without key", as Kafka's ``validateKey``): the records are decoded (decompressed) for that check only.

Any failure raises before anything is written. Pure function, thread-safe.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

from strom.common.error_codes import (
    CorruptMessageError,
    InvalidRecordError,
    InvalidTimestampError,
    MessageTooLargeError,
    RecordListTooLargeError,
    UnsupportedForMessageFormatError,
)
from strom.record.batch import RecordBatch
from strom.record.compression import CompressionType, compress, decompress
from strom.record.header import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    CRC_OFFSET,
    HEADER_SIZE,
    LOG_OVERHEAD,
    compute_crc,
    parse_header,
    set_base_offset,
    set_max_timestamp_log_append,
    set_partition_leader_epoch,
)
from strom.record.varint import decode_varint, decode_varlong, varint_bytes
from strom.storage.file_records import record_timestamps
from strom.storage.log_config import LONG_MAX, LogConfig

__all__ = ["AppendOrigin", "ValidationResult", "validate_and_assign_offsets", "validate_replicated",
           "recompress_for_topic", "recompress_batch", "target_compression"]

try:
    from strom.record._fastdecode import scan_records as _scan_records
except ImportError:  # built without a C compiler: the Python walk below does the same
    _scan_records = None

_MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD
NO_TIMESTAMP = -1
_BATCH_LENGTH = struct.Struct(">i")  # at byte 8
_ATTRIBUTES = struct.Struct(">h")
_CRC = struct.Struct(">I")


class AppendOrigin(enum.Enum):
    """Who is appending: clients may not write control batches; the group/txn coordinators may; a follower
    copies the leader's batches as they are (REPLICATION: no offset assignment, no duplicate rejection)."""

    CLIENT = "client"
    COORDINATOR = "coordinator"
    REPLICATION = "replication"


@dataclass(slots=True)
class ValidationResult:
    records: bytes | bytearray | memoryview
    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    log_append_time: int
    num_records: int
    num_batches: int


def validate_and_assign_offsets(
    records: bytes | bytearray | memoryview,
    next_offset: int,
    config: LogConfig,
    now_ms: int,
    *,
    leader_epoch: int = 0,
    origin: AppendOrigin = AppendOrigin.CLIENT,
) -> ValidationResult:
    """Check every batch of ``records`` and return them with offsets assigned from ``next_offset``.

    Client records in a writable memoryview (what the Produce handler passes: a slice of the request's own
    receive buffer, used for nothing else afterwards) are rewritten in place; anything else is copied first. A
    copy of every produced byte was a fifth of the broker's time under a 1 KiB-record produce load."""
    in_place = origin is AppendOrigin.CLIENT and isinstance(records, memoryview) and not records.readonly
    buf = records if in_place else bytearray(records)
    total = len(buf)
    if total > config.segment_bytes:
        raise RecordListTooLargeError(
            f"payload of {total} bytes exceeds segment.bytes {config.segment_bytes}"
        )
    log_append = config.log_append_time
    before_max = config.timestamp_before_max_ms()
    after_max = config.timestamp_after_max_ms()
    check_ts = not log_append and (before_max != LONG_MAX or after_max != LONG_MAX)
    compacted = config.compact_enabled
    target = None if origin is AppendOrigin.REPLICATION else target_compression(config)
    rewritten: list[tuple[int, int, bytearray]] = []  # (pos, size, the batch recompressed)
    max_ts = NO_TIMESTAMP
    offset_of_max_ts = -1
    offset = next_offset
    num_records = 0
    num_batches = 0
    pos = 0
    while pos < total:
        if total - pos < HEADER_SIZE:
            raise CorruptMessageError(f"truncated batch header at byte {pos} ({total - pos} bytes left)")
        h = parse_header(buf, pos)
        if h.magic != 2:
            if h.magic in (0, 1):
                raise UnsupportedForMessageFormatError(f"message format v{h.magic} is not accepted; use v2")
            raise CorruptMessageError(f"unknown magic {h.magic} at byte {pos}")
        if h.batch_length < _MIN_BATCH_LENGTH:
            raise CorruptMessageError(f"batchLength {h.batch_length} smaller than a header at byte {pos}")
        size = h.batch_length + LOG_OVERHEAD
        if pos + size > total:
            raise CorruptMessageError(
                f"partial batch at byte {pos}: {size} bytes declared, {total - pos} present"
            )
        if size > config.max_message_bytes:
            raise MessageTooLargeError(
                f"batch of {size} bytes exceeds max.message.bytes {config.max_message_bytes}"
            )
        if compute_crc(buf, pos, size) != h.crc:
            raise CorruptMessageError(f"CRC mismatch in batch at byte {pos}")
        if h.records_count <= 0 or h.records_count != h.last_offset_delta + 1:
            raise InvalidRecordError(
                f"recordsCount {h.records_count} does not match lastOffsetDelta {h.last_offset_delta}"
            )
        if h.is_control and origin is AppendOrigin.CLIENT:
            raise InvalidRecordError("clients may not write control batches")
        if compacted and not h.is_control:
            _check_keys(buf, pos, num_batches)
        if check_ts and not h.is_control:
            _check_timestamps(buf, pos, size, h.max_timestamp, now_ms - before_max, now_ms + after_max)
        last = offset + h.last_offset_delta
        out, out_pos = buf, pos
        if target is not None and not h.is_control and h.compression != target:
            out, out_pos = recompress_batch(buf, pos, size, h.attributes, h.records_count, target, config), 0
            if len(out) > config.max_message_bytes:
                raise MessageTooLargeError(
                    f"batch of {len(out)} bytes once compressed with {target.config_name} exceeds max.message.bytes "
                    f"{config.max_message_bytes}"
                )
            rewritten.append((pos, size, out))
        set_base_offset(out, offset, out_pos)
        set_partition_leader_epoch(out, leader_epoch, out_pos)
        if log_append:
            set_max_timestamp_log_append(out, now_ms, out_pos)
        elif h.max_timestamp > max_ts:
            max_ts, offset_of_max_ts = h.max_timestamp, last
        num_records += h.records_count
        num_batches += 1
        offset = last + 1
        pos += size
    if log_append and num_batches:
        max_ts, offset_of_max_ts = now_ms, next_offset
    if rewritten:
        buf = _splice(buf, rewritten)
    return ValidationResult(
        records=buf,
        first_offset=next_offset,
        last_offset=offset - 1,
        max_timestamp=max_ts,
        offset_of_max_timestamp=offset_of_max_ts,
        log_append_time=now_ms if log_append else -1,
        num_records=num_records,
        num_batches=num_batches,
    )


def validate_replicated(records: bytes | bytearray | memoryview) -> ValidationResult:
    """Check batches fetched from a leader, which keep the offsets the leader assigned (Kafka's
    ``analyzeAndValidateRecords`` for a follower append): whole headers and lengths, magic 2, the CRC-32C and
    strictly increasing offsets. Nothing is rewritten. Offsets may have gaps (compaction removes records), and
    ``recordsCount`` may be below ``lastOffsetDelta + 1`` for the same reason. Raises CorruptMessageError."""
    buf = records
    total = len(buf)
    max_ts = NO_TIMESTAMP
    offset_of_max_ts = -1
    first = -1
    prev_last = -1
    num_records = 0
    num_batches = 0
    pos = 0
    while pos < total:
        if total - pos < HEADER_SIZE:
            raise CorruptMessageError(f"truncated batch header at byte {pos} ({total - pos} bytes left)")
        h = parse_header(buf, pos)
        if h.magic != 2:
            raise CorruptMessageError(f"unsupported magic {h.magic} in replicated batch at byte {pos}")
        if h.batch_length < _MIN_BATCH_LENGTH:
            raise CorruptMessageError(f"batchLength {h.batch_length} smaller than a header at byte {pos}")
        size = h.batch_length + LOG_OVERHEAD
        if pos + size > total:
            raise CorruptMessageError(
                f"partial batch at byte {pos}: {size} bytes declared, {total - pos} present"
            )
        if compute_crc(buf, pos, size) != h.crc:
            raise CorruptMessageError(f"CRC mismatch in replicated batch at byte {pos}")
        last = h.base_offset + h.last_offset_delta
        if h.last_offset_delta < 0 or h.base_offset < 0 or h.base_offset <= prev_last:
            raise CorruptMessageError(
                f"replicated batch at byte {pos} has offsets {h.base_offset}..{last} after offset {prev_last}"
            )
        if first < 0:
            first = h.base_offset
        if h.max_timestamp > max_ts:
            max_ts, offset_of_max_ts = h.max_timestamp, last
        prev_last = last
        num_records += max(0, h.records_count)
        num_batches += 1
        pos += size
    return ValidationResult(
        records=buf,
        first_offset=first,
        last_offset=prev_last,
        max_timestamp=max_ts,
        offset_of_max_timestamp=offset_of_max_ts,
        log_append_time=-1,
        num_records=num_records,
        num_batches=num_batches,
    )


def target_compression(config: LogConfig) -> CompressionType | None:
    """The codec the topic's ``compression.type`` asks for; ``None`` for ``producer`` (keep each batch's)."""
    name = config.compression_type
    return None if name == "producer" else CompressionType.from_topic_config(name)


def recompress_for_topic(records: bytes | bytearray | memoryview, config: LogConfig) -> bytes | bytearray | memoryview:
    """``records`` with its client batches in a codec other than the topic's recompressed — the work
    :func:`validate_and_assign_offsets` would otherwise do, done beforehand where it may take its time (the broker
    runs it in a worker thread: the codecs and the records scan release the GIL). Batches that do not check out
    (structure, counts, CRC, a records block that does not parse) and everything after them are left as they
    came, for the validator to refuse with its own error. ``records`` itself when nothing changes, else a
    writable memoryview of a new buffer."""
    target = target_compression(config)
    if target is None:
        return records
    rewritten: list[tuple[int, int, bytearray]] = []
    pos, total = 0, len(records)
    while total - pos >= HEADER_SIZE:
        h = parse_header(records, pos)
        size = h.batch_length + LOG_OVERHEAD
        if (h.magic != 2 or h.batch_length < _MIN_BATCH_LENGTH or pos + size > total or h.records_count <= 0
                or h.records_count != h.last_offset_delta + 1):
            break
        if not h.is_control and h.compression != target:
            if compute_crc(records, pos, size) != h.crc:
                break
            try:
                rewritten.append((pos, size, recompress_batch(records, pos, size, h.attributes, h.records_count,
                                                              target, config)))
            except CorruptMessageError:
                break
        pos += size
    return memoryview(_splice(records, rewritten)) if rewritten else records


def _level(config: LogConfig, codec: CompressionType) -> int | None:
    if codec is CompressionType.GZIP:
        return config.compression_gzip_level
    if codec is CompressionType.LZ4:
        return config.compression_lz4_level
    if codec is CompressionType.ZSTD:
        return config.compression_zstd_level
    return None


def recompress_batch(buf: bytes | bytearray | memoryview, pos: int, size: int, attributes: int, records_count: int,
                     codec: CompressionType, config: LogConfig) -> bytearray:
    """The batch at ``buf[pos:pos + size]`` (its CRC already checked) with its records block in ``codec``: a new
    buffer with ``batchLength``, the codec bits and the CRC set; offsets and epochs as they were."""
    block = memoryview(buf)[pos + HEADER_SIZE:pos + size]
    source = attributes & COMPRESSION_MASK
    try:
        raw = decompress(source, block) if source else block
    except ValueError as e:
        raise CorruptMessageError(f"cannot decompress a {CompressionType(source).config_name} batch: {e}") from None
    raw = _renumbered(raw, records_count)
    data = compress(codec, raw, _level(config, codec)) if codec else raw
    out = bytearray(HEADER_SIZE + len(data))
    out[:HEADER_SIZE] = memoryview(buf)[pos:pos + HEADER_SIZE]
    out[HEADER_SIZE:] = data
    _BATCH_LENGTH.pack_into(out, 8, len(out) - LOG_OVERHEAD)
    _ATTRIBUTES.pack_into(out, ATTRIBUTES_OFFSET, (attributes & ~COMPRESSION_MASK) | codec)
    _CRC.pack_into(out, CRC_OFFSET, compute_crc(out, 0, len(out)))
    return out


def _renumbered(raw: bytes | memoryview, count: int) -> bytes | memoryview:
    """``raw`` (an uncompressed records block) when it holds exactly ``count`` records with offset deltas 0, 1, 2
    ...; the same records with those deltas when some differ; CorruptMessageError when it does not parse.
    (The usual case, checked in C with the GIL released when the accelerator is built: nothing to renumber.)"""
    if _scan_records is not None:
        shape = _scan_records(raw, count)
        if shape == 0:
            return raw
        if shape < 0:
            raise CorruptMessageError(f"the records block does not hold the {count} records the batch declares")
    end = len(raw)
    pos = 0
    parts: list[bytes | memoryview] | None = None
    mv = memoryview(raw)
    try:
        for i in range(count):
            length, body = decode_varint(raw, pos)
            record_end = body + length
            if length < 3 or record_end > end:
                raise CorruptMessageError(f"record {i} of {count} has length {length} with {end - body} bytes left")
            _, p = decode_varlong(raw, body + 1)  # attributes (1 byte), timestampDelta
            delta, rest = decode_varint(raw, p)
            if delta != i or parts is not None:
                if parts is None:
                    parts = [mv[:pos]]
                new_body = b"".join((mv[body:p], varint_bytes(i), mv[rest:record_end]))
                parts += (varint_bytes(len(new_body)), new_body)
            pos = record_end
    except (IndexError, ValueError) as e:
        raise CorruptMessageError(f"records block does not parse: {e}") from None
    if pos != end:
        raise CorruptMessageError(f"{end - pos} bytes after the {count} records the batch declares")
    return raw if parts is None else b"".join(parts)


def _splice(buf: bytes | bytearray | memoryview, rewritten: list[tuple[int, int, bytearray]]) -> bytearray:
    """``buf`` with each ``(pos, size, batch)`` of ``rewritten`` (in position order) put in place of its bytes."""
    out = bytearray()
    prev = 0
    for pos, size, batch in rewritten:
        out += buf[prev:pos]
        out += batch
        prev = pos + size
    out += buf[prev:]
    return out


def _check_timestamps(buf: bytes | bytearray | memoryview, pos: int, size: int, max_timestamp: int, lowest: int,
                      highest: int) -> None:
    """Kafka's ``validateTimestamp``: every record's CreateTime (but NO_TIMESTAMP) within ``[lowest, highest]``;
    the header's maxTimestamp too, as it is what the time index and retention go by. Records are read (a
    compressed batch decompressed) only when a limit is set (``message.timestamp.before/after.max.ms``)."""
    try:
        stamps = [ts for _delta, ts in record_timestamps(memoryview(buf)[pos:pos + size])]
    except ValueError as e:
        raise CorruptMessageError(f"the records of the batch at byte {pos} do not parse: {e}") from None
    for i, ts in enumerate((*stamps, max_timestamp)):
        if ts != NO_TIMESTAMP and not lowest <= ts <= highest:
            what = f"record {i}" if i < len(stamps) else "maxTimestamp"
            raise InvalidTimestampError(
                f"Timestamp {ts} of {what} of the batch at byte {pos} is out of range. The timestamp should be "
                f"within [{lowest}, {highest}]"
            )


def _check_keys(buf: bytearray, pos: int, batch_index: int) -> None:
    try:
        records = RecordBatch(buf, pos).records()
    except CorruptMessageError:
        raise
    except (ValueError, IndexError) as e:
        raise CorruptMessageError(f"cannot decode the records of batch {batch_index}: {e}") from None
    for i, r in enumerate(records):
        if r.key is None:
            raise InvalidRecordError(
                f"Compacted topic cannot accept message without key (record {i} of batch {batch_index})"
            )
