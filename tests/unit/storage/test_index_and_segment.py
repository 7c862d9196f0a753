"""OffsetIndex, TimeIndex and LogSegment in isolation."""

from __future__ import annotations

import os
import struct
import threading

import pytest

from strom.storage.index import CorruptIndexError, OffsetIndex, TimeIndex
from strom.storage.log_config import LogConfig
from strom.storage.log_segment import LogSegment

from ._batches import T0, build_batch, split_batches

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]


def test_offset_index_lookup_truncate_reload(tmp_path):
    path = str(tmp_path / "00000000000000000100.index")
    idx = OffsetIndex(path, 100, max_index_size=80)
    assert idx.lookup(150) == (100, 0)
    for i in range(5):
        idx.append(100 + 10 * (i + 1), 1000 * (i + 1))
    assert idx.entries == 5 and not idx.is_full()
    assert idx.lookup(99) == (100, 0)
    assert idx.lookup(110) == (110, 1000)
    assert idx.lookup(119) == (110, 1000)
    assert idx.lookup(10**6) == (150, 5000)
    with pytest.raises(ValueError):
        idx.append(150, 6000)  # offsets must grow
    with pytest.raises(ValueError):
        idx.append(99, 6000)  # below the base
    idx.truncate_to(130)
    assert idx.entries == 2 and idx.last_entry() == (120, 2000)
    idx.close()
    assert os.path.getsize(path) == 16
    with open(path, "rb") as f:
        assert struct.unpack(">iiii", f.read()) == (10, 1000, 20, 2000)
    idx2 = OffsetIndex(path, 100)
    assert idx2.entries == 2 and idx2.lookup(125) == (120, 2000)
    idx2.sanity_check(log_size=3000)
    with pytest.raises(CorruptIndexError):
        idx2.sanity_check(log_size=2000)  # an entry points at the end of the log
    idx2.close()


def test_offset_index_full(tmp_path):
    idx = OffsetIndex(str(tmp_path / "x.index"), 0, max_index_size=24)
    for i in range(3):
        idx.append(i, i * 10)
    assert idx.is_full()
    idx.close()


def test_offset_index_corrupt_files(tmp_path):
    path = tmp_path / "x.index"
    path.write_bytes(b"\x00" * 12)
    assert OffsetIndex(str(path), 0).corrupt_on_load
    path.write_bytes(struct.pack(">iiii", 5, 100, 3, 200))
    idx = OffsetIndex(str(path), 0)
    with pytest.raises(CorruptIndexError):
        idx.sanity_check(log_size=10**6)
    idx.close()


def test_time_index(tmp_path):
    path = str(tmp_path / "00000000000000000010.timeindex")
    ti = TimeIndex(path, 10)
    assert ti.lookup(T0) == (-1, 10)
    assert ti.maybe_append(T0 + 10, 12)
    assert not ti.maybe_append(T0 + 10, 14)  # timestamp did not grow
    assert ti.maybe_append(T0 + 30, 20)
    assert ti.lookup(T0 + 5) == (-1, 10)
    assert ti.lookup(T0 + 10) == (T0 + 10, 12)
    assert ti.lookup(T0 + 29) == (T0 + 10, 12)
    assert ti.lookup(T0 + 99) == (T0 + 30, 20)
    with pytest.raises(ValueError):
        ti.maybe_append(T0 + 40, 15)  # offsets never go back
    ti.truncate_to(20)
    assert ti.entries == 1 and ti.last_entry() == (T0 + 10, 12)
    ti.close()
    assert os.path.getsize(path) == 12
    ti2 = TimeIndex(path, 10)
    assert ti2.last_entry() == (T0 + 10, 12)
    ti2.sanity_check(last_offset=12)
    with pytest.raises(CorruptIndexError):
        ti2.sanity_check(last_offset=11)
    ti2.close()


def assigned(batch: bytes, base: int) -> bytes:
    buf = bytearray(batch)
    struct.pack_into(">q", buf, 0, base)
    return bytes(buf)


def test_segment_append_read_find(tmp_path, mock_time):
    config = LogConfig.from_props({"index.interval.bytes": "1"})
    seg = LogSegment(str(tmp_path), 50, config, mock_time)
    offset = 50
    batches = []
    for i in range(10):
        b = assigned(build_batch([b"r"] * 2, base_timestamp=T0 + i), offset)
        seg.append(offset + 1, T0 + i, offset + 1, b)
        batches.append(b)
        offset += 2
    assert seg.next_offset == 70 and seg.size == sum(map(len, batches))
    assert seg.offset_index.entries == 9  # every batch after the first
    assert seg.max_timestamp_so_far == T0 + 9 and seg.largest_timestamp == T0 + 9
    found = seg.find_offset_position(57)
    assert found is not None and found.header.base_offset == 56
    assert seg.find_offset_position(70) is None
    r = seg.read(55, 1)
    assert r is not None and split_batches(r.records) == [(54, 55, batches[2])]
    assert seg.read(70, 100) is None
    r = seg.read(50, 10**6, max_position=found.position)
    assert r is not None and len(split_batches(r.records)) == 3
    assert seg.find_offset_by_timestamp(T0 + 4) == (58, T0 + 4)
    assert seg.find_offset_by_timestamp(T0 + 4, starting_offset=59) == (59, T0 + 4)
    assert seg.find_offset_by_timestamp(T0 + 100) is None
    assert seg.truncate_to(60) == sum(map(len, batches[5:]))
    assert seg.next_offset == 60 and seg.max_timestamp_so_far == T0 + 4
    assert seg.recover() == 0 and seg.next_offset == 60
    seg.close()
    seg2 = LogSegment(str(tmp_path), 50, config, mock_time)
    assert seg2.next_offset == 60 and not seg2.rebuilt_indexes
    seg2.delete()
    assert os.listdir(tmp_path) == []


def test_segment_flush_concurrent_with_close(tmp_path, mock_time):
    seg = LogSegment(str(tmp_path), 0, LogConfig(), mock_time)
    seg.append(0, T0, 0, build_batch([b"x"]))
    errors: list[BaseException] = []

    def flusher() -> None:
        try:
            for _ in range(200):
                seg.flush()
        except BaseException as e:  # pragma: no cover - the assertion below reports it
            errors.append(e)

    t = threading.Thread(target=flusher)
    t.start()
    seg.close()
    t.join(10)
    assert not errors and not t.is_alive()
