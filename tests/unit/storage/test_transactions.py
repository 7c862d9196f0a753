"""Open transactions in producer state, the last stable offset and the aborted-transaction index."""

from __future__ import annotations

import pytest

from strom.record.builder import MemoryRecordsBuilder
from strom.record.control import ControlRecordType, build_control_batch
from strom.storage.log_validator import AppendOrigin
from strom.storage.transaction_index import TXN_INDEX_FILE

T0 = 1_700_000_000_000


def txn_batch(pid: int, seq: int, n: int, epoch: int = 0) -> bytes:
    b = MemoryRecordsBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=True)
    for i in range(n):
        b.append(T0, None, f"{pid}-{seq + i}".encode())
    return b.build()


def plain_batch(n: int) -> bytes:
    b = MemoryRecordsBuilder()
    for i in range(n):
        b.append(T0, None, f"plain-{i}".encode())
    return b.build()


def marker(pid: int, kind: ControlRecordType, epoch: int = 0, coordinator_epoch: int = 0) -> bytes:
    return build_control_batch(kind, coordinator_epoch, pid, epoch, T0)


def test_lso_stops_at_first_open_transaction_and_moves_on_markers(make_log):
    lg = make_log()
    lg.append_as_leader(plain_batch(2))                       # 0-1
    lg.append_as_leader(txn_batch(7, 0, 3))                   # 2-4 pid 7
    lg.append_as_leader(txn_batch(8, 0, 2))                   # 5-6 pid 8
    lg.update_high_watermark(lg.log_end_offset)
    assert lg.last_stable_offset == 2
    lg.append_as_leader(marker(7, ControlRecordType.ABORT), origin=AppendOrigin.COORDINATOR)  # 7
    lg.update_high_watermark(lg.log_end_offset)
    assert lg.last_stable_offset == 5  # pid 8 still open
    lg.append_as_leader(marker(8, ControlRecordType.COMMIT), origin=AppendOrigin.COORDINATOR)  # 8
    assert lg.last_stable_offset == 8  # the HW bounds it
    lg.update_high_watermark(lg.log_end_offset)
    assert lg.last_stable_offset == 9
    aborted = lg.collect_aborted_transactions(0, 9)
    assert [(a.producer_id, a.first_offset, a.last_offset, a.last_stable_offset) for a in aborted] == [(7, 2, 7, 5)]
    assert lg.collect_aborted_transactions(8, 9) == []  # ended before the range
    assert lg.collect_aborted_transactions(0, 2) == []  # began after it


def test_open_transactions_and_aborted_index_survive_reopen_and_crash(make_log, tmp_path):
    lg = make_log()
    lg.append_as_leader(txn_batch(7, 0, 3))                   # 0-2
    lg.append_as_leader(marker(7, ControlRecordType.ABORT), origin=AppendOrigin.COORDINATOR)  # 3
    lg.append_as_leader(txn_batch(9, 0, 2))                   # 4-5 open
    lg.close()
    again = make_log()  # clean: snapshot at the end
    again.update_high_watermark(again.log_end_offset)
    assert again.last_stable_offset == 4
    assert [a.producer_id for a in again.collect_aborted_transactions(0, 6)] == [7]
    again.close()
    # A crash that lost the snapshots and the index: both are rebuilt by replaying the log.
    for f in (tmp_path / "topic-0").iterdir():
        if f.name.endswith(".snapshot") or f.name == TXN_INDEX_FILE:
            f.unlink()
    third = make_log()
    third.update_high_watermark(third.log_end_offset)
    assert third.last_stable_offset == 4
    assert [(a.first_offset, a.last_offset) for a in third.collect_aborted_transactions(0, 6)] == [(0, 3)]


def test_truncation_reopens_a_transaction_whose_marker_went(make_log):
    lg = make_log()
    lg.append_as_leader(txn_batch(7, 0, 2))                   # 0-1
    lg.append_as_leader(marker(7, ControlRecordType.ABORT), origin=AppendOrigin.COORDINATOR)  # 2
    lg.update_high_watermark(3)
    assert lg.last_stable_offset == 3
    lg.truncate_to(2)
    lg.update_high_watermark(2)
    assert lg.last_stable_offset == 0
    assert lg.collect_aborted_transactions(0, 2) == []


def test_stale_marker_is_refused(make_log):
    from strom.common.error_codes import InvalidProducerEpochError

    lg = make_log()
    lg.append_as_leader(txn_batch(7, 0, 2, epoch=3))
    with pytest.raises(InvalidProducerEpochError):
        lg.append_as_leader(marker(7, ControlRecordType.COMMIT, epoch=2), origin=AppendOrigin.COORDINATOR)
    assert lg.log_end_offset == 2
    # A coordinator that fenced the producer writes its ABORT with a newer epoch: accepted.
    lg.append_as_leader(marker(7, ControlRecordType.ABORT, epoch=4), origin=AppendOrigin.COORDINATOR)
    lg.update_high_watermark(lg.log_end_offset)
    assert lg.last_stable_offset == 3


def test_a_marker_of_an_older_coordinator_is_refused_and_the_epoch_outlives_a_restart(make_log, tmp_path):
    """Kafka's coordinator-epoch fence: once a partition took a marker from coordinator epoch 5, a marker of the
    same producer from epoch 4 (a zombie coordinator, or its request still in flight when the coordinator moved)
    would end the producer's *next* transaction there; it is refused with TRANSACTION_COORDINATOR_FENCED."""
    from strom.common.error_codes import TransactionCoordinatorFencedError

    coord = AppendOrigin.COORDINATOR
    lg = make_log()
    lg.append_as_leader(txn_batch(7, 0, 2))                                                              # 0-1
    lg.append_as_leader(marker(7, ControlRecordType.COMMIT, coordinator_epoch=5), origin=coord)         # 2
    lg.append_as_leader(txn_batch(7, 2, 2))                                                              # 3-4
    with pytest.raises(TransactionCoordinatorFencedError, match="4 \\(zombie\\), 5 \\(current\\)"):
        lg.append_as_leader(marker(7, ControlRecordType.COMMIT, coordinator_epoch=4), origin=coord)
    lg.update_high_watermark(lg.log_end_offset)
    assert (lg.log_end_offset, lg.last_stable_offset) == (5, 3)  # the open transaction stays open
    assert [p[4] for p in lg.active_producers()] == [5]  # DescribeProducers' coordinator epoch
    lg.close()
    for lose_snapshots in (False, True):  # from the snapshot, then by replaying the markers
        if lose_snapshots:
            for f in (tmp_path / "topic-0").iterdir():
                if f.name.endswith(".snapshot"):
                    f.unlink()
        again = make_log()
        with pytest.raises(TransactionCoordinatorFencedError):
            again.append_as_leader(marker(7, ControlRecordType.ABORT, coordinator_epoch=4), origin=coord)
        again.close()
    lg = make_log()
    # The same or a newer coordinator epoch ends it; the newer one is remembered.
    lg.append_as_leader(marker(7, ControlRecordType.ABORT, coordinator_epoch=6), origin=coord)         # 5
    lg.update_high_watermark(lg.log_end_offset)
    assert lg.last_stable_offset == 6
    assert [(a.first_offset, a.last_offset) for a in lg.collect_aborted_transactions(0, 6)] == [(3, 5)]
    with pytest.raises(TransactionCoordinatorFencedError):
        lg.append_as_leader(marker(7, ControlRecordType.COMMIT, coordinator_epoch=5), origin=coord)


def test_aborted_index_lookup_finds_long_transactions_and_skips_replays(tmp_path):
    """A read asks for the aborted transactions overlapping [fetch offset, upper bound): those whose marker is at
    or after the fetch offset and which began before the upper bound, however long ago they began; entries
    arrive in marker order, and a replayed one (after a restart) is not added twice."""
    from strom.storage.transaction_index import AbortedTxn, TransactionIndex

    idx = TransactionIndex(str(tmp_path))
    long_txn = AbortedTxn(1, 5, 900, 5)  # began at 5, aborted at 900
    short = [AbortedTxn(2, 100 * i, 100 * i + 10, 100 * i) for i in range(1, 9)]  # markers 110 .. 810
    for e in sorted([long_txn, *short], key=lambda e: e.last_offset):
        idx.append(e)
    idx.append(short[3])  # replayed
    assert len(idx.entries) == 9
    assert idx.collect_aborted(850, 1000) == [long_txn]
    assert idx.collect_aborted(505, 620) == [short[4], short[5], long_txn]  # markers 510, 610; 710 began at 700
    assert idx.collect_aborted(0, 5) == []  # nothing had begun before offset 5
    assert idx.collect_aborted(901, 2000) == []
    again = TransactionIndex(str(tmp_path))  # reloaded from the file: same answers
    assert again.collect_aborted(505, 620) == [short[4], short[5], long_txn]
    again.truncate_to(700)
    assert again.collect_aborted(0, 2000) == short[:6]


def test_a_verified_first_batch_is_appended_only_while_its_guard_holds(make_log):
    """KIP-890 part 1 in the log: a transaction's first batch carries the guard its verification began with; a
    marker written while the coordinator was being asked (the transaction ended) drops the guard and the batch is
    refused, so it cannot open a transaction no coordinator knows of."""
    from strom.common.error_codes import InvalidTxnStateError
    from strom.storage.producer_state import ONGOING

    coord = AppendOrigin.COORDINATOR
    lg = make_log()
    guard = lg.maybe_start_verification(7, 0)
    assert guard is not ONGOING and lg.maybe_start_verification(7, 0) is guard  # concurrent requests share it
    lg.append_as_leader(txn_batch(7, 0, 2), verification_guard=guard)                  # 0-1: the txn is ongoing
    assert lg.maybe_start_verification(7, 0) is ONGOING  # its next batches need no verification
    lg.append_as_leader(txn_batch(7, 2, 1), verification_guard=guard)  # a concurrent request of the same txn
    lg.append_as_leader(txn_batch(7, 3, 1), verification_guard=ONGOING)                # 3
    # The next transaction: its verification is under way when a marker ends the producer's transaction.
    lg.append_as_leader(marker(7, ControlRecordType.COMMIT), origin=coord)             # 4
    late = lg.maybe_start_verification(7, 0)
    assert late is not ONGOING and late is not guard
    lg.append_as_leader(marker(7, ControlRecordType.ABORT), origin=coord)              # 5 (an abort by timeout)
    with pytest.raises(InvalidTxnStateError, match="part of no ongoing transaction"):
        lg.append_as_leader(txn_batch(7, 4, 1), verification_guard=late)
    with pytest.raises(InvalidTxnStateError):  # nor does a batch that found the transaction ongoing, once ended
        lg.append_as_leader(txn_batch(7, 4, 1), verification_guard=ONGOING)
    lg.update_high_watermark(lg.log_end_offset)
    assert (lg.log_end_offset, lg.last_stable_offset) == (6, 6)  # nothing hangs
    # A fresh verification passes; without a guard (verification off) the log does not check.
    lg.append_as_leader(txn_batch(7, 4, 1), verification_guard=lg.maybe_start_verification(7, 0))   # 6
    lg.append_as_leader(marker(7, ControlRecordType.COMMIT), origin=coord)             # 7
    lg.append_as_leader(txn_batch(7, 5, 1))                                            # 8
    lg.update_high_watermark(lg.log_end_offset)
    assert lg.last_stable_offset == 8


def test_verification_guards_of_producers_that_never_came_back_expire(tmp_path):
    from strom.storage.producer_state import ProducerStateManager

    psm = ProducerStateManager(str(tmp_path), producer_id_expiration_ms=1000)
    old = psm.maybe_start_verification(7, 0, now_ms=T0)
    psm.maybe_start_verification(8, 0, now_ms=T0 + 600)
    psm.remove_expired(T0 + 1000)
    assert set(psm.verification_guards) == {8}
    assert psm.maybe_start_verification(7, 0, now_ms=T0 + 1000) is not old
