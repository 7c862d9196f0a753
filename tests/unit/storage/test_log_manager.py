"""LogManager: create/load/delete logs, checkpoints, clean-shutdown marker, retention and flush scheduling."""

from __future__ import annotations

import os

import pytest

from strom.common.error_codes import KafkaStorageError
from strom.common.structs import TopicPartition
from strom.storage.checkpoint import OffsetCheckpointFile
from strom.storage.log_config import LogConfig
from strom.storage.log_manager import (
    CLEAN_SHUTDOWN_FILE,
    LOG_START_OFFSET_CHECKPOINT_FILE,
    RECOVERY_POINT_CHECKPOINT_FILE,
    LogManager,
)

from ._batches import build_batch, sized_batch, split_batches

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]

DEFAULT = LogConfig.from_broker_props({"log.segment.bytes": "300", "log.segment.delete.delay.ms": "0"})


def manager(dirs, mock_time, **kw) -> LogManager:
    return LogManager(
        [str(d) for d in dirs], DEFAULT, mock_time, flush_check_ms=1000, retention_check_ms=5000, **kw
    )


def test_create_append_shutdown_reload(tmp_path, mock_time):
    dirs = [tmp_path / "d1", tmp_path / "d2"]
    lm = manager(dirs, mock_time)
    tps = [TopicPartition("my.topic-x", p) for p in range(4)]
    for tp in tps:
        lg = lm.get_or_create_log(tp)
        for _ in range(5):
            lg.append_as_leader(sized_batch(100))
        lg.update_high_watermark(lg.log_end_offset)
    assert lm.get_or_create_log(tps[0]) is lm.get_log(tps[0])
    per_dir = [len([n for n in os.listdir(d) if n.startswith("my.topic-x-")]) for d in dirs]
    assert per_dir == [2, 2]  # spread over the dirs with the fewest partitions
    lm.get_log(tps[1]).delete_records_before(3)
    lm.shutdown()
    for d in dirs:
        assert os.path.exists(d / CLEAN_SHUTDOWN_FILE)
    rp = OffsetCheckpointFile(str(dirs[0] / RECOVERY_POINT_CHECKPOINT_FILE)).read()
    rp.update(OffsetCheckpointFile(str(dirs[1] / RECOVERY_POINT_CHECKPOINT_FILE)).read())
    assert rp == {tp: 5 for tp in tps}
    starts = OffsetCheckpointFile(str(dirs[0] / LOG_START_OFFSET_CHECKPOINT_FILE)).read()
    starts.update(OffsetCheckpointFile(str(dirs[1] / LOG_START_OFFSET_CHECKPOINT_FILE)).read())
    assert starts[tps[1]] == 3 and starts[tps[0]] == 0

    lm2 = manager(dirs, mock_time)
    assert lm2.load_logs() == 4
    assert [tp for tp, _ in lm2.all_logs()] == tps
    for d in dirs:
        assert not os.path.exists(d / CLEAN_SHUTDOWN_FILE)  # consumed at load
    assert all(lg.recovered_segments_on_load == 0 for _, lg in lm2.all_logs())
    assert lm2.get_log(tps[1]).log_start_offset == 3
    assert lm2.get_log(tps[2]).log_end_offset == 5
    lm2.shutdown()


def test_unclean_load_recovers(tmp_path, mock_time):
    lm = manager([tmp_path], mock_time)
    lg = lm.get_or_create_log(TopicPartition("t", 0))
    for _ in range(4):
        lg.append_as_leader(sized_batch(100))
    path = lg.active_segment.log.path
    lm.checkpoint_recovery_points()
    # crash: no shutdown(); garbage at the tail
    lg.close_handlers()
    for fd in lm._lock_fds:
        os.close(fd)
    with open(path, "ab") as f:
        f.write(b"\x00" * 30)
    lm2 = manager([tmp_path], mock_time)
    lm2.load_logs()
    lg2 = lm2.get_log(TopicPartition("t", 0))
    assert lg2.truncated_bytes_on_load == 30 and lg2.recovered_segments_on_load >= 1
    assert lg2.log_end_offset == 4
    lm2.shutdown()


def test_dir_lock(tmp_path, mock_time):
    lm = manager([tmp_path], mock_time)
    with pytest.raises(KafkaStorageError):
        manager([tmp_path], mock_time)
    lm.shutdown()
    manager([tmp_path], mock_time).shutdown()


def test_delete_log(tmp_path, mock_time):
    lm = manager([tmp_path], mock_time)
    tp = TopicPartition("gone", 0)
    lm.get_or_create_log(tp).append_as_leader(build_batch([b"x"]))
    assert lm.delete_log(tp)
    assert lm.get_log(tp) is None and not lm.delete_log(tp)
    assert [n for n in os.listdir(tmp_path) if n.startswith("gone")] == []
    # a half-deleted dir left by a crash is removed on load, unparseable dirs are ignored
    (tmp_path / "gone-1.0123456789abcdef0123456789abcdef-delete").mkdir()
    (tmp_path / "not_a_partition").mkdir()
    lm.shutdown()
    lm2 = manager([tmp_path], mock_time)
    assert lm2.load_logs() == 0
    assert not (tmp_path / "gone-1.0123456789abcdef0123456789abcdef-delete").exists()
    lm2.shutdown()


def test_topic_configs_and_update(tmp_path, mock_time):
    lm = manager([tmp_path], mock_time)
    special = LogConfig.from_props({"retention.ms": "100"}, DEFAULT)
    lg0 = lm.get_or_create_log(TopicPartition("t", 0), special)
    lg1 = lm.get_or_create_log(TopicPartition("t", 1))
    other = lm.get_or_create_log(TopicPartition("u", 0))
    assert (
        lg0.config.retention_ms == lg1.config.retention_ms == 100 and other.config.retention_ms == 604800000
    )
    lm.update_topic_config("t", LogConfig.from_props({"retention.ms": "200"}, DEFAULT))
    assert lg0.config.retention_ms == 200 and lg1.config.retention_ms == 200
    with pytest.raises(ValueError):
        lm.get_or_create_log(TopicPartition("../evil", 0))
    lm.shutdown()


def test_periodic_retention_and_flush(tmp_path, mock_time):
    config = LogConfig.from_props({"retention.ms": "1000", "flush.ms": "2000"}, DEFAULT)
    lm = manager([tmp_path], mock_time)
    tp = TopicPartition("t", 0)
    lg = lm.get_or_create_log(tp, config)
    for _ in range(7):
        lg.append_as_leader(sized_batch(100, ts=mock_time.milliseconds()))
    lg.update_high_watermark(lg.log_end_offset)
    assert lg.num_segments == 3 and lg.recovery_point == 0
    mock_time.sleep(1000)
    lm.run_periodic_tasks()
    # the flusher flushed the rolled segments (up to the active segment's base)
    assert lg.recovery_point == lg.active_segment.base_offset == 6
    mock_time.sleep(1000)
    lm.run_periodic_tasks()
    assert lg.recovery_point == 7  # flush.ms elapsed: everything
    mock_time.sleep(3000)
    lm.run_periodic_tasks()  # retention check due: every segment older than retention.ms
    assert lg.log_start_offset == 7 and lg.size_in_bytes == 0
    assert lm.run_periodic_tasks() > 0
    lm.shutdown()


def test_corrupt_checkpoint_forces_recovery(tmp_path, mock_time):
    lm = manager([tmp_path], mock_time)
    lm.get_or_create_log(TopicPartition("t", 0)).append_as_leader(build_batch([b"a"]))
    lm.shutdown()
    (tmp_path / RECOVERY_POINT_CHECKPOINT_FILE).write_text("garbage")
    lm2 = manager([tmp_path], mock_time)
    lm2.load_logs()
    lg = lm2.get_log(TopicPartition("t", 0))
    assert lg.recovered_segments_on_load == 1 and lg.log_end_offset == 1
    assert split_batches(lg.read(0, 100).records)[0][0] == 0
    lm2.shutdown()


def test_high_watermarks_checkpointed_and_restored_as_min_of_checkpoint_and_log_end(tmp_path, mock_time):
    from strom.storage.log_manager import REPLICATION_OFFSET_CHECKPOINT_FILE

    lm = manager([tmp_path], mock_time)
    a, b, c = (TopicPartition("t", p) for p in range(3))
    for tp, n in ((a, 5), (b, 4), (c, 3)):
        lg = lm.get_or_create_log(tp)
        lg.append_as_follower(b"".join(build_batch([b"x"], base_offset=i) for i in range(n)))
    lm.get_log(a).update_high_watermark(3)
    lm.get_log(b).update_high_watermark(4)
    lm.checkpoint_high_watermarks()
    path = tmp_path / REPLICATION_OFFSET_CHECKPOINT_FILE
    assert path.read_text() == "0\n3\nt 0 3\nt 1 4\nt 2 0\n"
    lm.get_log(b).truncate_to(2)  # the checkpoint now says 4, above the log end
    lm.shutdown()
    OffsetCheckpointFile(str(path)).write({a: 3, b: 4})  # no entry for t-2
    lm2 = manager([tmp_path], mock_time)
    lm2.load_logs()
    assert [lm2.get_log(tp).high_watermark for tp in (a, b, c)] == [3, 2, 0]
    # A standalone broker makes every record committed itself.
    lg = lm2.get_log(c)
    assert lg.update_high_watermark(lg.log_end_offset) == 3
    lm2.shutdown()


def test_corrupt_high_watermark_checkpoint_starts_at_log_start(tmp_path, mock_time, caplog):
    from strom.storage.log_manager import REPLICATION_OFFSET_CHECKPOINT_FILE

    lm = manager([tmp_path], mock_time)
    lm.get_or_create_log(TopicPartition("t", 0)).append_as_leader(build_batch([b"x"]))
    lm.shutdown()
    (tmp_path / REPLICATION_OFFSET_CHECKPOINT_FILE).write_text("0\n7\n")
    lm2 = manager([tmp_path], mock_time)
    lm2.load_logs()
    assert lm2.get_log(TopicPartition("t", 0)).high_watermark == 0
    assert "replication-offset-checkpoint" in caplog.text
    lm2.shutdown()


def test_get_or_create_logs_in_bulk(tmp_path, mock_time):
    lm = manager([tmp_path / "a", tmp_path / "b"], mock_time)
    first = lm.get_or_create_log(TopicPartition("t", 0))
    logs = lm.get_or_create_logs([TopicPartition("t", p) for p in range(10)])
    assert logs[0] is first and len({id(lg) for lg in logs}) == 10
    assert sorted(len(os.listdir(tmp_path / d)) for d in ("a", "b")) == [6, 6]  # 5 partitions + .lock each
    with pytest.raises(ValueError, match="illegal topic partition"):
        lm.get_or_create_logs([TopicPartition("u", 0), TopicPartition("bad/name", 0)])
    assert lm.get_log(TopicPartition("u", 0)) is None  # nothing was created
    lm.shutdown()
