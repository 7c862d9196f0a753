"""Restart and crash recovery: reopen, torn tails, garbage, CRC flips, corrupt indexes, leftovers."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strom.record.header import LOG_OVERHEAD
from strom.storage.log import Log
from strom.storage.log_config import LogConfig
from strom.storage.log_segment import log_file_name

from ._batches import build_batch, sized_batch, split_batches

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]

CONFIG = LogConfig.from_props({"segment.bytes": "600", "index.interval.bytes": "150"})


def fill(lg: Log, n: int = 30) -> list[bytes]:
    for i in range(n):
        lg.append_as_leader(
            build_batch([b"value-%d" % i] * (1 + i % 3), base_timestamp=1_700_000_000_000 + i)
        )
    lg.update_high_watermark(lg.log_end_offset)
    return read_all(lg)


def read_all(lg: Log) -> list[bytes]:
    out: list[bytes] = []
    offset = lg.log_start_offset
    while offset < lg.log_end_offset:
        data = lg.read(offset, 1 << 20).records
        batches = split_batches(data)
        out += [b for _, _, b in batches]
        offset = batches[-1][1] + 1
    return out


def reopen(path, mock_time, *, clean: bool, **kw) -> Log:
    return Log(str(path), CONFIG, mock_time, had_clean_shutdown=clean, **kw)


@pytest.mark.parametrize("clean", [True, False])
def test_reopen_gives_same_data_and_offsets(tmp_path, mock_time, clean):
    path = tmp_path / "t-0"
    lg = Log(str(path), CONFIG, mock_time)
    before = fill(lg)
    leo, segs = lg.log_end_offset, lg.num_segments
    assert segs > 3
    lg.close()
    lg2 = reopen(path, mock_time, clean=clean)
    assert lg2.log_end_offset == leo and lg2.num_segments == segs
    assert read_all(lg2) == before
    assert lg2.recovered_segments_on_load == (0 if clean else segs)
    assert lg2.append_as_leader(build_batch([b"more"])).first_offset == leo
    lg2.close()


def test_unclean_recovers_only_after_recovery_point(tmp_path, mock_time):
    path = tmp_path / "t-0"
    lg = Log(str(path), CONFIG, mock_time)
    fill(lg)
    lg.flush()
    bases = [s.base_offset for s in lg.segments]
    lg.close()
    lg2 = reopen(path, mock_time, clean=False, recovery_point=bases[-2])
    assert lg2.recovered_segments_on_load == 2
    lg2.close()


def test_a_recovery_keeps_the_recovery_point_until_a_flush(tmp_path, mock_time):
    """After a crash the recovered segments are not fsynced at load (Kafka's LogLoader): the recovery point stays
    what the checkpoint said, so a second crash before any flush recovers the same segments again; a flush then
    moves it to the log end."""
    path = tmp_path / "t-0"
    lg = Log(str(path), CONFIG, mock_time)
    fill(lg)
    bases = [s.base_offset for s in lg.segments]
    leo = lg.log_end_offset
    lg.close()
    lg2 = reopen(path, mock_time, clean=False, recovery_point=bases[-2])
    assert (lg2.recovered_segments_on_load, lg2.recovery_point) == (2, bases[-2])
    _crash_copy(lg2)
    lg3 = reopen(path, mock_time, clean=False, recovery_point=lg2.recovery_point)
    assert (lg3.recovered_segments_on_load, lg3.recovery_point, lg3.log_end_offset) == (2, bases[-2], leo)
    lg3.flush()
    assert lg3.recovery_point == leo
    lg3.close()
    # a checkpoint beyond the log end (a tail lost with the page cache) is cut to the log end
    lg4 = reopen(path, mock_time, clean=False, recovery_point=leo + 100)
    assert lg4.recovery_point == leo
    lg4.close()


def test_a_recovery_leaves_an_unchanged_leader_epoch_checkpoint_alone(tmp_path, mock_time):
    """Rebuilding the leader epoch cache from the recovered segments writes the checkpoint (with its fsyncs) only
    when the entries differ from the file's."""
    from strom.storage.leader_epoch_cache import LEADER_EPOCH_CHECKPOINT_FILE

    path = tmp_path / "t-0"
    lg = Log(str(path), CONFIG, mock_time)
    for offset, epoch in enumerate((0, 0, 3, 3, 5)):
        lg.append_as_follower(build_batch([b"v"], base_offset=offset, leader_epoch=epoch))
    lg.close()
    checkpoint = path / LEADER_EPOCH_CHECKPOINT_FILE
    written = checkpoint.stat()
    lg2 = reopen(path, mock_time, clean=False)
    assert lg2.leader_epoch_cache.entries == [(0, 0), (3, 2), (5, 4)]
    assert checkpoint.stat().st_ino == written.st_ino  # not rewritten (a rewrite renames a new file over it)
    lg2.close()
    checkpoint.write_text("0\n1\n0 0\n")  # a stale file: epochs 3 and 5 missing
    lg3 = reopen(path, mock_time, clean=False)
    assert lg3.leader_epoch_cache.entries == [(0, 0), (3, 2), (5, 4)]
    assert checkpoint.read_text().splitlines() == ["0", "3", "0 0", "3 2", "5 4"]
    lg3.close()


def _crash_copy(lg: Log) -> None:
    """Simulate a crash: drop the fds without the clean-close steps."""
    lg.close_handlers()


def test_torn_tail_truncated(tmp_path, mock_time):
    path = tmp_path / "t-0"
    lg = Log(str(path), CONFIG, mock_time)
    before = fill(lg)
    last_path = lg.active_segment.log.path
    leo = lg.log_end_offset
    _crash_copy(lg)
    size = os.path.getsize(last_path)
    with open(last_path, "r+b") as f:
        f.truncate(size - 7)  # cut the last batch mid-way
    lg2 = reopen(path, mock_time, clean=False)
    assert lg2.truncated_bytes_on_load > 0
    assert read_all(lg2) == before[:-1]
    last_batch_records = split_batches(before[-1])[0]
    assert lg2.log_end_offset == leo - (last_batch_records[1] - last_batch_records[0] + 1)
    lg2.close()


def test_garbage_appended_is_truncated(tmp_path, mock_time):
    path = tmp_path / "t-0"
    lg = Log(str(path), CONFIG, mock_time)
    before = fill(lg)
    last_path, leo = lg.active_segment.log.path, lg.log_end_offset
    _crash_copy(lg)
    with open(last_path, "ab") as f:
        f.write(os.urandom(100))
    lg2 = reopen(path, mock_time, clean=False)
    assert lg2.truncated_bytes_on_load == 100
    assert read_all(lg2) == before and lg2.log_end_offset == leo
    lg2.close()


def test_crc_flip_in_last_batch(tmp_path, mock_time):
    path = tmp_path / "t-0"
    lg = Log(str(path), CONFIG, mock_time)
    before = fill(lg)
    last_path = lg.active_segment.log.path
    _crash_copy(lg)
    size = os.path.getsize(last_path)
    with open(last_path, "r+b") as f:
        f.seek(size - 3)
        b = f.read(1)
        f.seek(size - 3)
        f.write(bytes([b[0] ^ 0x55]))
    lg2 = reopen(path, mock_time, clean=False)
    assert read_all(lg2) == before[:-1]
    lg2.close()


def test_corrupt_middle_segment_drops_later_segments(tmp_path, mock_time):
    path = tmp_path / "t-0"
    lg = Log(str(path), CONFIG, mock_time)
    fill(lg)
    seg = lg.segments[1]
    seg_path, next_base = seg.log.path, lg.segments[2].base_offset
    _crash_copy(lg)
    with open(seg_path, "r+b") as f:
        f.seek(30)
        f.write(b"\xff\xff")  # inside the first batch's CRC-covered bytes
    lg2 = reopen(path, mock_time, clean=False)
    assert lg2.num_segments == 2 and lg2.log_end_offset == lg2.segments[1].base_offset
    assert not os.path.exists(log_file_name(str(path), next_base))
    lg2.close()


def test_corrupt_index_rebuilt_even_after_clean_shutdown(tmp_path, mock_time):
    path = tmp_path / "t-0"
    lg = Log(str(path), CONFIG, mock_time)
    before = fill(lg)
    seg = lg.segments[0]
    index_path, entries = seg.offset_index.path, seg.offset_index.entries
    assert entries > 1
    lg.close()
    with open(index_path, "r+b") as f:
        f.seek(8)
        f.write(os.urandom(8))
    lg2 = reopen(path, mock_time, clean=True)
    assert lg2.recovered_segments_on_load >= 1
    assert lg2.segments[0].offset_index.entries == entries
    assert read_all(lg2) == before
    lg2.close()


def test_index_with_partial_entry_rebuilt(tmp_path, mock_time):
    path = tmp_path / "t-0"
    lg = Log(str(path), CONFIG, mock_time)
    before = fill(lg)
    time_index = lg.segments[0].time_index.path
    lg.close()
    with open(time_index, "ab") as f:
        f.write(b"\x01\x02\x03")
    lg2 = reopen(path, mock_time, clean=True)
    assert lg2.recovered_segments_on_load == 1 and read_all(lg2) == before
    lg2.close()


def test_missing_index_rebuilt(tmp_path, mock_time):
    path = tmp_path / "t-0"
    lg = Log(str(path), CONFIG, mock_time)
    before = fill(lg)
    index_path = lg.segments[0].offset_index.path
    lg.close()
    os.unlink(index_path)
    lg2 = reopen(path, mock_time, clean=True)
    assert read_all(lg2) == before
    assert lg2.segments[0].offset_index.entries > 0
    lg2.close()


def test_leftovers_and_orphans_removed(tmp_path, mock_time):
    path = tmp_path / "t-0"
    lg = Log(str(path), CONFIG, mock_time)
    before = fill(lg, 3)
    lg.close()
    for name in (
        "00000000000000000099.log.deleted",
        "00000000000000000050.index",
        "00000000000000000050.timeindex",
        "00000000000000000000.log.swap",
        "00000000000000000007.log.cleaned",
    ):
        (path / name).write_bytes(b"junk")
    (path / "leader-epoch-checkpoint").write_text("0\n0\n")
    lg2 = reopen(path, mock_time, clean=True)
    assert sorted(os.listdir(path)) == [
        "00000000000000000000.index",
        "00000000000000000000.log",
        "00000000000000000000.timeindex",
        "00000000000000000006.snapshot",  # producer state written by the clean close
        "leader-epoch-checkpoint",
    ]
    assert read_all(lg2) == before
    lg2.close()


def test_log_start_offset_preserved_and_above_end(tmp_path, mock_time):
    path = tmp_path / "t-0"
    lg = Log(str(path), CONFIG, mock_time)
    fill(lg)
    lg.close()
    lg2 = reopen(path, mock_time, clean=True, log_start_offset=5)
    assert lg2.log_start_offset == 5
    leo = lg2.log_end_offset
    lg2.close()
    lg3 = reopen(path, mock_time, clean=True, log_start_offset=leo + 10)
    assert (lg3.log_start_offset, lg3.log_end_offset, lg3.num_segments) == (leo + 10, leo + 10, 1)
    lg3.close()


def test_empty_dir_creates_segment_at_log_start(tmp_path, mock_time):
    lg = Log(str(tmp_path / "t-0"), CONFIG, mock_time, log_start_offset=42)
    assert (lg.log_start_offset, lg.log_end_offset) == (42, 42)
    assert lg.append_as_leader(sized_batch(100)).first_offset == 42
    lg.close()


def test_torn_tail_detected_even_when_marked_clean(tmp_path, mock_time):
    path = tmp_path / "t-0"
    lg = Log(str(path), CONFIG, mock_time)
    before = fill(lg)
    last_path = lg.active_segment.log.path
    lg.close()
    with open(last_path, "ab") as f:
        f.write(b"\x00\x00\x00\x00\x00\x00\x00\x09\x00\x00")  # a torn 10-byte header
    lg2 = reopen(path, mock_time, clean=True)
    assert lg2.truncated_bytes_on_load == 10 and read_all(lg2) == before
    lg2.close()


@pytest.mark.parametrize("bad_length", [0x7FFFFFF0, 5, -1])
def test_corrupt_batch_length_mid_segment_after_clean_shutdown_answers_corrupt_message(
    tmp_path, mock_time, caplog, bad_length
):
    """Issue 15: the index-guided load after a clean shutdown does not scan the middle of the segment; a read
    that reaches the damaged batch must say so (CORRUPT_MESSAGE + one log line), not return nothing forever."""
    import logging
    import struct

    from strom.common.error_codes import CorruptMessageError, ErrorCode
    from strom.storage.file_records import CorruptRecordError

    config = LogConfig.from_props({"index.interval.bytes": "1000"})
    lg = Log(str(tmp_path), config, mock_time)
    for i in range(20):
        lg.append_as_leader(build_batch([b"%03d" % i + b"x" * 250]))
    positions = [b.position for b in lg.active_segment.log.batches()]
    path = lg.active_segment.log.path
    lg.close()
    with open(path, "r+b") as f:
        f.seek(positions[5] + 8)
        length = struct.unpack(">i", f.read(4))[0]
        f.seek(positions[5] + 8)
        assert length != bad_length
        f.write(struct.pack(">i", bad_length))
    caplog.set_level(logging.ERROR)
    lg = Log(str(tmp_path), config, mock_time, had_clean_shutdown=True, recovery_point=20)
    assert lg.recovered_segments_on_load == 0 and lg.log_end_offset == 20  # the damage is not at the tail
    lg.update_high_watermark(20)
    first = split_batches(lg.read(0, 1 << 20).records)
    assert [b for b, _l, _d in first] == [0, 1, 2, 3, 4]  # whole batches up to the damaged one
    with pytest.raises(CorruptRecordError, match=rf"{path} at position {positions[5]}") as e:
        lg.read(5, 1 << 20)
    assert isinstance(e.value, CorruptMessageError) and e.value.errno == ErrorCode.CORRUPT_MESSAGE
    with pytest.raises(CorruptRecordError):
        lg.read(5, 1 << 20)  # a consumer retrying gets the error again ...
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and path in errors[0].getMessage()  # ... but the log gets one line
    lg.close()


# -- any damage the CRCs or a rebuild can see, anywhere in the directory -----------------------------------------

_DAMAGE = st.lists(st.tuples(st.sampled_from(["flip", "truncate", "garbage", "delete", "zero"]),
                             st.integers(0, 1 << 30), st.integers(0, 1 << 30)), min_size=1, max_size=3)


@pytest.fixture(scope="module")
def damaged_source(tmp_path_factory) -> tuple[str, list[bytes]]:
    """A log of five segments: compressed and idempotent batches, three leader epochs, producer snapshots."""
    from strom.record.builder import MemoryRecordsBuilder
    from strom.record.compression import CompressionType
    from strom.testing.mock_time import MockTime

    path = str(tmp_path_factory.mktemp("damage") / "t-0")
    lg = Log(path, LogConfig.from_props({"segment.bytes": "1500", "index.interval.bytes": "200"}), MockTime())
    for i in range(60):
        pid = (-1, 5, 6)[i % 3]
        b = MemoryRecordsBuilder(CompressionType((0, 1, 0, 3, 4)[i % 5]), producer_id=pid,
                                 producer_epoch=0 if pid >= 0 else -1, base_sequence=i // 3 * 2 if pid >= 0 else -1)
        for j in range(2):
            b.append(1_700_000_000_000 + i, b"k%d" % (i % 7), b"value-%d-%d" % (i, j) * (1 + i % 4))
        lg.append_as_leader(b.build(), leader_epoch=i // 25)
    lg.update_high_watermark(lg.log_end_offset)
    records = read_all(lg)
    assert lg.num_segments >= 5
    lg.close()
    return path, records


def _damage(directory: str, damage: list[tuple[str, int, int]]) -> None:
    """Each step hits one file: a ``.log`` only where a batch's CRC covers it (from the CRC field on), inside a
    batch (a torn write) or after its last one (garbage); any other file (indexes, snapshots, checkpoints)
    anywhere. (A segment cut at a batch boundary, or lost, leaves a gap no check sees, in Kafka as here.)"""
    for op, which, where in damage:
        names = sorted(os.listdir(directory))
        path = os.path.join(directory, names[which % len(names)])
        size = os.path.getsize(path)
        if path.endswith(".log"):
            with open(path, "rb") as f:
                batches = _positions(f.read())
            if not batches:
                continue
            pos, length = batches[where % len(batches)]
            if op in ("flip", "zero"):
                at = pos + 17 + where % (length - 17)
            else:
                op = "garbage" if op == "delete" else op
                at = pos + 1 + where % (length - 1)
        else:
            at = where % (size + 1)
        if op == "delete":
            os.remove(path)
        elif op == "truncate":
            os.truncate(path, at)
        elif op == "garbage":
            with open(path, "ab") as f:
                f.write(bytes(range(where % 50 + 1, where % 50 + 40)))
        elif at < size:
            with open(path, "r+b") as f:
                f.seek(at)
                old = f.read(1)[0]
                f.seek(at)
                f.write(bytes([old ^ (1 << where % 8) if op == "flip" else 0 if old else 1]))


def _positions(data: bytes) -> list[tuple[int, int]]:
    """``(position, size)`` of each whole batch in a segment file's bytes."""
    out, pos = [], 0
    while pos + LOG_OVERHEAD <= len(data):
        size = int.from_bytes(data[pos + 8:pos + 12], "big", signed=True) + LOG_OVERHEAD
        if size < LOG_OVERHEAD or pos + size > len(data):
            break
        out.append((pos, size))
        pos += size
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(damage=_DAMAGE)
def test_recovery_after_any_visible_damage_keeps_a_prefix_and_appends_after_it(damaged_source, tmp_path, damage):
    """An unclean start after damage the CRCs show (or to files that are rebuilt) never fails: what it keeps is
    the records before the first damaged batch, exactly, and the log takes appends right after them and opens
    again with them."""
    import shutil

    from strom.testing.mock_time import MockTime

    source, records = damaged_source
    path = str(tmp_path / f"t-{len(os.listdir(tmp_path))}")
    shutil.copytree(source, path)
    _damage(path, damage)
    config = LogConfig.from_props({"segment.bytes": "1500", "index.interval.bytes": "200"})
    lg = Log(path, config, MockTime(), had_clean_shutdown=False)
    lg.update_high_watermark(lg.log_end_offset)
    kept = read_all(lg)
    assert kept == records[:len(kept)]
    end = lg.log_end_offset
    assert end == (split_batches(kept[-1])[0][1] + 1 if kept else 0)
    assert lg.append_as_leader(build_batch([b"after"])).first_offset == end
    lg.close()
    again = Log(path, config, MockTime(), had_clean_shutdown=True, recovery_point=end + 1)
    again.update_high_watermark(again.log_end_offset)
    after = read_all(again)
    assert after[:-1] == kept and len(after) == len(kept) + 1 and again.log_end_offset == end + 1
    again.close()
