"""The Sender and a transactional TransactionManager against a MockClient: what is sent after a partition could
not be added to the transaction (MockTime, no sockets)."""

from __future__ import annotations

from typing import Any

import pytest

from strom.common.error_codes import ErrorCode
from strom.common.errors import IllegalStateError
from strom.producer.internals.transaction_manager import State, TransactionalRequestResult, TransactionManager
from strom.protocol.messages import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    FindCoordinatorResponse,
    InitProducerIdRequest,
    ProduceRequest,
)
from strom.record.batch import RecordBatch

from .sender_support import (
    TP0,
    TP1,
    Harness,
    init_producer_id_response,
    make_harness,
    produce_response,
    request_partitions,
)

pytestmark = pytest.mark.component

R = AddPartitionsToTxnResponse


def add_partitions_response(**codes: int) -> Any:
    """``{"p0": code, "p1": code}`` for partitions of topic ``t``."""
    return R(results_by_topic_v3_and_below=[R.AddPartitionsToTxnTopicResult(name="t", results_by_partition=[
        R.AddPartitionsToTxnPartitionResult(partition_index=int(k[1:]), partition_error_code=c)
        for k, c in codes.items()])])


def initialized(**harness: Any) -> Harness:
    """A transactional producer's harness, initialized (coordinator: node 0); every request the client is given
    is kept in ``h.sent``."""
    h = make_harness(transactional_id="tx", **harness)
    h.sent = []  # type: ignore[attr-defined]
    send = h.client.send

    def recording_send(request: Any, now: int) -> None:
        h.sent.append(request.request)  # type: ignore[attr-defined]
        send(request, now)

    h.client.send = recording_send  # type: ignore[method-assign]
    tm = h.tm
    assert tm is not None
    h.client.prepare_response(FindCoordinatorResponse(coordinators=[FindCoordinatorResponse.Coordinator(
        key="tx", node_id=0, host="localhost", port=1969, error_code=0)]))
    h.client.prepare_response(init_producer_id_response())
    init = tm.initialize_transactions()
    h.run_once(4)
    assert init.is_completed() and init.error is None
    return h


def in_transaction() -> Harness:
    """``initialized()``, a transaction begun, TP0 added and its batch acknowledged."""
    h = initialized()
    tm = h.tm
    assert tm is not None
    tm.begin_transaction()
    tm.maybe_add_partition(TP0)
    h.append(TP0)
    h.client.prepare_response(add_partitions_response(p0=ErrorCode.NONE))
    h.client.prepare_response(produce_response(TP0))
    h.run_once(4)
    assert TP0 in tm.partitions_in_transaction and h.results and h.results[0][1] is None
    return h


def commit_while_adding_tp1(code: int) -> tuple[Harness, TransactionManager, TransactionalRequestResult]:
    """``in_transaction()``, then a record for TP1 and commit_transaction() at once: TP1's AddPartitionsToTxn
    (answered ``code``) is still to go out when the commit starts."""
    h = in_transaction()
    tm = h.tm
    assert tm is not None
    tm.maybe_add_partition(TP1)
    h.append(TP1)
    commit = tm.begin_commit()
    h.client.prepare_response(add_partitions_response(p1=code))
    return h, tm, commit


def sent(h: Harness, kind: type) -> list[Any]:
    return [r for r in h.sent if isinstance(r, kind)]  # type: ignore[attr-defined]


def test_no_commit_is_sent_after_a_partition_could_not_be_added() -> None:
    """A partition refused while the commit waits (here TOPIC_AUTHORIZATION_FAILED) makes the transaction one that
    can only abort: its EndTxn(commit) is never sent (the coordinator would commit TP0's records without TP1's),
    commit_transaction() gets the error, and the abort that follows goes out and completes the transaction."""
    h, tm, commit = commit_while_adding_tp1(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    h.run_once(6)
    assert [r.committed for r in sent(h, EndTxnRequest)] == []
    assert commit.is_completed() and type(commit.error).__name__ == "TopicAuthorizationFailedError"
    assert tm.state is State.ABORTABLE_ERROR and len(sent(h, ProduceRequest)) == 1  # TP1's batch never went out
    abort = tm.begin_abort()
    h.client.prepare_response(EndTxnResponse(error_code=ErrorCode.NONE))
    h.run_once(3)
    assert [r.committed for r in sent(h, EndTxnRequest)] == [False]
    assert abort.is_completed() and abort.error is None and tm.state is State.READY


def test_a_partition_the_coordinator_does_not_know_yet_is_added_again() -> None:
    """UNKNOWN_TOPIC_OR_PARTITION from AddPartitionsToTxn (a coordinator that has just started, before the
    controller's UpdateMetadata) is retried, as by Kafka's producer, and the transaction commits."""
    h, tm, commit = commit_while_adding_tp1(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    h.run_once(2)
    assert tm.state is State.COMMITTING_TRANSACTION and not commit.is_completed()
    h.time.sleep(200)  # the retry backoff
    h.client.prepare_response(add_partitions_response(p1=ErrorCode.NONE))
    h.client.prepare_response(produce_response(TP1))
    h.client.prepare_response(EndTxnResponse(error_code=ErrorCode.NONE))
    for _ in range(8):
        h.run_once()
        h.time.sleep(50)
    assert len(sent(h, AddPartitionsToTxnRequest)) == 3  # TP0, TP1 refused, TP1 again
    assert [r.committed for r in sent(h, EndTxnRequest)] == [True]
    assert commit.is_completed() and commit.error is None and tm.state is State.READY


def test_a_failed_batch_bumps_the_epoch_after_the_abort_and_the_producer_goes_on() -> None:
    """KIP-360: a batch failed with OUT_OF_ORDER_SEQUENCE_NUMBER (the broker lost records the producer had sent)
    makes the transaction one that can only abort; the abort sends EndTxn, then InitProducerId with the current
    id and epoch, and completes when the coordinator answers the next epoch. The next transaction writes under it
    from sequence 0 (before: the producer kept its epoch and the partition's broken sequence)."""
    h = in_transaction()
    tm = h.tm
    assert tm is not None and tm.coordinator_supports_bumping_epoch
    failed = h.append(TP0)
    h.client.prepare_response(produce_response(TP0, error=ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER))
    h.run_once(3)
    assert failed.done() and type(failed.exception()).__name__ == "OutOfOrderSequenceNumberError"
    assert tm.state is State.ABORTABLE_ERROR
    abort = tm.begin_abort()
    h.client.prepare_response(EndTxnResponse(error_code=ErrorCode.NONE))
    h.run_once(3)
    assert [r.committed for r in sent(h, EndTxnRequest)] == [False]
    assert not abort.is_completed() and tm.state is State.INITIALIZING  # the bump is out, not answered
    assert tm.begin_abort() is abort  # abort_transaction() again after a timeout waits on the same requests
    with pytest.raises(IllegalStateError):
        tm.begin_commit()  # not on the abort's: nothing is committed
    bump = sent(h, InitProducerIdRequest)[-1]
    assert (bump.transactional_id, bump.producer_id, bump.producer_epoch) == ("tx", 1000, 0)
    h.client.respond(init_producer_id_response(1000, 1))
    h.run_once()
    assert abort.is_completed() and abort.error is None and tm.state is State.READY
    tm.begin_transaction()
    tm.maybe_add_partition(TP0)
    later = h.append(TP0)
    h.client.prepare_response(add_partitions_response(p0=ErrorCode.NONE))
    h.client.prepare_response(produce_response(TP0, offset=9))
    h.run_once(4)
    added = sent(h, AddPartitionsToTxnRequest)[-1]
    assert added.v3_and_below_producer_epoch == 1
    batch = RecordBatch(request_partitions(sent(h, ProduceRequest)[-1])[TP0])
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (1000, 1, 0)
    assert later.get().offset == 9


def test_without_a_bump_capable_coordinator_a_lost_producer_id_is_fatal() -> None:
    """UNKNOWN_PRODUCER_ID from EndTxn: with a coordinator that takes InitProducerId v3+ the transaction aborts and
    the epoch is bumped; one that does not (Kafka before 2.5) leaves only a fatal error."""
    for supports, expected in ((True, State.ABORTABLE_ERROR), (False, State.FATAL_ERROR)):
        h = in_transaction()
        tm = h.tm
        assert tm is not None
        tm.coordinator_supports_bumping_epoch = supports
        commit = tm.begin_commit()
        h.client.prepare_response(EndTxnResponse(error_code=ErrorCode.UNKNOWN_PRODUCER_ID))
        h.run_once(3)
        assert type(commit.error).__name__ == "UnknownProducerIdError"
        assert tm.state is expected
        if supports:
            abort = tm.begin_abort()
            h.client.prepare_response(EndTxnResponse(error_code=ErrorCode.NONE))
            h.client.prepare_response(init_producer_id_response(1000, 1))
            h.run_once(6)
            assert abort.is_completed() and abort.error is None and tm.producer_id_and_epoch().epoch == 1


def test_commit_called_again_after_a_timeout_waits_on_the_same_end_txn() -> None:
    """commit_transaction() timing out leaves the EndTxn under way; calling it again waits on the same request
    (Kafka's cached transactional result) instead of raising IllegalStateError, and only one EndTxn is sent."""
    h = in_transaction()
    tm = h.tm
    assert tm is not None
    commit = tm.begin_commit()
    h.run_once(2)
    assert [r.committed for r in sent(h, EndTxnRequest)] == [True] and not commit.is_completed()
    assert tm.begin_commit() is commit
    h.client.respond(EndTxnResponse(error_code=ErrorCode.NONE))
    h.run_once()
    assert commit.is_completed() and commit.error is None and tm.state is State.READY
    assert len(sent(h, EndTxnRequest)) == 1


def test_an_abort_before_the_partition_was_added_fails_the_unsent_batch() -> None:
    """A record sent, then abort_transaction() before the Sender ran (the partition not yet added): the abort
    completes only once the record's batch failed with TransactionAbortedError, nothing is sent for it, and the
    next transaction's records go in a batch of their own. (Before, the abort completed at once and left the open
    batch in the accumulator: the next transaction's records were appended to it and committed with it.)"""
    h = initialized(linger_ms=100)
    tm = h.tm
    assert tm is not None
    requests_before = len(h.sent)  # type: ignore[attr-defined]
    tm.begin_transaction()
    tm.maybe_add_partition(TP0)
    aborted = h.append(TP0, value=b"aborted")
    abort = tm.begin_abort()
    assert not abort.is_completed()  # not before the Sender has failed the batch
    h.run_once(2)
    assert abort.is_completed() and abort.error is None and tm.state is State.READY
    assert aborted.done() and type(aborted.exception()).__name__ == "TransactionAbortedError"
    assert len(h.sent) == requests_before  # type: ignore[attr-defined]  # no AddPartitionsToTxn, no EndTxn
    tm.begin_transaction()
    tm.maybe_add_partition(TP0)
    committed = h.append(TP0, value=b"c0")
    commit = tm.begin_commit()
    h.client.prepare_response(add_partitions_response(p0=ErrorCode.NONE))
    h.client.prepare_response(produce_response(TP0, offset=0))
    h.client.prepare_response(EndTxnResponse(error_code=ErrorCode.NONE))
    h.run_once(6)
    assert commit.is_completed() and commit.error is None
    assert committed.get().offset == 0
    assert [r.value for r in RecordBatch(request_partitions(sent(h, ProduceRequest)[-1])[TP0])] == [b"c0"]
