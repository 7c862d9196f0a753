"""Producer id and epoch, per-partition sequence numbers, in-flight ordering, and transactions.

Kafka counterpart: ``org.apache.kafka.clients.producer.internals.TransactionManager`` (3.x).

Transactions (``transactional.id`` set) follow the Java state machine::

    UNINITIALIZED -> INITIALIZING -> READY -> IN_TRANSACTION -> COMMITTING_TRANSACTION -> READY
                                               |      |-> ABORTING_TRANSACTION -> READY
                                               '-> ABORTABLE_ERROR -> ABORTING_TRANSACTION
    any -> FATAL_ERROR

The caller's thread starts an operation (``initialize_transactions``, ``begin_transaction``,
``begin_commit``, ``begin_abort``, ``send_offsets_to_transaction``) which enqueues requests and returns a
:class:`TransactionalRequestResult`; the Sender thread sends them (to the transaction coordinator, or the
group coordinator for TxnOffsetCommit, found with FindCoordinator) and completes the result. Partitions are
added to the transaction (AddPartitionsToTxn) before their first batch is drained; EndTxn waits until every
batch of the transaction is acknowledged. Errors are *fatal* (ProducerFencedError, authorization, an
invalid state: the producer can only be closed) or *abortable* (a failed batch or offset commit: the
application must call ``abort_transaction()``). A call in the wrong state raises :class:`IllegalStateError`.

Idempotence:

* The Sender asks for a producer id with InitProducerId (no transactional id) before draining anything.
* Sequences are assigned when a batch is drained (never re-assigned: an earlier attempt may have been
  written), ``next_sequence`` advancing by the record count; every drained batch is tracked in its
  partition's in-flight set ordered by base sequence (retries go back in sequence order, and a retried batch
  is only sent when it is the first in flight).
* Acknowledged batches advance ``last_acked_sequence``. When a batch's fate is unknown (expired after being
  sent, or failed out of retries) the partition's sequence is *unresolved*: nothing new is drained until the
  in-flight batches settle; then, if the next sequence still does not follow the last acknowledged one, the
  epoch is bumped (KIP-360: the idempotent producer bumps its own epoch and restarts the partition's sequences
  at 0; at ``Short.MAX_VALUE`` it gets a new producer id instead).
* ``OUT_OF_ORDER_SEQUENCE_NUMBER`` and ``UNKNOWN_PRODUCER_ID`` are retried, bumping the epoch when they reveal a
  real gap (:meth:`TransactionManager.can_retry`).
* After a leadership change nothing of a partition goes to its new leader while a request carrying its batches
  is outstanding at the old one (:meth:`TransactionManager.has_request_outstanding_elsewhere`; librdkafka's
  drain, which Java's producer lacks).

Thread-safety: thread-safe (one re-entrant lock); almost every call comes from the Sender thread.
"""

from __future__ import annotations

import bisect
import enum
import logging
import threading
from collections import deque
from typing import Any

from strom.common.error_codes import (
    ClusterAuthorizationFailedError,
    ErrorCode,
    InvalidProducerEpochError,
    OutOfOrderSequenceNumberError,
    ProducerFencedError,
    TransactionalIdAuthorizationFailedError,
    UnknownProducerIdError,
    UnsupportedVersionError,
)
from strom.common.errors import IllegalStateError, KafkaError, KafkaTimeoutError, error_class
from strom.common.structs import Node, TopicPartition
from strom.common.time import SYSTEM_TIME, Time
from strom.producer.internals.producer_batch import NO_SEQUENCE, ProducerBatch
from strom.producer.internals.producer_id_and_epoch import NONE, ProducerIdAndEpoch
from strom.protocol.messages import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    FindCoordinatorRequest,
    InitProducerIdRequest,
    TxnOffsetCommitRequest,
)

__all__ = ["TransactionManager", "State", "TxnRequestHandler", "TransactionalRequestResult",
           "TransactionAbortedError", "increment_sequence"]

log = logging.getLogger(__name__)

INT_MAX = 2**31 - 1
SHORT_MAX = 2**15 - 1
NO_LAST_ACKED_SEQUENCE_NUMBER = -1
NO_INFLIGHT_REQUEST_CORRELATION_ID = -1


def increment_sequence(sequence: int, increment: int) -> int:
    """Kafka's ``DefaultRecordBatch.incrementSequence``: sequences wrap at ``Integer.MAX_VALUE``."""
    if sequence > INT_MAX - increment:
        return increment - (INT_MAX - sequence) - 1
    return sequence + increment


class State(enum.Enum):
    UNINITIALIZED = "UNINITIALIZED"
    INITIALIZING = "INITIALIZING"
    READY = "READY"
    IN_TRANSACTION = "IN_TRANSACTION"
    COMMITTING_TRANSACTION = "COMMITTING_TRANSACTION"
    ABORTING_TRANSACTION = "ABORTING_TRANSACTION"
    ABORTABLE_ERROR = "ABORTABLE_ERROR"
    FATAL_ERROR = "FATAL_ERROR"


# Kafka's State.isTransitionValid: the states a state may be entered from.
_VALID_SOURCES: dict[State, tuple[State, ...]] = {
    State.UNINITIALIZED: (State.READY, State.ABORTABLE_ERROR),
    State.INITIALIZING: (State.UNINITIALIZED, State.ABORTABLE_ERROR, State.ABORTING_TRANSACTION),
    State.READY: (State.INITIALIZING, State.COMMITTING_TRANSACTION, State.ABORTING_TRANSACTION),
    State.IN_TRANSACTION: (State.READY,),
    State.COMMITTING_TRANSACTION: (State.IN_TRANSACTION,),
    State.ABORTING_TRANSACTION: (State.IN_TRANSACTION, State.ABORTABLE_ERROR),
    State.ABORTABLE_ERROR: (State.IN_TRANSACTION, State.COMMITTING_TRANSACTION, State.ABORTABLE_ERROR,
                            State.INITIALIZING),
}


class TransactionalRequestResult:
    """What a transactional call waits on (Kafka's ``TransactionalRequestResult``): completed by the Sender."""

    def __init__(self, operation: str) -> None:
        self.operation = operation
        self._done = threading.Event()
        self.error: BaseException | None = None

    def done(self, error: BaseException | None = None) -> None:
        if not self._done.is_set():
            self.error = error
            self._done.set()

    def is_completed(self) -> bool:
        return self._done.is_set()

    def await_(self, timeout_ms: int | None = None) -> None:
        """Wait for the outcome; raise its error, or KafkaTimeoutError after ``timeout_ms``."""
        if not self._done.wait(None if timeout_ms is None else timeout_ms / 1000):
            raise KafkaTimeoutError(f"Timeout expired after {timeout_ms}ms while awaiting {self.operation}")
        if self.error is not None:
            raise self.error


class _PartitionEntry:
    """Kafka's ``TxnPartitionEntry``: one partition's sequence bookkeeping."""

    __slots__ = ("producer_id_and_epoch", "next_sequence", "last_acked_sequence", "in_flight", "_keys",
                 "last_acked_offset")

    def __init__(self, producer_id_and_epoch: ProducerIdAndEpoch) -> None:
        self.producer_id_and_epoch = producer_id_and_epoch
        self.next_sequence = 0
        self.last_acked_sequence = NO_LAST_ACKED_SEQUENCE_NUMBER
        self.in_flight: list[ProducerBatch] = []  # sorted by base sequence
        self._keys: list[int] = []
        self.last_acked_offset = -1

    def add(self, batch: ProducerBatch) -> None:
        seq = batch.base_sequence
        i = bisect.bisect_left(self._keys, seq)
        if i < len(self._keys) and self._keys[i] == seq:
            self.in_flight[i] = batch  # a set keyed by base sequence, as Kafka's TreeSet
            return
        self._keys.insert(i, seq)
        self.in_flight.insert(i, batch)

    def remove(self, batch: ProducerBatch) -> None:
        for i, b in enumerate(self.in_flight):
            if b is batch:
                del self.in_flight[i]
                del self._keys[i]
                return

    def reset_sequence_numbers(self, producer_id_and_epoch: ProducerIdAndEpoch) -> None:
        """Kafka's ``startSequencesAtBeginning``: in-flight batches get sequences from 0 under the new
        producer id/epoch, in their current order."""
        sequence = 0
        for batch in self.in_flight:
            batch.reset_producer_state(producer_id_and_epoch.producer_id, producer_id_and_epoch.epoch, sequence,
                                       batch.is_transactional)
            sequence = increment_sequence(sequence, batch.record_count)
        self._keys = [b.base_sequence for b in self.in_flight]
        self.producer_id_and_epoch = producer_id_and_epoch
        self.next_sequence = sequence
        self.last_acked_sequence = NO_LAST_ACKED_SEQUENCE_NUMBER


class TransactionAbortedError(KafkaError):
    """A record's batch was failed because its transaction was aborted (Kafka's ``TransactionAbortedException``)."""


TRANSACTION = "transaction"
GROUP = "group"


class TxnRequestHandler:
    """A request the TransactionManager wants sent (Kafka's ``TxnRequestHandler``); ``on_complete`` is its
    ``RequestCompletionHandler``. ``coordinator_type`` None: any broker; else the transaction or group
    coordinator (``coordinator_key`` names the group)."""

    coordinator_type: str | None = None
    max_version: int | None = None
    is_end_txn = False

    def __init__(self, manager: TransactionManager, request: Any,
                 result: TransactionalRequestResult | None = None) -> None:
        self.manager = manager
        self.request = request
        self.result = result
        self.is_retry = False
        self.retry_after_ms = 0

    @property
    def coordinator_key(self) -> str | None:
        return self.manager.transactional_id

    def fail(self, error: BaseException) -> None:
        if self.result is not None:
            self.result.done(error)

    def fatal(self, error: BaseException) -> None:
        self.manager.fatal_error(error)
        self.fail(error)

    def abortable(self, error: BaseException) -> None:
        self.manager.abortable_error(error)
        self.fail(error)

    def abortable_if_possible(self, error: BaseException) -> None:
        if self.manager.can_bump_epoch():
            self.manager.require_epoch_bump()
            self.abortable(error)
        else:
            self.fatal(error)

    def retriable(self, code: int) -> bool:
        """Coordinator moved / loading / busy: look it up again when needed, and retry."""
        if code in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE):
            self.manager.forget_coordinator(self.coordinator_type, self.coordinator_key)
            self.manager.reenqueue(self)
            return True
        if code in (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.CONCURRENT_TRANSACTIONS) \
                or error_class(code).retriable:
            self.manager.reenqueue(self)
            return True
        return False

    def on_complete(self, response: Any) -> None:
        manager = self.manager
        if response.request_header.correlation_id != manager.in_flight_correlation_id:
            manager.fatal_error(KafkaError("Detected more than one in-flight transactional request."))
            return
        manager.clear_in_flight_correlation_id()
        if response.disconnected:
            log.debug("%sDisconnected from %s. Will retry.", manager.log_context, response.destination)
            manager.forget_coordinator(self.coordinator_type, self.coordinator_key)
            manager.reenqueue(self)
        elif response.version_mismatch is not None:
            manager.version_unsupported(self, response.version_mismatch)
        elif response.has_response():
            self.handle_response(response.response_body)
        else:
            manager.fatal_error(KafkaError("Could not execute transactional request for unknown reasons"))

    def handle_response(self, body: Any) -> None:
        raise NotImplementedError


class InitProducerIdHandler(TxnRequestHandler):
    """InitProducerId: for the idempotent producer (no transactional id, any broker) or, with a transactional
    id, to its transaction coordinator (which fences older incarnations)."""

    def __init__(self, manager: TransactionManager, is_epoch_bump: bool = False,
                 result: TransactionalRequestResult | None = None) -> None:
        tid = manager.transactional_id
        # KIP-360: a transactional producer bumping its epoch after an error names its current id and epoch, so
        # that the coordinator tells it from an older incarnation (which it fences).
        current = manager.producer_id_and_epoch() if is_epoch_bump else NONE
        super().__init__(manager, InitProducerIdRequest(
            transactional_id=tid, transaction_timeout_ms=manager.transaction_timeout_ms if tid else INT_MAX,
            producer_id=current.producer_id, producer_epoch=current.epoch), result)
        self.is_epoch_bump = is_epoch_bump
        if tid is not None:
            self.coordinator_type = TRANSACTION

    def on_complete(self, response: Any) -> None:
        if self.manager.is_transactional() and response.has_response():
            # Kafka's coordinatorSupportsBumpingEpoch: InitProducerId v3+ takes the current id and epoch.
            self.manager.coordinator_supports_bumping_epoch = response.request_header.api_version >= 3
        super().on_complete(response)

    def handle_response(self, body: Any) -> None:
        manager = self.manager
        code = body.error_code
        if code == ErrorCode.NONE:
            manager.set_producer_id_and_epoch(ProducerIdAndEpoch(body.producer_id, body.producer_epoch))
            manager.transition_to(State.READY)
            manager.last_error = None
            if self.is_epoch_bump:
                log.info("%sEpoch bumped after the aborted transaction: producer id %d, epoch %d",
                         manager.log_context, body.producer_id, body.producer_epoch)
                manager.reset_sequence_numbers()
            if self.result is not None:
                self.result.done()
        elif self.retriable(code):
            pass
        elif code in (ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, ErrorCode.CLUSTER_AUTHORIZATION_FAILED):
            self.fatal(error_class(code)())
        elif code in (ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.PRODUCER_FENCED):
            self.fatal(ProducerFencedError("There is a newer producer with the same transactionalId which fences "
                                           "the current one."))
        else:
            self.fatal(error_class(code)(f"Unexpected error in InitProducerIdResponse; "
                                         f"{error_class(code).description}"))


class FindCoordinatorHandler(TxnRequestHandler):
    """FindCoordinator for the transaction (key type 1) or a group (0); sent to any broker."""

    def __init__(self, manager: TransactionManager, coordinator_type: str, key: str) -> None:
        super().__init__(manager, FindCoordinatorRequest(key=key, key_type=1 if coordinator_type == TRANSACTION
                                                         else 0, coordinator_keys=[key]))
        self.target_type = coordinator_type
        self.key = key

    def handle_response(self, body: Any) -> None:
        coordinators = getattr(body, "coordinators", None)
        if coordinators:
            c = coordinators[0]
            code, node_id, host, port = c.error_code, c.node_id, c.host, c.port
        else:
            code, node_id, host, port = body.error_code, body.node_id, body.host, body.port
        if code == ErrorCode.NONE:
            self.manager.set_coordinator(self.target_type, self.key, Node(node_id, host, port))
        elif code in (ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,):
            self.manager.fatal_error(error_class(code)())
            self.manager.fail_pending(error_class(code)())
        elif code == ErrorCode.GROUP_AUTHORIZATION_FAILED:
            self.manager.abortable_error(error_class(code)(f"Not authorized to access group {self.key}"))
            self.manager.fail_pending(error_class(code)(f"Not authorized to access group {self.key}"))
        else:
            self.manager.reenqueue(self)


def _check_epoch_errors(handler: TxnRequestHandler, code: int) -> bool:
    if code in (ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.PRODUCER_FENCED):
        handler.fatal(ProducerFencedError("There is a newer producer with the same transactionalId which fences "
                                          "the current one."))
        return True
    if code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
        handler.fatal(error_class(code)())
        return True
    if code in (ErrorCode.UNKNOWN_PRODUCER_ID, ErrorCode.INVALID_PRODUCER_ID_MAPPING):
        # The coordinator lost the producer (e.g. the id expired): abort, and the epoch bump that follows gets
        # an id again (Kafka's abortableErrorIfPossible; fatal with a coordinator that cannot bump epochs).
        handler.abortable_if_possible(error_class(code)(error_class(code).description))
        return True
    if code == ErrorCode.INVALID_TXN_STATE:
        handler.fatal(error_class(code)(error_class(code).description))
        return True
    return False


class AddPartitionsToTxnHandler(TxnRequestHandler):
    coordinator_type = TRANSACTION
    max_version = 3  # v4+ is the brokers' batched form (KIP-890)

    def __init__(self, manager: TransactionManager, partitions: set[TopicPartition]) -> None:
        topics: dict[str, list[int]] = {}
        for tp in sorted(partitions):
            topics.setdefault(tp.topic, []).append(tp.partition)
        pid = manager.producer_id_and_epoch()
        super().__init__(manager, AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=manager.transactional_id, v3_and_below_producer_id=pid.producer_id,
            v3_and_below_producer_epoch=pid.epoch,
            v3_and_below_topics=[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=t, partitions=ps)
                                 for t, ps in topics.items()]))
        self.partitions = set(partitions)

    def handle_response(self, body: Any) -> None:
        manager = self.manager
        errors = {TopicPartition(t.name, p.partition_index): p.partition_error_code
                  for t in body.results_by_topic_v3_and_below for p in t.results_by_partition}
        bad = {tp: code for tp, code in errors.items() if code != ErrorCode.NONE}
        if not bad:
            manager.partitions_added(self.partitions)
            return
        codes = set(bad.values())
        for code in codes:
            if _check_epoch_errors(self, code):
                return
        retry = [c for c in codes if c != ErrorCode.OPERATION_NOT_ATTEMPTED]
        # (UNKNOWN_TOPIC_OR_PARTITION is retried, as by Kafka's producer: a coordinator that has just started
        # knows no topic until the controller's UpdateMetadata)
        if retry and all(c in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                               ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.CONCURRENT_TRANSACTIONS)
                         or error_class(c).retriable for c in retry):
            self.retriable(retry[0])
            return
        failed = {tp for tp, c in bad.items() if c != ErrorCode.OPERATION_NOT_ATTEMPTED}
        manager.partitions_failed(self.partitions)
        first = bad[next(iter(sorted(failed or bad)))]
        self.abortable(error_class(first)(f"Could not add partitions {sorted(failed)} to the transaction: "
                                          f"{error_class(first).description}"))


class AddOffsetsToTxnHandler(TxnRequestHandler):
    coordinator_type = TRANSACTION

    def __init__(self, manager: TransactionManager, offsets: dict[TopicPartition, Any], group: Any,
                 result: TransactionalRequestResult) -> None:
        pid = manager.producer_id_and_epoch()
        super().__init__(manager, AddOffsetsToTxnRequest(transactional_id=manager.transactional_id,
                                                         producer_id=pid.producer_id, producer_epoch=pid.epoch,
                                                         group_id=group.group_id), result)
        self.offsets = offsets
        self.group = group

    def handle_response(self, body: Any) -> None:
        code = body.error_code
        if code == ErrorCode.NONE:
            self.manager.transaction_started = True
            self.manager.enqueue(TxnOffsetCommitHandler(self.manager, self.offsets, self.group, self.result))
        elif self.retriable(code) or _check_epoch_errors(self, code):
            pass
        else:
            self.abortable(error_class(code)(f"Unexpected error in AddOffsetsToTxnResponse: "
                                             f"{error_class(code).description}"))


class TxnOffsetCommitHandler(TxnRequestHandler):
    coordinator_type = GROUP

    def __init__(self, manager: TransactionManager, offsets: dict[TopicPartition, Any], group: Any,
                 result: TransactionalRequestResult | None) -> None:
        pid = manager.producer_id_and_epoch()
        topics: dict[str, list[Any]] = {}
        for tp, om in offsets.items():
            offset, metadata, epoch = _offset_parts(om)
            topics.setdefault(tp.topic, []).append(TxnOffsetCommitRequest.TxnOffsetCommitRequestPartition(
                partition_index=tp.partition, committed_offset=offset, committed_leader_epoch=epoch,
                committed_metadata=metadata))
        super().__init__(manager, TxnOffsetCommitRequest(
            transactional_id=manager.transactional_id, group_id=group.group_id, producer_id=pid.producer_id,
            producer_epoch=pid.epoch, generation_id=group.generation_id, member_id=group.member_id,
            group_instance_id=group.group_instance_id,
            topics=[TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic(name=t, partitions=ps)
                    for t, ps in topics.items()]), result)
        self.offsets = dict(offsets)
        self.group = group

    @property
    def coordinator_key(self) -> str | None:
        return str(self.group.group_id)

    def handle_response(self, body: Any) -> None:
        codes = {TopicPartition(t.name, p.partition_index): p.error_code for t in body.topics for p in t.partitions}
        bad = {tp: c for tp, c in codes.items() if c != ErrorCode.NONE}
        if not bad:
            if self.result is not None:
                self.result.done()
            return
        for code in set(bad.values()):
            if _check_epoch_errors(self, code):
                return
            if code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION, ErrorCode.FENCED_INSTANCE_ID):
                from strom.consumer.errors import CommitFailedError

                self.abortable(CommitFailedError(
                    "Transaction offset commit failed because the consumer group metadata is stale (a rebalance "
                    f"completed and assigned the partitions to another member: {error_class(code).name})"))
                return
        first = next(iter(bad.values()))
        if self.retriable(first):
            # Only the partitions that failed are committed again.
            retry = TxnOffsetCommitHandler(self.manager, {tp: self.offsets[tp] for tp in bad}, self.group,
                                           self.result)
            self.manager.replace_retry(self, retry)
            return
        self.abortable(error_class(first)(f"Unexpected error in TxnOffsetCommitResponse: "
                                          f"{error_class(first).description}"))


class EndTxnHandler(TxnRequestHandler):
    coordinator_type = TRANSACTION
    is_end_txn = True

    def __init__(self, manager: TransactionManager, commit: bool, result: TransactionalRequestResult,
                 local_only: bool = False) -> None:
        pid = manager.producer_id_and_epoch()
        super().__init__(manager, EndTxnRequest(transactional_id=manager.transactional_id,
                                                producer_id=pid.producer_id, producer_epoch=pid.epoch,
                                                committed=commit), result)
        self.commit = commit
        self.local_only = local_only  # never sent: the transaction ends in the producer only

    def complete_locally(self) -> None:
        """End a transaction the coordinator has nothing of (no partition or offsets were added)."""
        self.manager.complete_transaction()
        if self.result is not None:
            self.result.done()

    def handle_response(self, body: Any) -> None:
        code = body.error_code
        if code == ErrorCode.NONE:
            self.manager.complete_transaction()
            if self.result is not None:
                self.result.done()
        elif self.retriable(code) or _check_epoch_errors(self, code):
            pass
        else:
            self.fatal(error_class(code)(f"Unhandled error in EndTxnResponse: {error_class(code).description}"))


def _offset_parts(om: Any) -> tuple[int, str, int]:
    """(offset, metadata, leader epoch) of an ``OffsetAndMetadata``-like value or a bare offset."""
    if isinstance(om, int):
        return om, "", -1
    epoch = getattr(om, "leader_epoch", None)
    return int(om.offset), getattr(om, "metadata", "") or "", -1 if epoch is None else int(epoch)


_PRIORITY = {"FindCoordinatorHandler": 0, "InitProducerIdHandler": 1, "AddPartitionsToTxnHandler": 2,
             "AddOffsetsToTxnHandler": 2, "TxnOffsetCommitHandler": 2, "EndTxnHandler": 3}
EPOCH_BUMP_PRIORITY = 4  # Kafka's Priority.EPOCH_BUMP: the InitProducerId that bumps the epoch goes after EndTxn


def _priority(handler: TxnRequestHandler) -> int:
    if isinstance(handler, InitProducerIdHandler) and handler.is_epoch_bump:
        return EPOCH_BUMP_PRIORITY
    return _PRIORITY.get(type(handler).__name__, 2)


class TransactionManager:
    """Kafka's ``TransactionManager``: idempotence, and transactions when ``transactional_id`` is set.
    Thread-safe."""

    def __init__(self, log_context: str = "", transactional_id: str | None = None,
                 transaction_timeout_ms: int = 60_000, retry_backoff_ms: int = 100,
                 allow_unsupported_fallback: bool = False, time: Time = SYSTEM_TIME) -> None:
        self.log_context = log_context
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.time = time
        self.allow_unsupported_fallback = allow_unsupported_fallback
        """When idempotence was only enabled by default, a broker without InitProducerId disables it
        instead of failing every send (see ``docs/divergences.md``)."""
        self.unsupported = False
        self._lock = threading.RLock()
        self._producer_id_and_epoch = NONE
        self._state = State.UNINITIALIZED
        self._partitions: dict[TopicPartition, _PartitionEntry] = {}
        self._unresolved: dict[TopicPartition, int] = {}
        self._to_rewrite: set[TopicPartition] = set()
        self._epoch_bump_required = False
        self.coordinator_supports_bumping_epoch = False
        self._pending: deque[TxnRequestHandler] = deque()
        self.in_flight_correlation_id = NO_INFLIGHT_REQUEST_CORRELATION_ID
        self.last_error: BaseException | None = None
        # transactions
        self._coordinators: dict[tuple[str, str], Node] = {}
        self.partitions_in_transaction: set[TopicPartition] = set()
        self._new_partitions: set[TopicPartition] = set()      # sent to, not yet in an AddPartitionsToTxn
        self._pending_partitions: set[TopicPartition] = set()  # in an AddPartitionsToTxn awaiting its answer
        self.transaction_started = False  # a partition or offsets were added: EndTxn is needed
        self._init_result: TransactionalRequestResult | None = None
        self._completion_result: TransactionalRequestResult | None = None
        self._seq = 0

    # ------------------------------------------------------------------------------------ state

    def is_transactional(self) -> bool:
        return self.transactional_id is not None

    def is_completing(self) -> bool:
        return self._state in (State.COMMITTING_TRANSACTION, State.ABORTING_TRANSACTION)

    def is_aborting(self) -> bool:
        return self._state is State.ABORTING_TRANSACTION

    def has_ongoing_transaction(self) -> bool:
        return self._state in (State.IN_TRANSACTION, State.COMMITTING_TRANSACTION, State.ABORTING_TRANSACTION,
                               State.ABORTABLE_ERROR)

    @property
    def state(self) -> State:
        return self._state

    def transition_to(self, state: State, error: BaseException | None = None) -> None:
        with self._lock:
            if self._state is State.FATAL_ERROR and state is not State.FATAL_ERROR:
                return
            if self.is_transactional() and state in _VALID_SOURCES and self._state is not state \
                    and self._state not in _VALID_SOURCES[state]:
                raise IllegalStateError(f"{self.log_context}Invalid transition attempted from state "
                                        f"{self._state.name} to state {state.name}")
            if error is not None:
                self.last_error = error
            log.debug("%sTransition from state %s to %s", self.log_context, self._state.name, state.name)
            self._state = state

    def fatal_error(self, error: BaseException) -> None:
        log.error("%sTransition to fatal error state: %s", self.log_context, error)
        self.transition_to(State.FATAL_ERROR, error)
        self.fail_pending(error)

    def abortable_error(self, error: BaseException) -> None:
        """A transaction that can no longer commit: the application must abort it (Kafka's
        ``transitionToAbortableError``)."""
        with self._lock:
            if self._state in (State.FATAL_ERROR, State.ABORTING_TRANSACTION):
                if self._state is State.ABORTING_TRANSACTION:
                    self.last_error = error
                return
            log.info("%sTransiting to abortable error state due to %s", self.log_context, error)
            self.transition_to(State.ABORTABLE_ERROR, error)

    def fail_pending(self, error: BaseException) -> None:
        """Fail every queued request's result (a fatal error, or an authorization failure of a lookup)."""
        with self._lock:
            for handler in self._pending:
                handler.fail(error)
            self._pending.clear()
            for r in (self._init_result, self._completion_result):
                if r is not None and not r.is_completed():
                    r.done(error)

    def has_fatal_error(self) -> bool:
        return self._state is State.FATAL_ERROR

    def has_abortable_error(self) -> bool:
        return self._state is State.ABORTABLE_ERROR

    def has_error(self) -> bool:
        return self._state in (State.FATAL_ERROR, State.ABORTABLE_ERROR)

    def authentication_failed(self, error: BaseException) -> None:
        self.fatal_error(error)

    def producer_id_and_epoch(self) -> ProducerIdAndEpoch:
        return self._producer_id_and_epoch

    def set_producer_id_and_epoch(self, producer_id_and_epoch: ProducerIdAndEpoch) -> None:
        with self._lock:
            log.info("%sProducerId set to %d with epoch %d", self.log_context, producer_id_and_epoch.producer_id,
                     producer_id_and_epoch.epoch)
            self._producer_id_and_epoch = producer_id_and_epoch

    def has_producer_id(self) -> bool:
        return self._producer_id_and_epoch.is_valid()

    def is_send_to_partition_allowed(self, tp: TopicPartition) -> bool:
        if self.has_fatal_error():
            return False
        return not self.is_transactional() or tp in self.partitions_in_transaction

    # ------------------------------------------------------------------------------ transactions (caller)

    def _ensure_transactional(self) -> None:
        if not self.is_transactional():
            raise IllegalStateError("Transactional method invoked on a non-transactional producer.")

    def _maybe_fail_with_error(self) -> None:
        if self.has_error():
            raise KafkaError(f"Cannot execute transactional method because we are in an error state: "
                             f"{self.last_error!r}") from self.last_error

    def initialize_transactions(self) -> TransactionalRequestResult:
        """``init_transactions()``: get the producer id and epoch of the transactional id (fencing older
        producers with the same id, aborting their open transaction)."""
        with self._lock:
            self._ensure_transactional()
            if self._init_result is not None and not self._init_result.is_completed():
                return self._init_result  # a retry after a timeout waits on the same request
            if self.has_fatal_error():
                self._maybe_fail_with_error()
            if self._state is not State.UNINITIALIZED:
                raise IllegalStateError(f"Invalid transition attempted from state {self._state.name} to state "
                                        "INITIALIZING")
            self.transition_to(State.INITIALIZING)
            self._producer_id_and_epoch = NONE
            result = self._init_result = TransactionalRequestResult("InitProducerId")
            self.enqueue(InitProducerIdHandler(self, result=result))
            return result

    def begin_transaction(self) -> None:
        with self._lock:
            self._ensure_transactional()
            self._maybe_fail_with_error()
            if self._state is not State.READY:
                if self._state in (State.UNINITIALIZED, State.INITIALIZING):
                    raise IllegalStateError("Cannot begin a transaction before init_transactions() completed.")
                raise IllegalStateError(f"Cannot begin a transaction in state {self._state.name}: one is already "
                                        "in progress or completing.")
            self.transition_to(State.IN_TRANSACTION)

    def fail_if_not_ready_for_send(self) -> None:
        if self._state is State.IN_TRANSACTION:
            return  # the per-record fast path: no lock (the sender thread may hold it), nothing to raise
        with self._lock:
            if self.has_error():
                raise KafkaError(f"Cannot perform send because at least one previous transactional or idempotent "
                                 f"request has failed with errors: {self.last_error!r}") from self.last_error
            if self.is_transactional():
                if not self.has_producer_id():
                    raise IllegalStateError("Cannot perform a 'send' before completing a call to "
                                            "init_transactions() when transactions are enabled.")
                if self._state is not State.IN_TRANSACTION:
                    raise IllegalStateError(f"Cannot call send in state {self._state.name}: call "
                                            "begin_transaction() first.")

    def maybe_add_partition(self, tp: TopicPartition) -> None:
        if self._state is State.IN_TRANSACTION and (tp in self.partitions_in_transaction
                                                    or tp in self._pending_partitions or tp in self._new_partitions):
            return  # the per-record fast path: the partition is known to the transaction already
        with self._lock:
            self.fail_if_not_ready_for_send()
            if tp not in self.partitions_in_transaction and tp not in self._pending_partitions:
                self._new_partitions.add(tp)

    def send_offsets_to_transaction(self, offsets: dict[TopicPartition, Any],
                                    group_metadata: Any) -> TransactionalRequestResult:
        with self._lock:
            self._ensure_transactional()
            self._maybe_fail_with_error()
            if self._state is not State.IN_TRANSACTION:
                raise IllegalStateError(f"Cannot send offsets if a transaction is not in progress (currentState= "
                                        f"{self._state.name})")
            if group_metadata is None or not getattr(group_metadata, "group_id", None):
                raise IllegalStateError("send_offsets_to_transaction needs the consumer's group_metadata() (a "
                                        "consumer with a group.id)")
            result = TransactionalRequestResult("AddOffsetsToTxn")
            self.enqueue(AddOffsetsToTxnHandler(self, dict(offsets), group_metadata, result))
            return result

    def _pending_completion(self, target: State) -> TransactionalRequestResult | None:
        """Kafka's ``handleCachedTransactionRequestResult``: a commit or abort called again after its timeout
        waits on the same requests (also while the abort's epoch bump is under way) instead of failing."""
        r = self._completion_result
        if r is None or r.is_completed():
            return None
        if self._state is target or (self._state is State.INITIALIZING and target is State.ABORTING_TRANSACTION):
            return r  # (only an abort goes on into an epoch bump: a commit call must not wait on that)
        return None

    def begin_commit(self) -> TransactionalRequestResult:
        with self._lock:
            self._ensure_transactional()
            pending = self._pending_completion(State.COMMITTING_TRANSACTION)
            if pending is not None:
                return pending
            self._maybe_fail_with_error()
            if self._state is not State.IN_TRANSACTION:
                raise IllegalStateError(f"Cannot commit: no transaction in progress (state {self._state.name}); "
                                        "call begin_transaction() first.")
            self.transition_to(State.COMMITTING_TRANSACTION)
            return self._begin_completing(True)

    def begin_abort(self) -> TransactionalRequestResult:
        with self._lock:
            self._ensure_transactional()
            pending = self._pending_completion(State.ABORTING_TRANSACTION)
            if pending is not None:
                return pending
            if self.has_fatal_error():
                self._maybe_fail_with_error()
            if self._state not in (State.IN_TRANSACTION, State.ABORTABLE_ERROR):
                raise IllegalStateError(f"Cannot abort: no transaction in progress (state {self._state.name}).")
            self.transition_to(State.ABORTING_TRANSACTION)
            self._new_partitions.clear()  # nothing more will be sent in this transaction
            return self._begin_completing(False)

    def _begin_completing(self, commit: bool) -> TransactionalRequestResult:
        """EndTxn, then -- after an error that calls for it (KIP-360) -- InitProducerId with the current id and
        epoch, which bumps the epoch: the producer goes on with new transactions instead of being unusable. The
        result is the last request's."""
        operation = "EndTxn(%s)" % ("commit" if commit else "abort")
        bump = self._epoch_bump_required
        result = self._completion_result = TransactionalRequestResult("InitProducerId" if bump else operation)
        # Always through the queue, never completed here: the Sender first fails the batches of an abort that
        # were not sent (Kafka's abortUndrainedBatches, while the state is ABORTING_TRANSACTION), and an EndTxn
        # waits for every incomplete batch. ``next_request`` completes it without a request when nothing reached
        # the coordinator. (Completing at once left an abort's unsent batch open in the accumulator: the next
        # transaction's records were appended to it and committed with it.)
        lost_id = bump and isinstance(self.last_error, error_class(ErrorCode.INVALID_PRODUCER_ID_MAPPING))
        # (a lost id: the coordinator would refuse EndTxn; the transaction ends locally, then InitProducerId)
        self.enqueue(EndTxnHandler(self, commit, TransactionalRequestResult(operation) if bump else result,
                                   local_only=lost_id))
        if bump:
            log.info("%sInvoking InitProducerId with current producer ID and epoch %s in order to bump the epoch",
                     self.log_context, self._producer_id_and_epoch)
            self.enqueue(InitProducerIdHandler(self, is_epoch_bump=True, result=result))
        return result

    # ------------------------------------------------------------------------------ transactions (sender)

    def partitions_added(self, partitions: set[TopicPartition]) -> None:
        with self._lock:
            self._pending_partitions -= partitions
            self.partitions_in_transaction |= partitions
            self.transaction_started = True

    def partitions_failed(self, partitions: set[TopicPartition]) -> None:
        with self._lock:
            self._pending_partitions -= partitions

    def complete_transaction(self) -> None:
        with self._lock:
            # With an epoch bump to come, nothing new starts until it is done (Kafka's completeTransaction).
            self.transition_to(State.INITIALIZING if self._epoch_bump_required else State.READY)
            self._epoch_bump_required = False
            self.last_error = None
            self.partitions_in_transaction.clear()
            self._new_partitions.clear()
            self._pending_partitions.clear()
            self.transaction_started = False

    def coordinator(self, coordinator_type: str, key: str | None) -> Node | None:
        return self._coordinators.get((coordinator_type, key or ""))

    def set_coordinator(self, coordinator_type: str, key: str, node: Node) -> None:
        with self._lock:
            log.info("%sDiscovered %s coordinator %s", self.log_context, coordinator_type, node)
            self._coordinators[(coordinator_type, key)] = node

    def forget_coordinator(self, coordinator_type: str | None, key: str | None) -> None:
        if coordinator_type is not None:
            self._coordinators.pop((coordinator_type, key or ""), None)

    def lookup_coordinator(self, handler: TxnRequestHandler) -> None:
        """``handler`` needs a coordinator not known yet: FindCoordinator first, then ``handler``."""
        with self._lock:
            assert handler.coordinator_type is not None
            key = handler.coordinator_key or ""
            if not any(isinstance(h, FindCoordinatorHandler) and h.key == key and h.target_type ==
                       handler.coordinator_type for h in self._pending):
                self.enqueue(FindCoordinatorHandler(self, handler.coordinator_type, key))
            self.enqueue(handler)

    def enqueue(self, handler: TxnRequestHandler) -> None:
        """Queue by Kafka's priorities (FindCoordinator, InitProducerId, Add*, EndTxn), FIFO within one."""
        with self._lock:
            prio = _priority(handler)
            i = len(self._pending)
            while i > 0 and _priority(self._pending[i - 1]) > prio:
                i -= 1
            self._pending.insert(i, handler)

    def replace_retry(self, old: TxnRequestHandler, new: TxnRequestHandler) -> None:
        new.is_retry = True
        new.retry_after_ms = self.time.milliseconds() + self.retry_backoff_ms
        with self._lock:
            try:
                self._pending.remove(old)
            except ValueError:
                pass
            self.enqueue(new)

    # ------------------------------------------------------------------------------ requests

    def bump_idempotent_epoch_and_reset_id_if_needed(self) -> None:
        """Bump the epoch if a partition needs it; ask for a producer id if there is none."""
        with self._lock:
            if self.is_transactional() or self.unsupported:
                return
            if self._epoch_bump_required:
                self._bump_idempotent_producer_epoch()
            if self._state is not State.INITIALIZING and not self.has_producer_id():
                self.transition_to(State.INITIALIZING)
                self.enqueue(InitProducerIdHandler(self))

    def _bump_idempotent_producer_epoch(self) -> None:
        pid = self._producer_id_and_epoch
        if pid.epoch == SHORT_MAX:
            self.reset_idempotent_producer_id()
        else:
            self._producer_id_and_epoch = ProducerIdAndEpoch(pid.producer_id, pid.epoch + 1)
            log.debug("%sIncremented producer epoch to %s", self.log_context, self._producer_id_and_epoch)
        for tp in self._to_rewrite:
            self._entry(tp).reset_sequence_numbers(self._producer_id_and_epoch)
            self._unresolved.pop(tp, None)
        self._to_rewrite.clear()
        self._epoch_bump_required = False

    def reset_idempotent_producer_id(self) -> None:
        with self._lock:
            log.debug("%sResetting idempotent producer ID. ID and epoch before reset are %s", self.log_context,
                      self._producer_id_and_epoch)
            self._producer_id_and_epoch = NONE
            self.transition_to(State.UNINITIALIZED)

    def reset_sequence_numbers(self) -> None:
        with self._lock:
            self._partitions.clear()

    def next_request(self, has_incomplete_batches: bool) -> TxnRequestHandler | None:
        with self._lock:
            if self._new_partitions and self.is_transactional() and self._state in (
                    State.IN_TRANSACTION, State.COMMITTING_TRANSACTION):
                parts = set(self._new_partitions)
                self._new_partitions.clear()
                self._pending_partitions |= parts
                self.enqueue(AddPartitionsToTxnHandler(self, parts))
            if not self._pending:
                return None
            head = self._pending[0]
            if head.is_end_txn and has_incomplete_batches:
                return None  # EndTxn only once every batch of the transaction is acknowledged
            handler = self._pending.popleft()
            if self.is_transactional() and self.has_error() and not (
                    self.has_abortable_error() and isinstance(handler, FindCoordinatorHandler)):
                # Kafka's maybeTerminateRequestWithError: nothing is sent in an error state (above all no
                # EndTxn(commit) of a transaction that lost a partition or a batch); the request's result fails
                # with the error, which commit_transaction() then raises, and the application aborts.
                log.debug("%sNot sending %s: in state %s", self.log_context, type(handler.request).__name__,
                          self._state.name)
                handler.fail(self.last_error or KafkaError(f"transactional state {self._state.name}"))
                return None
            if isinstance(handler, EndTxnHandler) and (handler.local_only or not self.transaction_started):
                # Kafka's "Not sending EndTxn for completed transaction since no partitions or offsets were
                # successfully added" (decided now, once AddPartitionsToTxn and the batches are done).
                log.debug("%sNot sending EndTxn: no partitions or offsets were added", self.log_context)
                handler.complete_locally()
                return None
            return handler

    def retry(self, handler: TxnRequestHandler) -> None:
        with self._lock:
            self._pending.appendleft(handler)

    def reenqueue(self, handler: TxnRequestHandler) -> None:
        with self._lock:
            handler.is_retry = True
            handler.retry_after_ms = self.time.milliseconds() + self.retry_backoff_ms
            self.enqueue(handler)

    def version_unsupported(self, handler: TxnRequestHandler, error: BaseException) -> None:
        if self.allow_unsupported_fallback and isinstance(handler, InitProducerIdHandler):
            log.warning("%sThe broker does not support InitProducerId; idempotence is disabled (it was only "
                        "enabled by default)", self.log_context)
            self.unsupported = True
            return
        self.fatal_error(error if isinstance(error, UnsupportedVersionError) else UnsupportedVersionError(str(error)))

    def has_in_flight_request(self) -> bool:
        return self.in_flight_correlation_id != NO_INFLIGHT_REQUEST_CORRELATION_ID

    def set_in_flight_correlation_id(self, correlation_id: int) -> None:
        self.in_flight_correlation_id = correlation_id

    def clear_in_flight_correlation_id(self) -> None:
        self.in_flight_correlation_id = NO_INFLIGHT_REQUEST_CORRELATION_ID

    def has_pending_requests(self) -> bool:
        return bool(self._pending) or self.has_in_flight_request()

    def close(self) -> None:
        with self._lock:
            self.fail_pending(KafkaError("The producer was closed before the transactional request completed"))

    # ------------------------------------------------------------------------------ sequences

    def _entry(self, tp: TopicPartition) -> _PartitionEntry:
        entry = self._partitions.get(tp)
        if entry is None:
            entry = self._partitions[tp] = _PartitionEntry(self._producer_id_and_epoch)
        return entry

    def sequence_number(self, tp: TopicPartition) -> int:
        with self._lock:
            return self._entry(tp).next_sequence

    def increment_sequence_number(self, tp: TopicPartition, increment: int) -> None:
        with self._lock:
            entry = self._entry(tp)
            entry.next_sequence = increment_sequence(entry.next_sequence, increment)

    def add_in_flight_batch(self, batch: ProducerBatch) -> None:
        if not batch.has_sequence():
            raise IllegalStateError("Can't track batch for partition " f"{batch.topic_partition} when sequence "
                                    "is not set.")
        with self._lock:
            self._entry(batch.topic_partition).add(batch)

    def remove_in_flight_batch(self, batch: ProducerBatch) -> None:
        with self._lock:
            entry = self._partitions.get(batch.topic_partition)
            if entry is not None:
                entry.remove(batch)

    def has_inflight_batches(self, tp: TopicPartition) -> bool:
        entry = self._partitions.get(tp)
        return entry is not None and bool(entry.in_flight)

    def has_request_outstanding_elsewhere(self, tp: TopicPartition, node_id: int) -> bool:
        """Whether a request carrying one of ``tp``'s batches is still outstanding at a node other than
        ``node_id`` (the partition's old leader, after a leadership change). Nothing of ``tp`` goes to the new
        leader until it settles, as librdkafka drains a partition before moving it: the new leader may
        already have those batches (replicated before the change) and, once more than the five batches a broker
        remembers per producer were written after them, could only answer their retry with
        OUT_OF_ORDER_SEQUENCE_NUMBER -- a batch below the last acknowledged sequence, retried until
        ``delivery.timeout.ms`` (Java's producer has the same hole)."""
        entry = self._partitions.get(tp)
        if entry is None:
            return False
        for batch in entry.in_flight:
            if batch.in_flight and batch.sent_to != node_id:
                return True
        return False

    def first_in_flight_sequence(self, tp: TopicPartition) -> int:
        with self._lock:
            entry = self._partitions.get(tp)
            if entry is None or not entry.in_flight:
                return NO_SEQUENCE
            return entry.in_flight[0].base_sequence

    def next_batch_by_sequence(self, tp: TopicPartition) -> ProducerBatch | None:
        with self._lock:
            entry = self._partitions.get(tp)
            return entry.in_flight[0] if entry is not None and entry.in_flight else None

    def last_acked_sequence(self, tp: TopicPartition) -> int:
        entry = self._partitions.get(tp)
        return NO_LAST_ACKED_SEQUENCE_NUMBER if entry is None else entry.last_acked_sequence

    def last_acked_offset(self, tp: TopicPartition) -> int:
        entry = self._partitions.get(tp)
        return -1 if entry is None else entry.last_acked_offset

    def has_stale_producer_id_and_epoch(self, tp: TopicPartition) -> bool:
        with self._lock:
            return self._producer_id_and_epoch != self._entry(tp).producer_id_and_epoch

    def maybe_update_producer_id_and_epoch(self, tp: TopicPartition) -> None:
        """A partition whose batches all completed under an older id/epoch restarts at sequence 0."""
        with self._lock:
            if self.has_stale_producer_id_and_epoch(tp) and not self.has_inflight_batches(tp):
                self._entry(tp).reset_sequence_numbers(self._producer_id_and_epoch)
                log.debug("%sProducerId of partition %s set to %s. Reinitialize sequence at beginning.",
                          self.log_context, tp, self._producer_id_and_epoch)

    def has_unresolved_sequence(self, tp: TopicPartition) -> bool:
        return tp in self._unresolved

    def has_unresolved_sequences(self) -> bool:
        return bool(self._unresolved)

    def mark_sequence_unresolved(self, batch: ProducerBatch) -> None:
        with self._lock:
            next_sequence = batch.last_sequence() + 1
            tp = batch.topic_partition
            self._unresolved[tp] = max(self._unresolved.get(tp, next_sequence), next_sequence)
            log.debug("%sMarking partition %s unresolved with next sequence number %d", self.log_context, tp,
                      self._unresolved[tp])

    def _is_next_sequence(self, tp: TopicPartition, sequence: int) -> bool:
        return sequence - self.last_acked_sequence(tp) == 1

    def _is_next_sequence_for_unresolved_partition(self, tp: TopicPartition, sequence: int) -> bool:
        return tp in self._unresolved and sequence == self._unresolved[tp]

    def can_bump_epoch(self) -> bool:
        """Kafka's ``canBumpEpoch``: always for the idempotent producer; for a transactional one when its
        coordinator takes InitProducerId v3+ (KIP-360)."""
        return not self.is_transactional() or self.coordinator_supports_bumping_epoch

    def require_epoch_bump(self) -> None:
        """The transaction must be aborted, and the epoch bumped after it (KIP-360)."""
        with self._lock:
            self._epoch_bump_required = True

    def request_epoch_bump_for_partition(self, tp: TopicPartition) -> None:
        with self._lock:
            self._epoch_bump_required = True
            self._to_rewrite.add(tp)

    def maybe_resolve_sequences(self) -> None:
        """Partitions with an unknown outcome whose in-flight batches have all settled: fine if the next
        sequence follows the last acknowledged one, else bump the epoch."""
        with self._lock:
            for tp in list(self._unresolved):
                if self.has_inflight_batches(tp):
                    continue
                if not self._is_next_sequence(tp, self.sequence_number(tp)):
                    if self.is_transactional():
                        unacked = ("The client hasn't received acknowledgment for some previously sent messages "
                                   "and can no longer retry them. ")
                        if self.can_bump_epoch():
                            self._epoch_bump_required = True
                            self.abortable_error(KafkaError(unacked + "It is safe to abort the transaction and "
                                                            "continue."))
                        else:
                            self.fatal_error(KafkaError(unacked + "It isn't safe to continue."))
                    else:
                        log.info("%sNo inflight batches remaining for %s, last ack'd sequence for partition is %d, "
                                 "next sequence is %d. Going to bump epoch and reset sequence numbers.",
                                 self.log_context, tp, self.last_acked_sequence(tp), self.sequence_number(tp))
                        self.request_epoch_bump_for_partition(tp)
                del self._unresolved[tp]

    # ------------------------------------------------------------------------------ batch results

    def handle_completed_batch(self, batch: ProducerBatch, base_offset: int) -> None:
        with self._lock:
            entry = self._entry(batch.topic_partition)
            last = batch.last_sequence()
            if last > entry.last_acked_sequence:
                entry.last_acked_sequence = last
            if base_offset >= 0:
                entry.last_acked_offset = max(entry.last_acked_offset, base_offset + batch.record_count - 1)
            log.debug("%sProducerId: %d; Set last ack'd sequence number for topic-partition %s to %d",
                      self.log_context, batch.producer_id, batch.topic_partition, entry.last_acked_sequence)
            entry.remove(batch)

    def handle_failed_batch(self, batch: ProducerBatch, exception: BaseException, adjust_sequence_numbers: bool) -> None:
        with self._lock:
            if isinstance(exception, ClusterAuthorizationFailedError | TransactionalIdAuthorizationFailedError
                          | ProducerFencedError | UnsupportedVersionError):
                self.fatal_error(exception)
            elif self.is_transactional() and isinstance(exception, InvalidProducerEpochError):
                # A newer incarnation (or the coordinator's timeout abort) bumped the epoch: fenced.
                self.fatal_error(ProducerFencedError(f"Producer epoch is stale ({exception}); a newer producer "
                                                     "with the same transactionalId fenced this one."))
            elif self.is_transactional() and not isinstance(exception, TransactionAbortedError):
                if self.can_bump_epoch() and not self.is_completing():
                    self._epoch_bump_required = True  # KIP-360: the abort bumps the epoch, sequences restart
                self.abortable_error(exception)
            self.remove_in_flight_batch(batch)
            if self.has_fatal_error():
                return
            if isinstance(exception, UnknownProducerIdError):
                self._partitions.pop(batch.topic_partition, None)  # the broker will accept sequence 0 again
            elif self.is_transactional():
                return  # the abort's epoch bump restarts every partition's sequences (KIP-360)
            elif isinstance(exception, OutOfOrderSequenceNumberError):
                log.error("%sThe broker returned %s for topic-partition %s with producerId %d, epoch %d, and "
                          "sequence number %d", self.log_context, type(exception).__name__, batch.topic_partition,
                          batch.producer_id, batch.producer_epoch, batch.base_sequence)
                self.request_epoch_bump_for_partition(batch.topic_partition)  # a gap: restart at sequence 0
            elif adjust_sequence_numbers:
                self.request_epoch_bump_for_partition(batch.topic_partition)

    def can_retry(self, error_code: int, log_start_offset: int, batch: ProducerBatch) -> bool:
        """Kafka's ``canRetry`` for idempotent batches (the Sender checks attempts and the delivery timeout)."""
        with self._lock:
            tp = batch.topic_partition
            if error_code == ErrorCode.UNKNOWN_PRODUCER_ID:
                if log_start_offset == -1:
                    return True  # the broker did not know the log start offset yet: just retry
                if batch.reopened:
                    return True  # sequences were already restarted for this one
                if self.last_acked_offset(tp) < log_start_offset:
                    # The log head was deleted (retention) and the producer's state with it: a transactional
                    # producer restarts the partition's sequences under the same epoch (the transaction goes
                    # on), an idempotent one bumps its epoch.
                    if self.is_transactional():
                        self._entry(tp).reset_sequence_numbers(self._producer_id_and_epoch)
                    else:
                        self.request_epoch_bump_for_partition(tp)
                    return True
                if not self.is_transactional():
                    self.request_epoch_bump_for_partition(tp)
                    return True
                # transactional: the batch fails, the transaction is aborted and the epoch bumped (KIP-360)
            elif error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER:
                if not self.has_unresolved_sequence(tp) and (
                        batch.reopened or not self._is_next_sequence(tp, batch.base_sequence)):
                    return True  # not the next batch: an earlier one failed, this one will be retried after
                if not self.is_transactional():
                    if (not self.has_unresolved_sequence(tp)
                            or self._is_next_sequence_for_unresolved_partition(tp, batch.base_sequence)):
                        self.request_epoch_bump_for_partition(tp)  # a real gap
                    return True
                # transactional: a real gap fails the batch (abort, then the epoch bump)
            return error_class(error_code).retriable
