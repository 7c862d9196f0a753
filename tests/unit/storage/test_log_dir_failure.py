"""Failed log dirs (JBOD, KIP-112) in LogManager: an I/O error in a dir takes it offline once, its logs leave the
manager, nothing is created, checkpointed or marked clean there again, a partition that is not new is not created
elsewhere while a dir is offline, and a broker starts with a dir that cannot be used as long as one can."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from strom.common.error_codes import KafkaStorageError
from strom.common.structs import TopicPartition
from strom.storage.log import UnexpectedAppendOffsetError
from strom.storage.log_config import LogConfig
from strom.storage.log_dir_failure_channel import LogDirFailureChannel, is_io_failure
from strom.storage.log_manager import (
    CLEAN_SHUTDOWN_FILE,
    REPLICATION_OFFSET_CHECKPOINT_FILE,
    LogManager,
)
from strom.testing.log_dirs import fail_log_dir

from ._batches import build_batch

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]

CONFIG = LogConfig.from_broker_props({})


def two_dirs(tmp_path: Path, mock_time, channel: LogDirFailureChannel | None = None):  # type: ignore[no-untyped-def]
    a, b = tmp_path / "a", tmp_path / "b"
    lm = LogManager([str(a), str(b)], CONFIG, mock_time, failure_channel=channel)
    lm.load_logs()
    in_a, in_b = TopicPartition("t", 0), TopicPartition("t", 1)
    lm.preferred_dirs[in_a], lm.preferred_dirs[in_b] = str(a), str(b)
    for tp in (in_a, in_b):
        lm.get_or_create_log(tp).append_as_leader(build_batch([b"v"]))
    return lm, a, b, in_a, in_b


def test_io_failures_are_told_from_other_storage_errors() -> None:
    assert is_io_failure(OSError(28, "No space left on device"))
    try:
        try:
            raise NotADirectoryError(20, "Not a directory")
        except OSError as e:
            raise KafkaStorageError("append failed") from e
    except KafkaStorageError as wrapped:
        assert is_io_failure(wrapped)
    assert not is_io_failure(KafkaStorageError("log is closed"))
    assert not is_io_failure(UnexpectedAppendOffsetError("offset 3 below 5", 3, 4))
    assert not is_io_failure(None)


def test_a_failed_checkpoint_takes_its_dir_offline_once(tmp_path: Path, mock_time) -> None:  # type: ignore[no-untyped-def]
    channel = LogDirFailureChannel()
    told: list[str] = []
    channel.add_listener(told.append)
    lm, a, b, in_a, in_b = two_dirs(tmp_path, mock_time, channel)
    fail_log_dir(b)
    assert lm.checkpoint_high_watermarks() is False
    assert not channel.maybe_add_offline_log_dir(str(b), "again")  # reported again: still one listener call
    assert told == [str(b)]
    assert lm.offline_log_dirs == [str(b)] and lm.live_log_dirs == [str(a)]
    assert "writing replication-offset-checkpoint failed" in (channel.reason(str(b)) or "")

    assert lm.handle_log_dir_failure(str(b)) == [in_b]
    assert lm.get_log(in_b) is None and [tp for tp, _ in lm.all_logs()] == [in_a]
    assert lm.checkpoint_high_watermarks() is True  # the live dir only
    assert (a / REPLICATION_OFFSET_CHECKPOINT_FILE).exists()
    # a partition that is not new is not created while a dir is offline: its log may be there
    with pytest.raises(KafkaStorageError, match=f"because log directories {b} are offline"):
        lm.get_or_create_log(in_b, is_new=False)
    # a new one goes to a live dir, whatever dir it preferred
    lm.preferred_dirs[TopicPartition("t", 2)] = str(b)
    assert os.path.dirname(lm.get_or_create_log(TopicPartition("t", 2), is_new=True).dir) == str(a)
    lm.shutdown()
    assert (a / CLEAN_SHUTDOWN_FILE).exists()
    assert os.path.isfile(b)  # nothing was written where the dir was


def test_a_retention_that_fails_reports_its_dir(tmp_path: Path, mock_time) -> None:  # type: ignore[no-untyped-def]
    lm, _a, b, _in_a, _in_b = two_dirs(tmp_path, mock_time)
    expiring = TopicPartition("expiring", 0)
    lm.preferred_dirs[expiring] = str(b)
    lg = lm.get_or_create_log(expiring, LogConfig.from_props({"retention.ms": "1000"}, CONFIG))
    lg.append_as_leader(build_batch([b"old"], base_timestamp=mock_time.milliseconds()))
    lg.update_high_watermark(lg.log_end_offset)
    mock_time.sleep(5000)
    fail_log_dir(b)
    lm.cleanup_logs()  # every segment expired: the log rolls a new one first, in a dir that is gone
    assert lm.offline_log_dirs == [str(b)]
    assert "retention of" in (lm.failure_channel.reason(str(b)) or "")
    lm.shutdown()


def test_a_dir_that_cannot_be_used_at_start_is_offline(tmp_path: Path, mock_time) -> None:  # type: ignore[no-untyped-def]
    lm, a, b, in_a, in_b = two_dirs(tmp_path, mock_time)
    lm.shutdown()
    fail_log_dir(b)
    channel = LogDirFailureChannel()
    lm = LogManager([str(a), str(b)], CONFIG, mock_time, failure_channel=channel)
    lm.load_logs()
    assert channel.offline_log_dirs == [str(b)]
    assert [tp for tp, _ in lm.all_logs()] == [in_a]
    with pytest.raises(KafkaStorageError, match="are offline"):
        lm.get_or_create_log(in_b, is_new=False)
    lm.shutdown()
    # the dir comes back: both logs load again, b's with its record
    os.unlink(b)
    os.rename(f"{b}.gone", b)
    lm = LogManager([str(a), str(b)], CONFIG, mock_time)
    lm.load_logs()
    log_b = lm.get_log(in_b)
    assert log_b is not None and log_b.log_end_offset == 1 and os.path.dirname(log_b.dir) == str(b)
    lm.shutdown()


def test_no_usable_dir_is_fatal(tmp_path: Path, mock_time) -> None:  # type: ignore[no-untyped-def]
    for name in ("a", "b"):
        (tmp_path / name).write_bytes(b"")
    with pytest.raises(KafkaStorageError, match="every log dir has failed"):
        LogManager([str(tmp_path / "a"), str(tmp_path / "b")], CONFIG, mock_time)


def test_a_dir_locked_by_another_process_is_still_fatal(tmp_path: Path, mock_time) -> None:  # type: ignore[no-untyped-def]
    first = LogManager([str(tmp_path / "a")], CONFIG, mock_time)
    try:
        with pytest.raises(KafkaStorageError, match="locked by another process"):
            LogManager([str(tmp_path / "a"), str(tmp_path / "b")], CONFIG, mock_time)
    finally:
        first.shutdown()


def test_moves_into_or_out_of_a_failed_dir_stop(tmp_path: Path, mock_time) -> None:  # type: ignore[no-untyped-def]
    lm, a, b, in_a, in_b = two_dirs(tmp_path, mock_time)
    lm.create_future_log(in_a, str(b))  # a's replica on its way into b
    lm.create_future_log(in_b, str(a))  # b's replica on its way into a
    future_of_b = lm.future_log(in_b)
    assert future_of_b is not None
    fail_log_dir(b)
    lm.handle_log_dir_failure(str(b))
    assert lm.future_log(in_a) is None and lm.future_log(in_b) is None
    assert lm.get_log(in_a) is not None  # stays where it was
    assert not os.path.exists(future_of_b.dir)  # the copy of an offline log in a live dir is removed
    with pytest.raises(KafkaStorageError, match="offline"):
        lm.create_future_log(in_a, str(b))
    lm.shutdown()


def test_a_cleaning_that_fails_to_write_reports_its_dir(tmp_path: Path, mock_time) -> None:  # type: ignore[no-untyped-def]
    """As Kafka's cleaner: an I/O error writing the cleaned segments takes the dir offline (a segment deleted under
    the cleaner does not)."""
    lm, _a, b, _in_a, _in_b = two_dirs(tmp_path, mock_time)
    compacted = TopicPartition("changelog", 0)
    lm.preferred_dirs[compacted] = str(b)
    lg = lm.get_or_create_log(compacted, LogConfig.from_props(
        {"cleanup.policy": "compact", "segment.bytes": "300", "min.cleanable.dirty.ratio": "0.01"}, CONFIG))
    for i in range(30):
        lg.append_as_leader(build_batch([b"v%d" % i], keys=[b"k%d" % (i % 3)]))
    lg.update_high_watermark(lg.log_end_offset)
    fail_log_dir(b)
    assert lm.cleaner.clean_once() is None  # nothing cleaned: writing the cleaned segment failed
    assert lm.offline_log_dirs == [str(b)]
    assert "cleaning changelog-0 failed" in (lm.failure_channel.reason(str(b)) or "")
    lm.shutdown()
