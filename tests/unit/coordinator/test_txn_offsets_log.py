"""``__consumer_offsets`` as the group coordinator replays it with transactional offset commits (TxnOffsetCommit):
records of a transaction count at its COMMIT marker, vanish at its ABORT, and stay pending while it is open."""

from __future__ import annotations

from types import SimpleNamespace

from strom.record.builder import MemoryRecordsBuilder
from strom.record.control import ControlRecordType, build_control_batch
from strom.server.coordinator.offsets_log import ReplicaOffsetsLog
from strom.storage.log import Log
from strom.storage.log_config import LogConfig
from strom.storage.log_validator import AppendOrigin

T0 = 1_700_000_000_000


def _batch(records: list[tuple[bytes, bytes]], pid: int = -1) -> bytes:
    b = MemoryRecordsBuilder(producer_id=pid, producer_epoch=0 if pid >= 0 else -1, is_transactional=pid >= 0)
    for k, v in records:
        b.append(T0, k, v)
    return b.build()


def _offsets_log(lg: Log) -> ReplicaOffsetsLog:
    rm = SimpleNamespace(get_log=lambda tp: lg)
    metadata = SimpleNamespace(__contains__=None)
    offsets_log = ReplicaOffsetsLog(rm, metadata, None, None)  # type: ignore[arg-type]
    offsets_log.exists = lambda: True  # type: ignore[method-assign]
    return offsets_log


def test_replay_holds_transactional_records_until_their_marker(tmp_path) -> None:
    lg = Log(str(tmp_path / "__consumer_offsets-0"), LogConfig.from_props({}))
    try:
        lg.append_as_leader(_batch([(b"k1", b"plain-1")]))
        lg.append_as_leader(_batch([(b"k2", b"txn-7")], pid=7), origin=AppendOrigin.COORDINATOR)
        lg.append_as_leader(_batch([(b"k3", b"txn-8")], pid=8), origin=AppendOrigin.COORDINATOR)
        lg.append_as_leader(build_control_batch(ControlRecordType.ABORT, 0, 8, 0, T0), origin=AppendOrigin.COORDINATOR)
        lg.append_as_leader(_batch([(b"k4", b"plain-2")]))
        lg.update_high_watermark(lg.log_end_offset)
        ol = _offsets_log(lg)
        assert list(ol.read(0)) == [(b"k1", b"plain-1"), (b"k4", b"plain-2")]
        assert ol.open_txn_records[0] == {7: [(b"k2", b"txn-7")]}
        lg.append_as_leader(build_control_batch(ControlRecordType.COMMIT, 0, 7, 0, T0),
                            origin=AppendOrigin.COORDINATOR)
        lg.update_high_watermark(lg.log_end_offset)
        assert list(ol.read(0)) == [(b"k1", b"plain-1"), (b"k4", b"plain-2"), (b"k2", b"txn-7")]
        assert ol.open_txn_records[0] == {}
    finally:
        lg.close()


def test_a_loaded_open_transactions_offsets_are_pending_until_its_marker(tmp_path) -> None:
    """A TxnOffsetCommit written before a restart (or under the previous coordinator) whose transaction is still open
    when the partition is loaded: OffsetFetch with require_stable answers UNSTABLE_OFFSET_COMMIT until the marker
    (KIP-447: a read_committed consumer must not start from the offsets committed before it), and the COMMIT marker
    then makes the transaction's offsets -- the latest of them -- the group's committed offsets."""
    from strom.common.error_codes import ErrorCode
    from strom.common.structs import TopicPartition
    from strom.server.coordinator.group_coordinator import GroupCoordinator
    from strom.server.coordinator.group_metadata import CommittedOffset
    from strom.server.coordinator.offset_config import GroupConfig, OffsetConfig
    from strom.server.coordinator.records import offset_commit_key, offset_commit_value
    from strom.testing.mock_time import MockTime

    tp = TopicPartition("t", 0)

    def commit(offset: int) -> tuple[bytes, bytes]:
        return offset_commit_key("g", "t", 0), offset_commit_value(CommittedOffset(offset=offset, commit_timestamp=T0))

    lg = Log(str(tmp_path / "__consumer_offsets-0"), LogConfig.from_props({}))
    try:
        lg.append_as_leader(_batch([commit(3)]))
        lg.append_as_leader(_batch([commit(8)], pid=7), origin=AppendOrigin.COORDINATOR)
        lg.append_as_leader(_batch([commit(9)], pid=7), origin=AppendOrigin.COORDINATOR)
        lg.update_high_watermark(lg.log_end_offset)
        coord = GroupCoordinator(GroupConfig(), OffsetConfig(offsets_topic_num_partitions=1), MockTime(),
                                 _offsets_log(lg))
        coord.startup()
        assert coord.handle_fetch_offsets("g", [tp], require_stable=True)[0] == ErrorCode.UNSTABLE_OFFSET_COMMIT
        err, offsets = coord.handle_fetch_offsets("g", [tp])
        assert err == ErrorCode.NONE and offsets[tp].offset == 3  # (without require_stable: the last committed)
        lg.append_as_leader(build_control_batch(ControlRecordType.COMMIT, 0, 7, 0, T0),
                            origin=AppendOrigin.COORDINATOR)
        coord.txn_offsets.complete(7, 0, committed=True)
        err, offsets = coord.handle_fetch_offsets("g", [tp], require_stable=True)
        assert err == ErrorCode.NONE and offsets[tp].offset == 9
    finally:
        lg.close()
