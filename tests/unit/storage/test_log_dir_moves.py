"""Moving a replica to another log dir (KIP-113) in LogManager: the future log is filled batch by batch as a
follower's, truncation reaches both logs, the swap keeps offsets, epochs, the high watermark and producer state,
and the moved log loads from its new dir; an unfinished move resumes at the next start."""

from __future__ import annotations

import os

import pytest

from strom.common.error_codes import KafkaStorageError
from strom.common.structs import TopicPartition
from strom.record.batch import RecordBatch
from strom.storage.log import Log
from strom.storage.log_config import LogConfig
from strom.storage.log_manager import FUTURE_DIR_SUFFIX, LogManager

from ._batches import build_batch, split_batches

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]

CONFIG = LogConfig.from_broker_props({"log.segment.bytes": "400"})
TP = TopicPartition("moving", 0)


def manager(tmp_path, mock_time) -> LogManager:  # type: ignore[no-untyped-def]
    lm = LogManager([str(tmp_path / "a"), str(tmp_path / "b")], CONFIG, mock_time)
    lm.load_logs()
    lm.preferred_dirs[TP] = str(tmp_path / "a")
    return lm


def values(lm: LogManager) -> list[bytes]:
    lg = lm.get_log(TP)
    assert lg is not None
    out, offset = [], lg.log_start_offset
    while offset < lg.log_end_offset:
        data = bytes(lg.read(offset, 1 << 20).records)
        for _base, last, raw in split_batches(data):
            out += [r.value for r in RecordBatch(raw).records()]
            offset = last + 1
    return out


def with_ten_records(tmp_path, mock_time) -> tuple[LogManager, Log]:  # type: ignore[no-untyped-def]
    """A manager whose partition, in the first dir, holds v0..v9 (one record per batch)."""
    lm = manager(tmp_path, mock_time)
    lg = lm.get_or_create_log(TP)
    for i in range(10):
        lg.append_as_leader(build_batch([f"v{i}".encode()]))
    return lm, lg


def copy_all(lm: LogManager) -> None:
    while lm.copy_to_future(TP, 300) > 0:
        pass


def test_a_replica_moves_to_another_dir_with_everything_it_had(tmp_path, mock_time) -> None:  # type: ignore[no-untyped-def]
    lm = manager(tmp_path, mock_time)
    lg = lm.get_or_create_log(TP)
    assert os.path.dirname(lg.dir) == str(tmp_path / "a")
    for i in range(20):
        lg.append_as_leader(build_batch([f"v{i}".encode() * 20]), leader_epoch=i // 10)
    lg.update_high_watermark(15)
    future = lm.create_future_log(TP, str(tmp_path / "b"))
    assert future.dir.endswith(FUTURE_DIR_SUFFIX) and lm.copy_to_future(TP, 300) > 0
    with pytest.raises(KafkaStorageError, match="has not caught up"):
        lm.replace_current_with_future(TP)
    lg.append_as_leader(build_batch([b"late"]), leader_epoch=2)  # appends go on while the copy runs
    copy_all(lm)
    new, old = lm.replace_current_with_future(TP)
    assert lm.get_log(TP) is new and os.path.dirname(new.dir) == str(tmp_path / "b")
    assert (new.log_end_offset, new.high_watermark) == (21, 15)
    assert [e[0] for e in new.leader_epoch_cache.entries] == [0, 1, 2]
    assert not os.path.exists(str(tmp_path / "a" / "moving-0"))
    lm.delete_replaced_log(old)
    assert os.listdir(tmp_path / "a") == [n for n in os.listdir(tmp_path / "a") if "moving" not in n]
    assert values(lm) == [f"v{i}".encode() * 20 for i in range(20)] + [b"late"]
    lm.shutdown()
    again = manager(tmp_path, mock_time)
    assert os.path.dirname(again.get_log(TP).dir) == str(tmp_path / "b")  # type: ignore[union-attr]
    assert values(again) == [f"v{i}".encode() * 20 for i in range(20)] + [b"late"]
    again.shutdown()


def test_truncation_reaches_the_future_log_and_an_unfinished_move_resumes(tmp_path, mock_time) -> None:  # type: ignore[no-untyped-def]
    lm, lg = with_ten_records(tmp_path, mock_time)
    lm.create_future_log(TP, str(tmp_path / "b"))
    copy_all(lm)
    lm.truncate_to(TP, 6)  # a follower dropping a divergent tail: the copy must not keep it
    lg.append_as_leader(build_batch([b"new"]))
    copy_all(lm)
    lm.replace_current_with_future(TP)
    assert values(lm) == [f"v{i}".encode() for i in range(6)] + [b"new"]

    lm.create_future_log(TP, str(tmp_path / "a"))  # and back: left unfinished below
    with pytest.raises(KafkaStorageError, match="already being moved"):
        lm.create_future_log(TP, str(tmp_path / "a"))
    lm.copy_to_future(TP, 1)  # one batch of seven copied
    lm.shutdown()
    assert any(n.endswith(FUTURE_DIR_SUFFIX) for n in os.listdir(tmp_path / "a"))
    again = manager(tmp_path, mock_time)
    future = again.future_log(TP)
    assert future is not None and os.path.dirname(future.dir) == str(tmp_path / "a")
    assert future.log_end_offset == 1  # what was copied before the stop is kept
    assert os.path.dirname(again.get_log(TP).dir) == str(tmp_path / "b")  # type: ignore[union-attr]
    copy_all(again)
    again.replace_current_with_future(TP)
    assert os.path.dirname(again.get_log(TP).dir) == str(tmp_path / "a")  # type: ignore[union-attr]
    assert values(again) == [f"v{i}".encode() for i in range(6)] + [b"new"]
    again.shutdown()


def test_an_unfinished_move_without_its_replica_is_removed_at_start(tmp_path, mock_time) -> None:  # type: ignore[no-untyped-def]
    lm, _lg = with_ten_records(tmp_path, mock_time)
    lm.create_future_log(TP, str(tmp_path / "b"))
    lm.copy_to_future(TP, 1)
    lm.shutdown()
    import shutil

    shutil.rmtree(tmp_path / "a" / "moving-0")  # the replica itself is gone (deleted while the broker was down)
    again = manager(tmp_path, mock_time)
    assert again.future_log(TP) is None and again.get_log(TP) is None
    assert not any(n.endswith(FUTURE_DIR_SUFFIX) for n in os.listdir(tmp_path / "b"))
    again.shutdown()


def test_describe_log_dirs_shows_the_future_replica_and_how_far_it_has_to_go(tmp_path, mock_time) -> None:  # type: ignore[no-untyped-def]
    import asyncio
    from types import SimpleNamespace

    from strom.protocol.messages import DescribeLogDirsRequest
    from strom.server.apis.describe_log_dirs import handle

    lm, lg = with_ten_records(tmp_path, mock_time)
    lg.update_high_watermark(10)
    lm.create_future_log(TP, str(tmp_path / "b"))
    lm.copy_to_future(TP, 1)  # one batch copied: nine to go
    response = asyncio.run(handle(None, DescribeLogDirsRequest(topics=None),  # type: ignore[arg-type]
                                  replica_manager=SimpleNamespace(log_manager=lm), authorizer=None))
    got = {(r.log_dir, p.is_future_key): p.offset_lag for r in response.results for t in r.topics
           for p in t.partitions}
    assert got == {(str(tmp_path / "a"), False): 0, (str(tmp_path / "b"), True): 9}
    lm.shutdown()
