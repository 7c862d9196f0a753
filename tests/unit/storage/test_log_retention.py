"""Retention by time and size, DeleteRecords, delayed file deletion, compact-only topics."""

from __future__ import annotations

import os

import pytest

from strom.common.error_codes import OffsetOutOfRangeError

from ._batches import T0, build_batch, sized_batch

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]


def fill(lg, n, size=100, ts_step=0, mock_time=None):
    for i in range(n):
        ts = (mock_time.milliseconds() if mock_time else T0) + i * ts_step
        lg.append_as_leader(sized_batch(size, ts=ts))
    lg.update_high_watermark(lg.log_end_offset)


def log_files(lg):
    return sorted(n for n in os.listdir(lg.dir) if n.endswith(".log"))


def test_retention_by_time(make_log, mock_time):
    lg = make_log({"segment.bytes": "300", "retention.ms": "10000", "file.delete.delay.ms": "0"})
    now = mock_time.milliseconds()
    for i in range(9):  # 3 batches per segment; segment k's batches carry timestamp now + 1000 * k
        lg.append_as_leader(sized_batch(100, ts=now + 1000 * (i // 3)))
    lg.update_high_watermark(lg.log_end_offset)
    assert [s.base_offset for s in lg.segments] == [0, 3, 6]
    assert lg.delete_old_segments() == 0
    mock_time.sleep(10_001)
    assert lg.delete_old_segments() == 1
    assert lg.log_start_offset == 3 and log_files(lg) == [
        "00000000000000000003.log",
        "00000000000000000006.log",
    ]
    with pytest.raises(OffsetOutOfRangeError):
        lg.read(2, 1000)
    mock_time.sleep(10_000)
    # every segment expired: the active one is rolled away, an empty segment at the log end remains
    assert lg.delete_old_segments() == 2
    assert (lg.log_start_offset, lg.log_end_offset, lg.num_segments, lg.size_in_bytes) == (9, 9, 1, 0)
    assert lg.append_as_leader(sized_batch(100)).first_offset == 9


def test_retention_by_time_stops_at_first_young_segment(make_log, mock_time):
    lg = make_log({"segment.bytes": "300", "retention.ms": "5000", "file.delete.delay.ms": "0"})
    now = mock_time.milliseconds()
    stamps = [now, now, now, now + 9000, now + 9000, now + 9000, now, now, now]
    for ts in stamps:
        lg.append_as_leader(sized_batch(100, ts=ts))
    lg.update_high_watermark(lg.log_end_offset)
    mock_time.sleep(6000)
    assert lg.delete_old_segments() == 1  # the third (old) segment stays behind the young second one
    assert [s.base_offset for s in lg.segments] == [3, 6]


def test_retention_by_size(make_log):
    lg = make_log({"segment.bytes": "300", "retention.bytes": "650", "file.delete.delay.ms": "0"})
    fill(lg, 10)  # segments of 300, 300, 300, 100 bytes
    assert lg.size_in_bytes == 1000
    # whole segments only, and never below retention.bytes: 1000 -> 700 (a second would leave 400 < 650)
    assert lg.delete_old_segments() == 1
    assert lg.size_in_bytes == 700 and lg.log_start_offset == 3
    lg.update_config(lg.config.from_props({"retention.bytes": "400"}, lg.config))
    assert lg.delete_old_segments() == 1
    assert lg.size_in_bytes == 400 and lg.log_start_offset == 6


def test_retention_respects_high_watermark(make_log, mock_time):
    lg = make_log({"segment.bytes": "300", "retention.ms": "1", "file.delete.delay.ms": "0"})
    fill(lg, 6, mock_time=mock_time)
    lg.update_high_watermark(2)
    mock_time.sleep(100)
    assert lg.delete_old_segments() == 0
    lg.update_high_watermark(3)
    assert lg.delete_old_segments() == 1


def test_infinite_retention_and_compact_only(make_log, mock_time):
    lg = make_log({"segment.bytes": "300", "retention.ms": "-1"})
    fill(lg, 6)
    mock_time.sleep(10**9)
    assert lg.delete_old_segments() == 0
    lg2 = make_log({"segment.bytes": "300", "retention.ms": "1", "cleanup.policy": "compact"}, dir_name="c-0")
    for i in range(6):  # a compacted topic takes keyed records only
        lg2.append_as_leader(build_batch([b"x" * 60], keys=[b"k%d" % i]))
    lg2.update_high_watermark(lg2.log_end_offset)
    assert lg2.num_segments > 1
    mock_time.sleep(100)
    assert lg2.delete_old_segments() == 0


def test_delete_records_before(make_log):
    lg = make_log({"segment.bytes": "300", "file.delete.delay.ms": "0"})
    fill(lg, 9)
    assert lg.delete_records_before(4) == 4
    assert lg.log_start_offset == 4 and [s.base_offset for s in lg.segments] == [3, 6]
    with pytest.raises(OffsetOutOfRangeError):
        lg.read(3, 1000)
    assert lg.read(4, 100).first_batch_base_offset == 4
    assert lg.delete_records_before(2) == 4  # never moves backwards
    with pytest.raises(OffsetOutOfRangeError):
        lg.delete_records_before(10)
    assert lg.delete_records_before(-1) == 9  # -1 = high watermark
    assert lg.num_segments == 1 and lg.read(9, 100).records == b""


def test_deleted_files_wait_for_delay(make_log, mock_time):
    lg = make_log({"segment.bytes": "300", "file.delete.delay.ms": "1000"})
    fill(lg, 6)
    lg.delete_records_before(3)
    names = os.listdir(lg.dir)
    assert "00000000000000000000.log.deleted" in names and "00000000000000000000.index.deleted" in names
    assert lg.purge_deleted_segments() == 0
    mock_time.sleep(1000)
    assert lg.purge_deleted_segments() == 1
    assert not any(n.endswith(".deleted") for n in os.listdir(lg.dir))
