"""LeaderEpochFileCache: Kafka's OffsetForLeaderEpoch answers, truncation from both ends, the checkpoint file."""

from __future__ import annotations

import os

import pytest

from strom.storage.checkpoint import CorruptCheckpointError
from strom.storage.leader_epoch_cache import (
    LEADER_EPOCH_CHECKPOINT_FILE,
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    LeaderEpochFileCache,
)

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]

UNDEFINED = (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)


@pytest.fixture
def cache(tmp_path):
    c = LeaderEpochFileCache(str(tmp_path))
    for epoch, offset in ((1, 0), (3, 10), (6, 20)):
        c.assign(epoch, offset)
    return c


def test_end_offset_for_follows_kafka(cache):
    leo = 30
    assert cache.end_offset_for(UNDEFINED_EPOCH, leo) == UNDEFINED
    assert cache.end_offset_for(6, leo) == (6, leo)  # the latest epoch: the log end
    assert cache.end_offset_for(7, leo) == UNDEFINED  # above every known epoch
    assert cache.end_offset_for(3, leo) == (3, 20)  # a known epoch: start of the next one
    assert cache.end_offset_for(4, leo) == (3, 20)  # unknown epoch between: largest epoch below, next start
    assert cache.end_offset_for(5, leo) == (3, 20)
    assert cache.end_offset_for(2, leo) == (1, 10)
    assert cache.end_offset_for(0, leo) == (0, 0)  # below every epoch: the first start offset


def test_assign_ignores_same_epoch_and_drops_non_monotonic_entries(cache):
    assert not cache.assign(6, 25)  # same epoch, later offset: nothing changes
    assert cache.entries == [(1, 0), (3, 10), (6, 20)]
    assert cache.assign(4, 15)  # an older epoch at an earlier offset replaces the stale tail
    assert cache.entries == [(1, 0), (3, 10), (4, 15)]
    assert cache.assign(7, 12)  # a newer epoch starting below existing entries drops them
    assert cache.entries == [(1, 0), (3, 10), (7, 12)]
    with pytest.raises(ValueError):
        cache.assign(-1, 5)


def test_epoch_for_offset(cache):
    assert [cache.epoch_for_offset(o) for o in (0, 9, 10, 19, 20, 100)] == [1, 1, 3, 3, 6, 6]
    empty = LeaderEpochFileCache(os.path.join(os.path.dirname(cache.path), "sub") + "x")
    assert empty.epoch_for_offset(5) is None


def test_truncate_from_end_and_start(cache):
    cache.truncate_from_end(21)
    assert cache.entries == [(1, 0), (3, 10), (6, 20)]
    cache.truncate_from_end(20)
    assert cache.entries == [(1, 0), (3, 10)]
    cache.assign(6, 20)
    cache.truncate_from_start(15)  # epoch 3 wrote offset 15: it becomes the first entry, re-anchored
    assert cache.entries == [(3, 15), (6, 20)]
    cache.truncate_from_start(20)
    assert cache.entries == [(6, 20)]
    cache.truncate_from_start(5)  # below the first entry: nothing to do
    assert cache.entries == [(6, 20)]
    cache.clear()
    assert cache.entries == [] and cache.latest_epoch is None


def test_checkpoint_file_is_kafkas_text_format_and_reloads(cache, tmp_path):
    path = tmp_path / LEADER_EPOCH_CHECKPOINT_FILE
    assert path.read_text() == "0\n3\n1 0\n3 10\n6 20\n"
    cache.truncate_from_end(10)
    assert path.read_text() == "0\n1\n1 0\n"
    assert LeaderEpochFileCache(str(tmp_path)).entries == [(1, 0)]
    assert not os.path.exists(str(path) + ".tmp")


@pytest.mark.parametrize(
    "text, line",
    [("1\n0\n", 1), ("0\n2\n1 0\n", 2), ("0\n1\n1 x\n", 3), ("0\n2\n3 0\n2 5\n", 4), ("0\n", 2)],
)
def test_malformed_checkpoint_names_file_and_line(tmp_path, text, line):
    (tmp_path / LEADER_EPOCH_CHECKPOINT_FILE).write_text(text)
    with pytest.raises(CorruptCheckpointError, match=rf"{LEADER_EPOCH_CHECKPOINT_FILE}, line {line}"):
        LeaderEpochFileCache(str(tmp_path))
