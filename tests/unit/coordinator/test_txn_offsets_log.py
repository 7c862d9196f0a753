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
