"""Log: append/read round trips, offsets, roll, OFFSET_OUT_OF_RANGE, validation errors, timestamps."""

from __future__ import annotations

import os
import struct

import pytest

from strom.common.error_codes import (
    CorruptMessageError,
    InvalidRecordError,
    InvalidTimestampError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
    RecordListTooLargeError,
    UnsupportedForMessageFormatError,
)
from strom.common.structs import TopicPartition
from strom.record.header import compute_crc, parse_header
from strom.storage.log import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP, parse_topic_partition
from strom.storage.log_validator import AppendOrigin

from ._batches import T0, build_batch, sized_batch, split_batches

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]


def append_n(lg, n, records_per_batch=1, size=None):
    infos = []
    for _ in range(n):
        batch = sized_batch(size, records_per_batch) if size else build_batch([b"v"] * records_per_batch)
        infos.append(lg.append_as_leader(batch))
        lg.update_high_watermark(lg.log_end_offset)
    return infos


def test_append_assigns_offsets_and_read_returns_same_bytes(make_log):
    lg = make_log()
    b1 = build_batch([b"a", b"b", b"c"], base_offset=999)
    b2 = build_batch([b"d"])
    i1 = lg.append_as_leader(b1, leader_epoch=7)
    i2 = lg.append_as_leader(b2, leader_epoch=7)
    assert (i1.first_offset, i1.last_offset, i1.num_records, i1.valid_bytes) == (0, 2, 3, len(b1))
    assert (i2.first_offset, i2.last_offset) == (3, 3)
    assert i1.log_append_time == -1 and i1.max_timestamp == T0 and i1.log_start_offset == 0
    assert lg.log_end_offset == 4
    data = lg.read(0, 1 << 20).records
    batches = split_batches(data)
    assert [(b, last) for b, last, _ in batches] == [(0, 2), (3, 3)]
    h = parse_header(batches[0][2])
    assert h.partition_leader_epoch == 7
    assert h.crc == compute_crc(batches[0][2])  # baseOffset/epoch are outside the CRC
    # bytes after the header are exactly what the producer sent
    assert batches[0][2][21:] == b1[21:] and batches[1][2][21:] == b2[21:]


def test_read_starts_at_batch_containing_offset(make_log):
    lg = make_log()
    lg.append_as_leader(build_batch([b"a"] * 5))  # 0..4
    lg.append_as_leader(build_batch([b"b"] * 5))  # 5..9
    r = lg.read(7, 1 << 20)
    assert [b for b, _, _ in split_batches(r.records)] == [5]
    assert r.first_batch_base_offset == 5 and r.fetch_offset == 7
    assert split_batches(lg.read(4, 1 << 20).records)[0][0] == 0


def test_read_max_bytes_whole_batches_and_min_one_message(make_log):
    lg = make_log()
    batch = sized_batch(1000)
    for _ in range(5):
        lg.append_as_leader(batch)
    size = len(batch)
    assert len(split_batches(lg.read(0, 2 * size + 10).records)) == 2
    assert len(split_batches(lg.read(0, 10).records)) == 1  # min_one_message
    assert lg.read(0, 10, min_one_message=False).records == b""
    assert len(split_batches(lg.read(0, size, min_one_message=False).records)) == 1


def test_read_respects_max_offset(make_log):
    lg = make_log()
    append_n(lg, 5)
    r = lg.read(0, 1 << 20, max_offset=3)
    assert [b for b, _, _ in split_batches(r.records)] == [0, 1, 2]
    assert lg.read(3, 1 << 20, max_offset=3).records == b""
    assert lg.read(4, 1 << 20, max_offset=3).records == b""


def test_offset_out_of_range_and_read_at_end(make_log):
    lg = make_log()
    append_n(lg, 3)
    assert lg.read(3, 100).records == b""
    with pytest.raises(OffsetOutOfRangeError):
        lg.read(4, 100)
    with pytest.raises(OffsetOutOfRangeError):
        lg.read(-1, 100)
    lg.delete_records_before(2)
    with pytest.raises(OffsetOutOfRangeError):
        lg.read(1, 100)
    assert split_batches(lg.read(2, 100).records)[0][0] == 2


def test_roll_by_size(make_log):
    batch = sized_batch(1000)
    lg = make_log({"segment.bytes": str(3 * len(batch))})
    for _ in range(7):
        lg.append_as_leader(batch)
    assert [s.base_offset for s in lg.segments] == [0, 3, 6]
    assert all(s.size <= 3 * len(batch) for s in lg.segments)
    for off in range(7):
        assert split_batches(lg.read(off, 1 << 20).records)[0][0] == off
    names = sorted(os.listdir(lg.dir))
    assert "00000000000000000003.log" in names and "00000000000000000006.timeindex" in names


def test_roll_by_time(make_log, mock_time):
    lg = make_log({"segment.ms": "1000"})
    lg.append_as_leader(build_batch([b"a"]))
    mock_time.sleep(1000)
    lg.append_as_leader(build_batch([b"b"]))
    assert lg.num_segments == 1
    mock_time.sleep(1)
    lg.append_as_leader(build_batch([b"c"]))
    assert [s.base_offset for s in lg.segments] == [0, 2]
    # an empty active segment does not roll however old it is; the clock starts at its first append
    lg.roll()
    assert lg.num_segments == 3
    mock_time.sleep(5000)
    assert lg.roll() is lg.active_segment and lg.num_segments == 3
    lg.append_as_leader(build_batch([b"d"]))
    lg.append_as_leader(build_batch([b"e"]))
    assert [s.base_offset for s in lg.segments] == [0, 2, 3]


def test_roll_when_index_full(make_log):
    lg = make_log({"segment.index.bytes": "16", "index.interval.bytes": "0"})
    append_n(lg, 10)
    assert lg.num_segments > 1
    for seg in lg.segments:
        assert seg.offset_index.entries <= 2
    for off in range(10):
        assert split_batches(lg.read(off, 1 << 20).records)[0][0] == off


def test_explicit_roll(make_log):
    lg = make_log()
    append_n(lg, 2)
    seg = lg.roll()
    assert seg.base_offset == 2 and lg.num_segments == 2
    append_n(lg, 1)
    assert lg.read(2, 100).segment_base_offset == 2


def test_log_append_time(make_log, mock_time):
    lg = make_log({"message.timestamp.type": "LogAppendTime"})
    batch = build_batch([b"a", b"b"], base_timestamp=T0 - 10_000)
    now = mock_time.milliseconds()
    info = lg.append_as_leader(batch)
    assert info.log_append_time == now and info.max_timestamp == now and info.offset_of_max_timestamp == 0
    stored = lg.read(0, 1 << 20).records
    h = parse_header(stored)
    assert h.timestamp_type == 1 and h.max_timestamp == now and h.crc == compute_crc(stored)
    lg.update_high_watermark(lg.log_end_offset)
    assert lg.fetch_offset_by_timestamp(now) == (0, now)


def test_max_message_bytes(make_log):
    lg = make_log({"max.message.bytes": "500"})
    lg.append_as_leader(sized_batch(500))
    with pytest.raises(MessageTooLargeError) as exc:
        lg.append_as_leader(sized_batch(501))
    assert exc.value.errno == 10
    assert lg.log_end_offset == 1


def test_payload_larger_than_segment(make_log):
    lg = make_log({"segment.bytes": "1000"})
    with pytest.raises(RecordListTooLargeError):
        lg.append_as_leader(sized_batch(1001))


def test_crc_error_writes_nothing(make_log):
    lg = make_log()
    good = build_batch([b"ok"])
    bad = bytearray(build_batch([b"hello"]))
    bad[-1] ^= 0xFF
    size_before = lg.size_in_bytes
    with pytest.raises(CorruptMessageError):
        lg.append_as_leader(good + bytes(bad))
    assert lg.log_end_offset == 0 and lg.size_in_bytes == size_before == 0
    assert os.path.getsize(lg.active_segment.log.path) == 0


@pytest.mark.parametrize(
    "payload, error",
    [
        (build_batch([b"a"])[:40], CorruptMessageError),  # truncated header
        (build_batch([b"a"])[:-1], CorruptMessageError),  # partial batch
        (build_batch([b"a"], magic=1), UnsupportedForMessageFormatError),
        (build_batch([b"a"], magic=3), CorruptMessageError),
        (build_batch([b"a", b"b"], records_count=3), InvalidRecordError),
        (build_batch([b"a", b"b"], last_offset_delta=5), InvalidRecordError),
        (build_batch([b"a"], attributes=0x20), InvalidRecordError),  # control batch from a client
        (build_batch([b"a"], producer_id=5, producer_epoch=0), InvalidRecordError),  # a producer id, no sequence
        (build_batch([b"a"], attributes=0x08), InvalidTimestampError),  # LogAppendTime set by the producer
    ],
)
def test_invalid_payloads(make_log, payload, error):
    lg = make_log()
    with pytest.raises(error):
        lg.append_as_leader(payload)
    assert lg.log_end_offset == 0 and lg.size_in_bytes == 0


def test_bad_batch_length(make_log):
    lg = make_log()
    batch = bytearray(build_batch([b"a"]))
    struct.pack_into(">i", batch, 8, 10)
    with pytest.raises(CorruptMessageError):
        lg.append_as_leader(batch)


def test_control_batch_from_coordinator(make_log):
    lg = make_log()
    info = lg.append_as_leader(build_batch([b"m"], attributes=0x30), origin=AppendOrigin.COORDINATOR)
    assert info.first_offset == 0


def test_timestamp_bounds(make_log, mock_time):
    lg = make_log({"message.timestamp.difference.max.ms": "1000"})
    now = mock_time.milliseconds()
    lg.append_as_leader(build_batch([b"a"], base_timestamp=now - 1000))
    with pytest.raises(InvalidTimestampError):
        lg.append_as_leader(build_batch([b"a"], base_timestamp=now - 1001))
    with pytest.raises(InvalidTimestampError):
        lg.append_as_leader(build_batch([b"a", b"b"], timestamps=[now, now + 5000]))


@pytest.mark.parametrize("compression", [0, 1])
def test_timestamp_bounds_hold_for_every_record(make_log, mock_time, compression: int) -> None:
    """Kafka checks each record's timestamp: a record older than the limit in the middle of a batch (out of order,
    below the batch's first timestamp) refuses the batch, compressed or not."""
    lg = make_log({"message.timestamp.before.max.ms": "1000", "message.timestamp.after.max.ms": "1000"})
    now = mock_time.milliseconds()
    ok = build_batch([b"a", b"b", b"c"], timestamps=[now, now - 900, now + 900], compression=compression)
    assert lg.append_as_leader(ok).num_records == 3
    for bad in ([now, now - 1001, now], [now, now + 1001, now - 5]):
        with pytest.raises(InvalidTimestampError, match="record 1"):
            lg.append_as_leader(build_batch([b"a", b"b", b"c"], timestamps=bad, compression=compression))
    assert lg.log_end_offset == 3  # nothing of the refused batches was written


def test_multi_batch_payload_and_compressed(make_log):
    lg = make_log()
    payload = build_batch([b"a", b"b"]) + build_batch([b"c"] * 3, compression=1) + build_batch([b"d"])
    info = lg.append_as_leader(payload)
    assert (info.first_offset, info.last_offset, info.num_records, info.num_batches) == (0, 5, 6, 3)
    assert [(b, last) for b, last, _ in split_batches(lg.read(0, 1 << 20).records)] == [
        (0, 1),
        (2, 4),
        (5, 5),
    ]


def test_empty_payload_is_a_noop(make_log):
    lg = make_log()
    info = lg.append_as_leader(b"")
    assert info.num_records == 0 and lg.log_end_offset == 0


def test_fetch_offset_by_timestamp(make_log):
    lg = make_log({"index.interval.bytes": "1"})
    lg.append_as_leader(build_batch([b"a", b"b", b"c"], timestamps=[T0 + 10, T0 + 20, T0 + 30]))  # 0..2
    lg.append_as_leader(build_batch([b"d", b"e"], timestamps=[T0 + 40, T0 + 25]))  # 3..4
    lg.append_as_leader(build_batch([b"f", b"g"], timestamps=[T0 + 50, T0 + 60], compression=1))  # 5..6
    lg.update_high_watermark(lg.log_end_offset)
    assert lg.fetch_offset_by_timestamp(T0) == (0, T0 + 10)
    assert lg.fetch_offset_by_timestamp(T0 + 15) == (1, T0 + 20)
    assert lg.fetch_offset_by_timestamp(T0 + 30) == (2, T0 + 30)
    assert lg.fetch_offset_by_timestamp(T0 + 31) == (3, T0 + 40)
    assert lg.fetch_offset_by_timestamp(T0 + 50) == (5, T0 + 50)  # compressed: its records are read too
    assert lg.fetch_offset_by_timestamp(T0 + 55) == (6, T0 + 60)  # ... to the record, as Kafka
    assert lg.fetch_offset_by_timestamp(T0 + 61) is None
    assert lg.fetch_offset_by_timestamp(EARLIEST_TIMESTAMP) == (0, -1)
    assert lg.fetch_offset_by_timestamp(LATEST_TIMESTAMP) == (7, -1)
    assert lg.fetch_offset_by_timestamp(MAX_TIMESTAMP) == (6, T0 + 60)


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_fetch_offset_by_timestamp_reads_compressed_records(make_log, codec: str) -> None:
    from strom.record.builder import MemoryRecordsBuilder
    from strom.record.compression import CompressionType

    lg = make_log()
    b = MemoryRecordsBuilder(CompressionType.from_name(codec))
    for ts in (T0 + 10, T0 + 40, T0 + 20, T0 + 30):  # out of order within the batch
        b.append(ts, None, b"v")
    lg.append_as_leader(bytes(b.build()))
    lg.update_high_watermark(lg.log_end_offset)
    assert lg.fetch_offset_by_timestamp(T0 + 15) == (1, T0 + 40)  # the first record at or after, not the batch
    assert lg.fetch_offset_by_timestamp(T0 + 35) == (1, T0 + 40)
    assert lg.fetch_offset_by_timestamp(T0 + 41) is None
    assert lg.fetch_offset_by_timestamp(MAX_TIMESTAMP) == (1, T0 + 40)


def test_fetch_offset_by_timestamp_across_segments_and_hw(make_log):
    lg = make_log({"segment.bytes": "300", "index.interval.bytes": "1"})
    for i in range(20):
        lg.append_as_leader(build_batch([b"x" * 50], base_timestamp=T0 + i * 10))
    assert lg.num_segments > 3
    lg.update_high_watermark(15)
    for i in range(15):
        assert lg.fetch_offset_by_timestamp(T0 + i * 10 - 5) == (i, T0 + i * 10)
    assert lg.fetch_offset_by_timestamp(T0 + 150) is None  # above the high watermark
    assert lg.fetch_offset_by_timestamp(LATEST_TIMESTAMP) == (15, -1)
    assert lg.fetch_offset_by_timestamp(MAX_TIMESTAMP) == (19, T0 + 190)
    assert lg.fetch_offset_by_timestamp(-7) is None


def test_max_timestamp_uncompressed_exact_record(make_log):
    lg = make_log()
    lg.append_as_leader(build_batch([b"a", b"b", b"c"], timestamps=[T0, T0 + 99, T0 + 5]))
    assert lg.fetch_offset_by_timestamp(MAX_TIMESTAMP) == (1, T0 + 99)


def test_high_watermark_clamped(make_log):
    lg = make_log()
    append_n(lg, 3)
    assert lg.update_high_watermark(10) == 3
    assert lg.update_high_watermark(-5) == 0


def test_flush_messages_advances_recovery_point(make_log):
    lg = make_log({"flush.messages": "3"})
    append_n(lg, 2)
    assert lg.recovery_point == 0
    append_n(lg, 1)
    assert lg.recovery_point == 3
    lg.append_as_leader(build_batch([b"a"]))
    assert lg.recovery_point == 3 and lg.unflushed_messages == 1
    lg.flush()
    assert lg.recovery_point == 4


def test_flush_up_to_offset(make_log):
    lg = make_log({"segment.bytes": "200"})
    append_n(lg, 10, size=100)
    lg.flush(4)
    assert lg.recovery_point == 4
    lg.flush(100)
    assert lg.recovery_point == 10


def test_truncate_to(make_log):
    lg = make_log({"segment.bytes": "300"})
    append_n(lg, 10, size=100)
    segs_before = lg.num_segments
    assert lg.truncate_to(5)
    assert lg.log_end_offset == 5 and lg.high_watermark == 5
    assert lg.num_segments < segs_before
    assert [b for b, _, _ in split_batches(lg.read(0, 1 << 20).records)][-1] <= 4
    info = lg.append_as_leader(build_batch([b"new"]))
    assert info.first_offset == 5
    assert not lg.truncate_to(100)
    lg.truncate_to(0)
    assert lg.log_end_offset == 0 and lg.size_in_bytes == 0


def test_truncate_fully_and_start_at(make_log):
    lg = make_log()
    append_n(lg, 3)
    lg.truncate_fully_and_start_at(100)
    assert (lg.log_start_offset, lg.log_end_offset, lg.num_segments) == (100, 100, 1)
    assert lg.append_as_leader(build_batch([b"a"])).first_offset == 100


def test_parse_topic_partition():
    assert parse_topic_partition("/x/my.topic-with-dash-12") == TopicPartition("my.topic-with-dash", 12)
    for bad in ("topic", "topic-", "-3", "topic-x", "topic-01", "t-0.abcdef-delete"):
        with pytest.raises(ValueError):
            parse_topic_partition(bad)


def test_closed_log_rejects(make_log):
    from strom.common.error_codes import KafkaStorageError

    lg = make_log()
    lg.close()
    with pytest.raises(KafkaStorageError):
        lg.append_as_leader(build_batch([b"a"]))
