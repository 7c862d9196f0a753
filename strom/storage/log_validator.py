"""Validate a produced payload of RecordBatch v2 and assign offsets, decoding records only where a check needs them.

Kafka counterpart: ``LogValidator`` (the in-place paths ``assignOffsetsNonCompressed`` /
``validateMessagesAndAssignOffsetsCompressed`` and the recompression of ``buildRecordsAndAssignOffsets``) plus
the size checks of ``UnifiedLog.analyzeAndValidateRecords``.

Per batch: a whole header (61 bytes) and a ``batchLength`` that fits the payload, magic 2, the CRC-32C, size <=
``max.message.bytes`` (MESSAGE_TOO_LARGE, code 10, as Kafka), ``recordsCount == lastOffsetDelta + 1`` and > 0, no
control batch from a client, a base sequence of at least 0 when there is a producer id (INVALID_RECORD), no
LogAppendTime bit set by the producer (INVALID_TIMESTAMP: Kafka's "Producer should not set timestamp type to
LogAppendTime"; the broker sets it on LogAppendTime topics). Then every record of every batch but control batches,
as Kafka's validator reads them (its record iterator: ``DefaultRecord.readFrom``), a compressed batch decompressed
for it: exactly ``recordsCount`` records, each length within the block, its varints ending in time, key and value
lengths within the record (or negative: null), a header count of at least 0, header keys not null, and nothing in a
record's length that no field took (INVALID_RECORD, as Kafka's ``InvalidRecordException``; a block that does not
decompress is INVALID_RECORD too, where Kafka answers UNKNOWN_SERVER_ERROR). A batch whose CRC matches but whose
records do not parse would otherwise be stored and fail every consumer that reads it. For CreateTime topics with
``message.timestamp.before/after.max.ms`` set, every record's timestamp within those bounds of broker time
(INVALID_TIMESTAMP). Then, in a private copy of the payload: baseOffset and partitionLeaderEpoch are rewritten, and
for LogAppendTime topics maxTimestamp, the timestamp-type attribute bit and the CRC.

When the topic names a codec (``uncompressed``, ``gzip``, ``snappy``, ``lz4``, ``zstd``) other than a client
batch's, the batch is rewritten with it, as Kafka's ``buildRecordsAndAssignOffsets`` does: its checked records
compressed again with the topic's codec at its ``compression.<codec>.level``; the header keeps the producer id,
epoch, base sequence, transactional flag and timestamps, with the codec bits, ``batchLength`` and the CRC set
anew. A compressed batch whose records' offset deltas are not 0, 1, 2 ... is rebuilt with them renumbered (Kafka
rewrites such batches rather than refuse them; an uncompressed batch keeps its deltas, as in Kafka). A batch that
grows past ``max.message.bytes`` is MESSAGE_TOO_LARGE. Control batches are never recompressed ("do not compress
control records unless they are written compressed", as Kafka). The record bytes themselves are not re-encoded
otherwise: keys, values, headers and timestamp deltas stay byte for byte.

For compacted topics every record must have a key (INVALID_RECORD, "Compacted topic cannot accept message
without key", as Kafka's ``validateKey``), read in the same pass.

For a topic with its own codec, and for a payload with a gzip batch, the broker runs these checks in a worker thread
first (:func:`check_client_records`, :func:`needs_worker_check`), so that compressing or a slow decompression does
not hold up its event loop; the append then passes ``records_checked`` and only the header checks and offset
assignment are repeated. lz4, snappy and zstd batches are decompressed in the append, on the event loop (as Kafka's
request handler threads do it: 0.3-0.7 ms per MB of records): through a worker thread the broker took a quarter of
the lz4 batches it takes inline (``bench/recompression.py --producer-codec lz4``: the hand-offs and the GIL between
the threads cost more than the decompression).

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
from strom.common.errors import BrokerResponseError
from strom.record.compression import CompressionType, compress, decompress
from strom.record.header import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    CRC_OFFSET,
    HEADER_SIZE,
    LOG_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
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
           "check_client_records", "needs_worker_check", "scan_records", "target_compression"]

try:
    from strom.record._fastdecode import scan_records as _scan_records_c
except ImportError:  # built without a C compiler: the Python walk below does the same
    _scan_records_c = None

# Kafka's validation meters (``kafka.server:type=BrokerTopicMetrics``, all topics), named on the errors that count
# in them (``validation_meter``) for the broker's metrics to count.
INVALID_CRC = "InvalidMessageCrcRecordsPerSec"
INVALID_MAGIC = "InvalidMagicNumberRecordsPerSec"
INVALID_OFFSET_OR_SEQUENCE = "InvalidOffsetOrSequenceRecordsPerSec"
NO_KEY_COMPACTED_TOPIC = "NoKeyCompactedTopicRecordsPerSec"
VALIDATION_METERS = (NO_KEY_COMPACTED_TOPIC, INVALID_MAGIC, INVALID_CRC, INVALID_OFFSET_OR_SEQUENCE)


def _metered(error: BrokerResponseError, meter: str) -> BrokerResponseError:
    error.validation_meter = meter  # type: ignore[attr-defined]
    return error


RENUMBER = 1  # scan_records flag: some record's offset delta is not its index
NULL_KEY = 2  # scan_records flag: some record has a null key

_MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD
_CODECS = frozenset(CompressionType)
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
    records_checked: bool = False,
) -> ValidationResult:
    """Check every batch of ``records`` and return them with offsets assigned from ``next_offset``.
    ``records_checked``: :func:`check_client_records` has checked these records (CRCs, records, timestamps) and
    rewritten what needed it; only the headers are checked again.

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
    check_ts = not records_checked and not log_append and (before_max != LONG_MAX or after_max != LONG_MAX)
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
            raise _metered(CorruptMessageError(f"unknown magic {h.magic} at byte {pos}"), INVALID_MAGIC)
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
        if not records_checked and compute_crc(buf, pos, size) != h.crc:
            raise _metered(CorruptMessageError(f"CRC mismatch in batch at byte {pos}"), INVALID_CRC)
        if h.records_count <= 0 or h.records_count != h.last_offset_delta + 1:
            raise _metered(InvalidRecordError(
                f"recordsCount {h.records_count} does not match lastOffsetDelta {h.last_offset_delta}"
            ), INVALID_OFFSET_OR_SEQUENCE)
        if h.is_control and origin is AppendOrigin.CLIENT:
            raise InvalidRecordError("clients may not write control batches")
        if origin is AppendOrigin.CLIENT and h.producer_id >= 0 and h.base_sequence < 0:
            raise _metered(InvalidRecordError(f"Invalid sequence number {h.base_sequence} in record batch with "
                                              f"producerId {h.producer_id}"), INVALID_OFFSET_OR_SEQUENCE)
        if h.attributes & TIMESTAMP_TYPE_MASK and not h.is_control and not records_checked:  # (checked: set by us)
            raise InvalidTimestampError("Invalid timestamp type in the batch at byte "
                                        f"{pos}: producers should not set timestamp type to LogAppendTime")
        last = offset + h.last_offset_delta
        out, out_pos = buf, pos
        if not records_checked and not h.is_control:
            rebuilt = _check_batch_records(buf, pos, size, h.attributes, h.records_count, target, config,
                                           num_batches)
            if rebuilt is not None:
                out, out_pos = rebuilt, 0
                rewritten.append((pos, size, out))
        if check_ts and not h.is_control:  # (after the records check, which bounds what a batch decompresses to)
            _check_timestamps(buf, pos, size, h.max_timestamp, now_ms - before_max, now_ms + after_max)
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


def needs_worker_check(records: bytes | bytearray | memoryview, config: LogConfig) -> bool:
    """Whether the checks of a client payload are worth a worker thread (:func:`check_client_records`): the topic
    names its own codec (batches to compress), or a batch is gzip (about 2 ms per MB to decompress; lz4, snappy and
    zstd take 0.3-0.7 and are decompressed in the append, where a worker's hand-offs would cost more). Reads the
    batch headers' lengths and attributes only; a payload that does not add up is left to the validator."""
    if config.compression_type != "producer":
        return True
    pos, total = 0, len(records)
    while total - pos >= HEADER_SIZE:
        if _ATTRIBUTES.unpack_from(records, pos + ATTRIBUTES_OFFSET)[0] & COMPRESSION_MASK == CompressionType.GZIP:
            return True
        length = _BATCH_LENGTH.unpack_from(records, pos + 8)[0]
        if length < _MIN_BATCH_LENGTH:
            return False
        pos += length + LOG_OVERHEAD
    return False


def check_client_records(records: bytes | bytearray | memoryview, config: LogConfig, now_ms: int
                         ) -> bytes | bytearray | memoryview:
    """What :func:`validate_and_assign_offsets` checks and rewrites in a client payload, done before the append
    where it may take its time (the broker runs it in a worker thread: the codecs and the records scan release the
    GIL): every batch's CRC, records (decompressed) and timestamps, batches recompressed for the topic's codec or
    renumbered. Raises what the validator would; returns the records to append with ``records_checked=True``
    (offsets are assigned then)."""
    return validate_and_assign_offsets(records, 0, config, now_ms).records


def scan_records(raw: bytes | bytearray | memoryview, count: int) -> int:
    """The records of an uncompressed records block checked as Kafka's ``DefaultRecord.readFrom`` reads them
    (see ``strom/record/_fastdecode.c``, ``scan_records``): flags (:data:`RENUMBER`, :data:`NULL_KEY`) when
    ``raw`` holds exactly ``count`` records that parse, ``-(i + 1)`` when record ``i`` does not, ``-(count + 1)``
    when bytes follow the last one. The C accelerator's where it was built (the GIL released), else in Python."""
    if _scan_records_c is not None:
        return _scan_records_c(raw, count)
    return _scan_records_py(raw, count)


def _scan_records_py(raw: bytes | bytearray | memoryview, count: int) -> int:
    end = len(raw)
    pos = 0
    flags = 0
    for i in range(count):
        try:
            length, body = decode_varint(raw, pos)
            record_end = body + length
            if length <= 0 or record_end > end:
                return -(i + 1)
            _, p = decode_varlong(raw, body + 1)  # attributes (1 byte), timestampDelta
            delta, p = decode_varint(raw, p)
            key_len, p = decode_varint(raw, p)  # (any negative length is null, as in Kafka's readFrom)
            if p + max(key_len, 0) > record_end:
                return -(i + 1)
            value_len, p = decode_varint(raw, p + max(key_len, 0))
            if p + max(value_len, 0) > record_end:
                return -(i + 1)
            headers, p = decode_varint(raw, p + max(value_len, 0))
            if headers < 0:
                return -(i + 1)
            for _ in range(headers):
                hkey_len, p = decode_varint(raw, p)
                if hkey_len < 0 or p + hkey_len > record_end:
                    return -(i + 1)
                hvalue_len, p = decode_varint(raw, p + hkey_len)
                if p + max(hvalue_len, 0) > record_end:
                    return -(i + 1)
                p += max(hvalue_len, 0)
        except (IndexError, ValueError):
            return -(i + 1)
        if p != record_end:
            return -(i + 1)
        if delta != i:
            flags |= RENUMBER
        if key_len < 0:
            flags |= NULL_KEY
        pos = record_end
    return flags if pos == end else -(count + 1)


def _check_batch_records(buf: bytes | bytearray | memoryview, pos: int, size: int, attributes: int, count: int,
                         target: CompressionType | None, config: LogConfig, batch_index: int) -> bytearray | None:
    """The records of the (non-control) batch at ``buf[pos:pos + size]``, its CRC already checked: decompressed
    when compressed, scanned, keys checked on a compacted topic. A new batch when it is to be stored otherwise (the
    topic's codec, or a compressed batch's offset deltas renumbered), else None."""
    block = memoryview(buf)[pos + HEADER_SIZE:pos + size]
    source = attributes & COMPRESSION_MASK
    if source not in _CODECS:
        raise InvalidRecordError(f"batch {batch_index} names compression codec {source}, which does not exist")
    try:
        raw = decompress(source, block) if source else block
    except ValueError as e:
        raise InvalidRecordError(f"cannot decompress the {CompressionType(source).config_name} records of batch "
                                 f"{batch_index}: {e}") from None
    flags = scan_records(raw, count)
    if flags < 0:
        if flags == -(count + 1):
            raise InvalidRecordError(f"batch {batch_index} has bytes after the {count} records it declares")
        raise InvalidRecordError(f"record {-flags - 1} of the {count} of batch {batch_index} does not parse "
                                 f"(Found invalid record structure)")
    if flags & NULL_KEY and config.compact_enabled:
        raise _metered(InvalidRecordError(f"Compacted topic cannot accept message without key (batch {batch_index})"),
                       NO_KEY_COMPACTED_TOPIC)
    codec = source if target is None else target
    if codec == source and not (source and flags & RENUMBER):
        return None
    if flags & RENUMBER:
        raw = _renumbered(raw, count)
    data = compress(codec, raw, _level(config, codec)) if codec else raw
    out = bytearray(HEADER_SIZE + len(data))
    out[:HEADER_SIZE] = memoryview(buf)[pos:pos + HEADER_SIZE]
    out[HEADER_SIZE:] = data
    _BATCH_LENGTH.pack_into(out, 8, len(out) - LOG_OVERHEAD)
    _ATTRIBUTES.pack_into(out, ATTRIBUTES_OFFSET, (attributes & ~COMPRESSION_MASK) | codec)
    _CRC.pack_into(out, CRC_OFFSET, compute_crc(out, 0, len(out)))
    if len(out) > config.max_message_bytes:
        raise MessageTooLargeError(
            f"batch of {len(out)} bytes once compressed with {CompressionType(codec).config_name} exceeds "
            f"max.message.bytes {config.max_message_bytes}"
        )
    return out


def _renumbered(raw: bytes | memoryview, count: int) -> bytes:
    """``raw`` (an uncompressed records block of ``count`` records that parse) with offset deltas 0, 1, 2 ..."""
    pos = 0
    mv = memoryview(raw)
    parts: list[bytes | memoryview] = []
    for i in range(count):
        length, body = decode_varint(raw, pos)
        _, p = decode_varlong(raw, body + 1)  # attributes (1 byte), timestampDelta
        _, rest = decode_varint(raw, p)
        new_body = b"".join((mv[body:p], varint_bytes(i), mv[rest:body + length]))
        parts += (varint_bytes(len(new_body)), new_body)
        pos = body + length
    return b"".join(parts)


def _level(config: LogConfig, codec: CompressionType) -> int | None:
    if codec is CompressionType.GZIP:
        return config.compression_gzip_level
    if codec is CompressionType.LZ4:
        return config.compression_lz4_level
    if codec is CompressionType.ZSTD:
        return config.compression_zstd_level
    return None


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
