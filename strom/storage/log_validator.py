"""Validate a produced payload of RecordBatch v2 and assign offsets, without decoding records.

Kafka counterpart: ``LogValidator`` (the in-place path ``assignOffsetsNonCompressed`` /
``validateMessagesAndAssignOffsetsCompressed`` without recompression) plus the size checks of
``UnifiedLog.analyzeAndValidateRecords``.

Per batch: a whole header (61 bytes) and a ``batchLength`` that fits the payload, magic 2, the CRC-32C, size
<= ``max.message.bytes`` (MESSAGE_TOO_LARGE, code 10, as Kafka), ``recordsCount == lastOffsetDelta + 1`` and > 0,
no control batch from a client, and for CreateTime topics ``baseTimestamp``/``maxTimestamp`` within
``message.timestamp.before/after.max.ms`` of broker time (Kafka checks every record; we check the batch bounds,
which cover them as long as ``baseTimestamp`` is the first record's timestamp). Then, in a private copy of the
payload: baseOffset and partitionLeaderEpoch are rewritten, and for LogAppendTime topics maxTimestamp, the
timestamp-type attribute bit and the CRC. Compressed batches are handled the same way: they are stored as the
producer compressed them (``compression.type`` other than ``producer`` is not enforced: no recompression).

For compacted topics every record must have a key (INVALID_RECORD, "Compacted topic cannot accept message
without key", as Kafka's ``validateKey``): the records are decoded (decompressed) for that check only.

Any failure raises before anything is written. Pure function, thread-safe.
"""

from __future__ import annotations

import enum
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
from strom.record.header import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    compute_crc,
    parse_header,
    set_base_offset,
    set_max_timestamp_log_append,
    set_partition_leader_epoch,
)
from strom.storage.log_config import LONG_MAX, LogConfig

__all__ = ["AppendOrigin", "ValidationResult", "validate_and_assign_offsets", "validate_replicated"]

_MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD
NO_TIMESTAMP = -1


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
        if check_ts:
            for ts in (h.base_timestamp, h.max_timestamp):
                if ts != NO_TIMESTAMP and (ts < now_ms - before_max or ts > now_ms + after_max):
                    raise InvalidTimestampError(
                        f"timestamp {ts} is out of range of broker time {now_ms} "
                        f"(-{before_max} ms .. +{after_max} ms)"
                    )
        last = offset + h.last_offset_delta
        set_base_offset(buf, offset, pos)
        set_partition_leader_epoch(buf, leader_epoch, pos)
        if log_append:
            set_max_timestamp_log_append(buf, now_ms, pos)
        elif h.max_timestamp > max_ts:
            max_ts, offset_of_max_ts = h.max_timestamp, last
        num_records += h.records_count
        num_batches += 1
        offset = last + 1
        pos += size
    if log_append and num_batches:
        max_ts, offset_of_max_ts = now_ms, next_offset
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
