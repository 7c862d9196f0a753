"""What replication needs from Log: leader epochs, follower appends, truncation that keeps state consistent."""

from __future__ import annotations

import os
import struct

import pytest

from strom.common.error_codes import CorruptMessageError
from strom.record.header import parse_header
from strom.storage.leader_epoch_cache import LEADER_EPOCH_CHECKPOINT_FILE
from strom.storage.log import UnexpectedAppendOffsetError

from ._batches import build_batch, split_batches

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]


def pbatch(n, seq, *, pid=7, epoch=0, base_offset=0, leader_epoch=-1):
    return build_batch(
        [b"v%d" % i for i in range(n)],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        base_offset=base_offset,
        leader_epoch=leader_epoch,
    )


def test_leader_appends_assign_epochs_only_when_newer(make_log):
    lg = make_log()
    lg.append_as_leader(build_batch([b"a", b"b"]), leader_epoch=0)  # 0..1
    lg.append_as_leader(build_batch([b"c"]), leader_epoch=0)  # 2
    lg.append_as_leader(build_batch([b"d"]), leader_epoch=3)  # 3
    lg.append_as_leader(build_batch([b"e"]), leader_epoch=2)  # 4: an older epoch never rewrites the cache
    assert lg.leader_epoch_cache.entries == [(0, 0), (3, 3)]
    assert lg.leader_epoch_cache.end_offset_for(0, lg.log_end_offset) == (0, 3)
    assert lg.leader_epoch_cache.end_offset_for(3, lg.log_end_offset) == (3, 5)
    assert (lg.end_offset_for_epoch(0), lg.end_offset_for_epoch(3), lg.end_offset_for_epoch(4)) == ((0, 3), (3, 5), None)
    with open(os.path.join(lg.dir, LEADER_EPOCH_CHECKPOINT_FILE)) as f:
        assert f.read() == "0\n2\n0 0\n3 3\n"


def test_epoch_cache_survives_restart_and_is_rebuilt_when_missing(make_log):
    lg = make_log()
    for epoch in (0, 0, 4, 4, 9):
        lg.append_as_leader(build_batch([b"x"]), leader_epoch=epoch)
    lg.close()
    assert make_log().leader_epoch_cache.entries == [(0, 0), (4, 2), (9, 4)]
    # (make_log's previous instance is closed; close the reopened one before touching files)
    reopened = make_log()
    reopened.close()
    os.unlink(os.path.join(reopened.dir, LEADER_EPOCH_CHECKPOINT_FILE))
    rebuilt = make_log()
    assert rebuilt.leader_epoch_cache.entries == [(0, 0), (4, 2), (9, 4)]
    assert os.path.exists(os.path.join(rebuilt.dir, LEADER_EPOCH_CHECKPOINT_FILE))


def test_epoch_cache_rebuilt_from_recovered_segments_after_crash(make_log):
    lg = make_log()
    lg.append_as_leader(build_batch([b"x"]), leader_epoch=1)
    lg.flush()
    lg.append_as_leader(build_batch([b"y"]), leader_epoch=5)
    # Simulate a crash that lost the cache write of epoch 5 but kept the batch, and a stale entry beyond the end.
    with open(os.path.join(lg.dir, LEADER_EPOCH_CHECKPOINT_FILE), "w") as f:
        f.write("0\n2\n1 0\n8 9\n")
    lg.close_handlers()
    crashed = make_log(had_clean_shutdown=False, recovery_point=0)
    assert crashed.leader_epoch_cache.entries == [(1, 0), (5, 1)]


def test_truncate_to_keeps_epochs_producer_state_and_hw_consistent(make_log):
    lg = make_log()
    lg.append_as_leader(pbatch(2, 0), leader_epoch=1)  # 0..1 seq 0..1
    lg.append_as_leader(pbatch(2, 2), leader_epoch=2)  # 2..3 seq 2..3
    lg.update_high_watermark(lg.log_end_offset)
    lg.roll()  # a producer snapshot at 4, above the truncation point
    lg.append_as_leader(pbatch(1, 4), leader_epoch=3)  # 4 seq 4
    lg.update_high_watermark(lg.log_end_offset)
    assert lg.truncate_to(2)
    assert (lg.log_end_offset, lg.high_watermark) == (2, 2)
    assert lg.leader_epoch_cache.entries == [(1, 0)]
    assert [n for n in os.listdir(lg.dir) if n.endswith(".snapshot") and int(n[:20]) > 2] == []
    # The producer's last batch is now seq 0..1: seq 2 is the next one (not a duplicate, not out of order) ...
    info = lg.append_as_leader(pbatch(2, 2), leader_epoch=4)
    assert (info.first_offset, info.num_batches) == (2, 1)
    # ... and seq 0..1 is still recognised as a duplicate of offsets 0..1.
    dup = lg.append_as_leader(pbatch(2, 0), leader_epoch=4)
    assert (dup.first_offset, dup.last_offset, dup.num_batches) == (0, 1, 0)
    assert lg.leader_epoch_cache.entries == [(1, 0), (4, 2)]


def test_truncate_fully_and_start_at_resets_everything(make_log):
    lg = make_log()
    lg.append_as_leader(pbatch(3, 0), leader_epoch=1)
    lg.update_high_watermark(3)
    lg.truncate_fully_and_start_at(100)
    assert (lg.log_start_offset, lg.log_end_offset, lg.high_watermark, lg.recovery_point) == (100, 100, 100, 100)
    assert lg.leader_epoch_cache.entries == []
    assert lg.producer_state.producers == {}
    info = lg.append_as_leader(pbatch(1, 0, epoch=1), leader_epoch=2)  # a new producer epoch starts at seq 0
    assert info.first_offset == 100
    assert lg.leader_epoch_cache.entries == [(2, 100)]
    lg.close()
    reopened = make_log()
    assert (reopened.log_start_offset, reopened.log_end_offset) == (100, 101)


def test_log_start_moves_trim_epochs(make_log):
    lg = make_log()
    for epoch in (1, 1, 2, 2, 3):
        lg.append_as_leader(build_batch([b"x"]), leader_epoch=epoch)
    lg.update_high_watermark(lg.log_end_offset)
    lg.delete_records_before(3)
    assert lg.leader_epoch_cache.entries == [(2, 3), (3, 4)]


def follower_batches():
    """What a leader at epochs 1 and 2 wrote: offsets 0..2, then (after compaction removed 3..4) 5..6."""
    return (
        pbatch(2, 0, base_offset=0, leader_epoch=1)
        + pbatch(1, 2, base_offset=2, leader_epoch=1)
        + build_batch([b"k"] * 2, base_offset=5, leader_epoch=2)
    )


def test_append_as_follower_keeps_offsets_epochs_and_bytes(make_log):
    lg = make_log({"flush.messages": "1"})
    data = follower_batches()
    info = lg.append_as_follower(data)
    assert (info.first_offset, info.last_offset, info.num_batches, info.num_records) == (0, 6, 3, 5)
    assert lg.log_end_offset == 7
    assert lg.recovery_point == 7  # flush.messages=1 applied
    assert lg.high_watermark == 0  # the follower learns its HW from the leader
    lg.update_high_watermark(7)
    assert lg.read(0, 1 << 20).records == data  # byte for byte as the leader wrote them
    assert lg.leader_epoch_cache.entries == [(1, 0), (2, 5)]
    # The leader's producer sent seq 3 next: the follower's producer state accepts nothing else as a leader.
    assert lg.producer_state.producers[7].last_seq == 2
    # A follower never rejects a replicated batch as a duplicate: it is the leader's copy.
    again = lg.append_as_follower(pbatch(1, 2, base_offset=7, leader_epoch=2))
    assert again.first_offset == 7 and lg.log_end_offset == 8


def test_append_as_follower_rejects_offsets_below_log_end_and_corrupt_batches(make_log):
    lg = make_log()
    lg.append_as_follower(follower_batches())
    size = lg.size_in_bytes
    with pytest.raises(UnexpectedAppendOffsetError, match="below the log end 7") as e:
        lg.append_as_follower(build_batch([b"z"], base_offset=6, leader_epoch=2))
    assert (e.value.first_offset, e.value.last_offset) == (6, 6)
    bad = bytearray(build_batch([b"z"], base_offset=7, leader_epoch=2))
    bad[-1] ^= 0xFF
    with pytest.raises(CorruptMessageError, match="CRC"):
        lg.append_as_follower(bytes(bad))
    backwards = build_batch([b"a"], base_offset=9) + build_batch([b"b"], base_offset=8)
    with pytest.raises(CorruptMessageError, match="after offset 9"):
        lg.append_as_follower(backwards)
    assert (lg.size_in_bytes, lg.log_end_offset) == (size, 7)


def test_follower_truncates_divergent_tail_then_follows_new_leader(make_log):
    """KIP-101: an ex-leader with records the new leader never had asks end_offset_for and truncates to it."""
    old = make_log(dir_name="old-0")
    new = make_log(dir_name="new-0")
    common = pbatch(2, 0, leader_epoch=1)
    old.append_as_follower(common)
    new.append_as_follower(common)
    old.append_as_leader(pbatch(3, 2), leader_epoch=1)  # 2..4: never replicated
    new.append_as_leader(pbatch(1, 2, pid=8), leader_epoch=2)  # 2: the new leader's first write
    epoch, end = new.leader_epoch_cache.end_offset_for(old.leader_epoch_cache.latest_epoch, new.log_end_offset)
    assert (epoch, end) == (1, 2)
    old.truncate_to(end)
    new.update_high_watermark(new.log_end_offset)
    old.append_as_follower(new.read(old.log_end_offset, 1 << 20).records)
    assert [b[:2] for b in split_batches(old.read(0, 1 << 20).records)] == [(0, 1), (2, 2)]
    assert old.leader_epoch_cache.entries == new.leader_epoch_cache.entries == [(1, 0), (2, 2)]
    assert parse_header(split_batches(old.read(2, 100).records)[0][2]).producer_id == 8


def test_follower_append_far_ahead_of_an_empty_log(make_log):
    lg = make_log()
    far = 5_000_000_000
    lg.append_as_follower(build_batch([b"x"], base_offset=far, leader_epoch=3))
    assert lg.log_end_offset == far + 1
    assert lg.active_segment.base_offset == far
    assert struct.unpack_from(">q", lg.read(far, 100).records)[0] == far


def test_unreadable_epoch_checkpoint_is_rebuilt_from_the_log(make_log):
    lg = make_log()
    lg.append_as_leader(build_batch([b"x"]), leader_epoch=2)
    lg.append_as_leader(build_batch([b"y"]), leader_epoch=5)
    lg.close()
    with open(os.path.join(lg.dir, LEADER_EPOCH_CHECKPOINT_FILE), "w") as f:
        f.write("0\n2\n2 zero\n")
    reopened = make_log()
    assert reopened.leader_epoch_cache.entries == [(2, 0), (5, 1)]
    with open(os.path.join(lg.dir, LEADER_EPOCH_CHECKPOINT_FILE)) as f:
        assert f.read() == "0\n2\n2 0\n5 1\n"
