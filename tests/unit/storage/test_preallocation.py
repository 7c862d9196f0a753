"""Blocks reserved ahead of a segment's writes (``fallocate`` with ``FALLOC_FL_KEEP_SIZE``) and given back.

A busy segment reserves its blocks a chunk ahead of the writes once it holds ``PREALLOCATE_AFTER`` bytes; a topic
with ``preallocate=true`` reserves a new segment whole, as Kafka's ``log.preallocate``. The file's size is always
what was written, so reads, recovery and the segment's cached size never see the reserved range; a rolled segment's
flush and a close give the blocks back. Measured on real files in the test's temporary directory (ext4 here and in
CI): ``st_blocks`` counts the blocks a file holds, reserved ones included.
"""

from __future__ import annotations

import errno
import os
import threading

from strom.storage import file_records
from strom.storage.file_records import PREALLOCATE_AFTER, PREALLOCATE_CHUNK, FileRecords
from strom.storage.fs import reserve_blocks
from strom.storage.log import Log
from strom.storage.log_config import LogConfig
from strom.storage.log_segment import LogSegment, log_file_name

from ._batches import build_batch
from .conftest import mount_tmpfs, unmount

BLOCK = 4096
SLACK = 4 * BLOCK  # st_blocks also counts the filesystem's own blocks of a file (an ext4 extent-tree block)


def held(path: str) -> int:
    """Bytes of blocks the file holds on disk."""
    return os.stat(path).st_blocks * 512


def past_end(path: str) -> int:
    """Bytes of blocks held past the file's (block-rounded) end."""
    size = os.stat(path).st_size
    return held(path) - -(-size // BLOCK) * BLOCK


def nothing_past_end(path: str) -> bool:
    return past_end(path) < SLACK


def test_a_growing_file_reserves_a_chunk_ahead_once_it_holds_a_mebibyte(tmp_path):
    fr = FileRecords(str(tmp_path / "a.log"))
    chunk = os.urandom(256 << 10)
    while fr.size < PREALLOCATE_AFTER:
        fr.append(chunk)
        assert nothing_past_end(fr.path)  # small files reserve nothing
    fr.append(chunk)  # the first append past the threshold reserves min(CHUNK, size) from the end
    assert os.stat(fr.path).st_size == fr.size == PREALLOCATE_AFTER + len(chunk)
    assert fr.reserved_past_end == PREALLOCATE_AFTER - len(chunk)
    assert past_end(fr.path) >= fr.reserved_past_end
    while fr.size < 3 * PREALLOCATE_CHUNK:
        fr.append(chunk)
        assert 0 <= fr.reserved_past_end <= PREALLOCATE_CHUNK
        assert os.stat(fr.path).st_size == fr.size
    assert fr.read(0, fr.size) == chunk * (fr.size // len(chunk))
    fr.trim()
    assert fr.reserved_past_end == 0 and nothing_past_end(fr.path)
    assert fr.read(0, fr.size) == chunk * (fr.size // len(chunk))  # trimming keeps every written byte
    fr.append(b"x" * 10)
    fr.close()
    assert nothing_past_end(fr.path) and os.stat(fr.path).st_size == 3 * PREALLOCATE_CHUNK + 10


def test_an_append_larger_than_the_chunk_reserves_all_of_itself(tmp_path):
    fr = FileRecords(str(tmp_path / "a.log"))
    fr.append(bytes(PREALLOCATE_AFTER))
    fr.append(os.urandom(PREALLOCATE_CHUNK * 2))
    assert os.stat(fr.path).st_size == fr.size and fr.reserved_past_end == 0
    fr.close()


def test_truncation_gives_back_the_reservation_and_appends_continue(tmp_path):
    fr = FileRecords(str(tmp_path / "a.log"))
    fr.append(bytes(PREALLOCATE_AFTER))
    fr.append(b"a" * 1000)
    assert fr.reserved_past_end > 0
    fr.truncate_to(PREALLOCATE_AFTER + 10)
    assert fr.reserved_past_end == 0 and nothing_past_end(fr.path)
    fr.append(b"b" * 5)
    assert fr.read(PREALLOCATE_AFTER, 15) == b"a" * 10 + b"b" * 5
    fr.close()


def test_trim_from_another_thread_never_cuts_an_append(tmp_path):
    """The flusher trims rolled segments in its thread while the event loop appends: the trim must not cut the
    file back under an append that went past the size it read (without the lock this loses data within a few
    thousand rounds)."""
    fr = FileRecords(str(tmp_path / "a.log"))
    fr.append(bytes(PREALLOCATE_AFTER))
    stop = threading.Event()

    def trimmer() -> None:
        while not stop.is_set():
            fr.trim()

    t = threading.Thread(target=trimmer)
    t.start()
    try:
        expected = bytearray()
        for i in range(20_000):
            piece = bytes([i % 251]) * (1 + i % 97)
            fr.append(piece)
            expected += piece
    finally:
        stop.set()
        t.join()
    assert os.stat(fr.path).st_size == fr.size == PREALLOCATE_AFTER + len(expected)
    assert fr.read(PREALLOCATE_AFTER, len(expected)) == bytes(expected)
    fr.close()


def test_blocks_left_reserved_by_a_killed_broker_are_given_back_by_the_next_trim(tmp_path):
    """kill -9 leaves the active segment's reservation behind (no trim ran): reopened, the file knows its blocks
    reach past its end, and the roll's (or close's) trim frees them."""
    path = str(tmp_path / "a.log")
    with open(path, "wb") as f:
        f.write(b"x" * 5000)
        assert reserve_blocks(f.fileno(), 5000, 8 << 20) == 0  # what the dead process had reserved
    assert past_end(path) >= (8 << 20) - BLOCK
    fr = FileRecords(path)
    assert fr.size == 5000 and fr.reserved_past_end > 0
    fr.append(b"y" * 10)
    fr.close()
    assert nothing_past_end(path) and os.stat(path).st_size == 5010
    with open(path, "rb") as f:
        assert f.read() == b"x" * 5000 + b"y" * 10


def test_a_filesystem_that_refuses_stops_being_asked_and_appends_go_on(tmp_path, monkeypatch):
    calls = []

    def refuse(fd: int, offset: int, length: int) -> int:
        calls.append(length)
        return errno.EOPNOTSUPP

    monkeypatch.setattr(file_records, "reserve_blocks", refuse)
    fr = FileRecords(str(tmp_path / "a.log"))
    for _ in range(8):
        fr.append(bytes(PREALLOCATE_AFTER))
    assert len(calls) == 1 and fr.reserved_past_end == 0
    assert os.stat(fr.path).st_size == 8 * PREALLOCATE_AFTER
    fr.close()


def test_a_full_disk_is_asked_once_per_chunk_not_on_every_append(tmp_path, monkeypatch):
    calls = []

    def full(fd: int, offset: int, length: int) -> int:
        calls.append((offset, length))
        return errno.ENOSPC

    monkeypatch.setattr(file_records, "reserve_blocks", full)
    fr = FileRecords(str(tmp_path / "a.log"))
    piece = os.urandom(64 << 10)
    appends = (12 << 20) // len(piece)
    for _ in range(appends):
        fr.append(piece)
    assert fr.size == appends * len(piece)
    assert 1 <= len(calls) <= 6  # past 1 MiB: at 1, 2, 4, 8 MiB, a chunk each
    assert fr.read(fr.size - len(piece), len(piece)) == piece
    fr.close()


def _segment(tmp_path, base: int, **props: str) -> LogSegment:
    from strom.testing.mock_time import MockTime

    return LogSegment(str(tmp_path), base, LogConfig.from_props(props), MockTime())


def test_preallocate_reserves_a_new_segment_whole_and_only_a_new_one(tmp_path):
    seg = _segment(tmp_path, 0, **{"preallocate": "true", "segment.bytes": str(8 << 20)})
    path = log_file_name(str(tmp_path), 0)
    assert os.stat(path).st_size == 0 and seg.size == 0
    assert held(path) >= 8 << 20  # the blocks are there; the file is still empty
    batch = build_batch([b"v"], keys=[b"k"])
    seg.append(0, 0, 0, batch)
    assert os.stat(path).st_size == len(batch)
    seg.close()  # a closed segment keeps no reservation
    assert nothing_past_end(path)
    again = _segment(tmp_path, 0, **{"preallocate": "true", "segment.bytes": str(8 << 20)})
    assert nothing_past_end(path) and again.next_offset == 1  # reopening an existing segment reserves nothing
    assert again.log.read(0, again.size) == batch
    again.close()
    plain = _segment(tmp_path, 100, **{"segment.bytes": str(8 << 20)})
    assert held(log_file_name(str(tmp_path), 100)) == 0  # the default, as Kafka's: no preallocation
    plain.close()


def test_a_rolled_segment_gives_its_reservation_back_when_flushed(tmp_path):
    from strom.testing.mock_time import MockTime

    lg = Log(str(tmp_path / "t-0"), LogConfig.from_props({"preallocate": "true", "segment.bytes": str(4 << 20)}),
             MockTime())
    value = os.urandom(100_000)
    while len(lg.segments) < 3:
        lg.append_as_leader(build_batch([value]))
    first, second, active = (s.log.path for s in lg.segments)
    assert held(active) >= 4 << 20  # the new active segment is reserved whole
    lg.flush()  # what the flusher does after a roll, off the event loop
    assert nothing_past_end(first) and nothing_past_end(second)
    assert held(active) >= 4 << 20  # the active segment keeps its reservation
    lg.truncate_to(lg.segments[1].base_offset + 1)  # a follower's truncation: the second is active again
    again = lg.segments[-1]
    assert again.log.path == second
    while again.log.reserved_past_end == 0:  # it grows past PREALLOCATE_AFTER and reserves a chunk
        lg.append_as_leader(build_batch([value]))
    lg.flush()
    assert again.log.reserved_past_end > 0 and past_end(second) >= SLACK  # the active segment's flush keeps it
    lg.close()
    for s in (first, second):
        assert nothing_past_end(s)


def test_preallocate_on_a_full_disk_reserves_nothing_and_appends_still_work(tmp_path):
    """A 2 MiB tmpfs cannot hold an 8 MiB segment: the reservation fails (ENOSPC) and the log works as without."""
    disk = tmp_path / "disk"
    assert mount_tmpfs(disk, "2m"), "the test needs root to mount a tmpfs (as in CI)"
    try:
        from strom.testing.mock_time import MockTime

        lg = Log(str(disk / "t-0"), LogConfig.from_props({"preallocate": "true", "segment.bytes": str(8 << 20)}),
                 MockTime())
        for i in range(10):
            lg.append_as_leader(build_batch([os.urandom(1000)], keys=[b"k%d" % i]))
        assert lg.log_end_offset == 10
        active = lg.segments[-1].log.path
        lg.close()
        assert nothing_past_end(active)  # whatever the failed reservation allocated is given back
        reopened = Log(str(disk / "t-0"), LogConfig.from_props({}), MockTime())
        assert reopened.log_end_offset == 10
        reopened.close()
    finally:
        unmount(disk)


def test_the_broker_level_log_preallocate_is_the_topics_default_and_is_validated():
    import pytest

    from strom.server.broker_config import BrokerConfig, ConfigError

    config = BrokerConfig({"log.preallocate": "true", "log.dirs": "/nonexistent"})
    assert LogConfig.from_broker_props(config.originals).preallocate is True
    assert LogConfig.from_broker_props(BrokerConfig({"log.dirs": "/x"}).originals).preallocate is False
    with pytest.raises(ConfigError, match="log.preallocate"):
        BrokerConfig({"log.preallocate": "sometimes", "log.dirs": "/nonexistent"})
