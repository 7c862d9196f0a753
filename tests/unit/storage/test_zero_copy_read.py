"""Zero-copy reads: ``Log.read(zero_copy=True)`` gives a FileRegion covering exactly the bytes a copying read gives,
and the region stays readable while the segment is deleted, replaced or closed (it owns a duplicate descriptor);
only cutting the file itself takes its bytes away, and then reading it fails loudly instead of coming up short."""

from __future__ import annotations

import os
import random

import pytest

from strom.storage.file_records import FileRegion

from ._batches import sized_batch

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]


def _fill(lg, sizes: list[int]) -> None:
    for size in sizes:
        lg.append_as_leader(sized_batch(size, 3))
        lg.update_high_watermark(lg.log_end_offset)


def _as_bytes(records) -> bytes:
    return records.read_bytes() if isinstance(records, FileRegion) else bytes(records)


def test_region_matches_the_copying_read_for_every_offset_size_and_bound(make_log) -> None:
    rnd = random.Random(7)
    # Small index interval so that the walk to the end of a region starts from index entries, and a segment size
    # that makes reads stop at segment ends.
    lg = make_log({"index.interval.bytes": "300", "segment.bytes": "20000"})
    _fill(lg, [rnd.choice([80, 150, 700, 2500]) for _ in range(120)])
    assert lg.num_segments > 3
    end = lg.log_end_offset
    for _ in range(400):
        start = rnd.randrange(lg.log_start_offset, end + 1)
        max_bytes = rnd.choice([0, 1, 100, 900, 3000, 10_000, 1 << 20])
        max_offset = rnd.choice([None, end, rnd.randrange(start, end + 1)])
        min_one = rnd.random() < 0.7
        copied = lg.read(start, max_bytes, max_offset=max_offset, min_one_message=min_one)
        region = lg.read(start, max_bytes, max_offset=max_offset, min_one_message=min_one, zero_copy=True)
        try:
            assert len(region.records) == len(copied.records)
            assert _as_bytes(region.records) == bytes(copied.records), (start, max_bytes, max_offset, min_one)
            assert region.first_offset_position == copied.first_offset_position
        finally:
            if isinstance(region.records, FileRegion):
                region.records.release()


def test_region_survives_retention_deleting_its_segment(make_log) -> None:
    lg = make_log({"segment.bytes": "3000", "retention.bytes": "1", "file.delete.delay.ms": "0"})
    _fill(lg, [1000] * 12)
    first = lg.segments[0]
    region = lg.read(0, 1 << 20, zero_copy=True).records
    assert isinstance(region, FileRegion)
    expected = lg.read(0, 1 << 20).records
    path = first.log.path
    assert lg.delete_old_segments() > 0
    assert not os.path.exists(path) and not os.path.exists(path + ".deleted")  # unlinked, not just renamed
    assert region.read_bytes() == expected  # the duplicate descriptor keeps the inode alive
    region.release()
    assert region.closed
    region.release()  # idempotent


def test_region_of_a_truncated_file_fails_instead_of_coming_up_short(make_log) -> None:
    lg = make_log()
    _fill(lg, [500] * 6)
    region = lg.read(2 * 3, 1 << 20, zero_copy=True).records  # batches from offset 6 on (3 records per batch)
    assert isinstance(region, FileRegion) and len(region) == 4 * 500
    lg.truncate_to(3 * 3)  # a follower truncation cuts the active segment's file under the region
    with pytest.raises(OSError, match="truncated"):
        region.read_bytes()
    region.release()


def test_nothing_to_read_gives_empty_bytes_not_a_region(make_log) -> None:
    lg = make_log()
    _fill(lg, [500] * 2)
    assert lg.read(lg.log_end_offset, 1000, zero_copy=True).records == b""
    assert lg.read(0, 10, min_one_message=False, zero_copy=True).records == b""  # first batch too big
    assert lg.read(0, 1000, max_offset=0, zero_copy=True).records == b""


def test_out_of_descriptors_falls_back_to_bytes(make_log, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    lg = make_log()
    _fill(lg, [500] * 2)

    def no_fds(fd: int) -> int:
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(os, "dup", no_fds)
    records = lg.read(0, 1 << 20, zero_copy=True).records
    assert isinstance(records, bytes) and len(records) == 1000
