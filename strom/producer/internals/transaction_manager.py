"""Idempotent-producer state: producer id and epoch, per-partition sequence numbers, in-flight ordering.

Kafka counterpart: ``org.apache.kafka.clients.producer.internals.TransactionManager`` (3.x), the idempotent
part (transactions proper are not implemented yet: ``transactional.id`` is rejected by the producer).

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
    OutOfOrderSequenceNumberError,
    ProducerFencedError,
    TransactionalIdAuthorizationFailedError,
    UnknownProducerIdError,
    UnsupportedVersionError,
)
from strom.common.errors import IllegalStateError, KafkaError, error_class
from strom.common.structs import TopicPartition
from strom.common.time import SYSTEM_TIME, Time
from strom.producer.internals.producer_batch import NO_SEQUENCE, ProducerBatch
from strom.producer.internals.producer_id_and_epoch import NONE, ProducerIdAndEpoch
from strom.protocol.messages import InitProducerIdRequest

__all__ = ["TransactionManager", "State", "TxnRequestHandler", "increment_sequence"]

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
    FATAL_ERROR = "FATAL_ERROR"


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


class TxnRequestHandler:
    """A request the TransactionManager wants sent (Kafka's ``TxnRequestHandler``); ``on_complete`` is its
    ``RequestCompletionHandler``."""

    coordinator_type: str | None = None

    def __init__(self, manager: TransactionManager, request: Any) -> None:
        self.manager = manager
        self.request = request
        self.is_retry = False
        self.retry_after_ms = 0

    def on_complete(self, response: Any) -> None:
        manager = self.manager
        if response.request_header.correlation_id != manager.in_flight_correlation_id:
            manager.fatal_error(KafkaError("Detected more than one in-flight transactional request."))
            return
        manager.clear_in_flight_correlation_id()
        if response.disconnected:
            log.debug("%sDisconnected from %s. Will retry.", manager.log_context, response.destination)
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
    """InitProducerId for the idempotent producer (no transactional id)."""

    def __init__(self, manager: TransactionManager, is_epoch_bump: bool = False) -> None:
        super().__init__(manager, InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=INT_MAX,
                                                        producer_id=-1, producer_epoch=-1))
        self.is_epoch_bump = is_epoch_bump

    def handle_response(self, body: Any) -> None:
        manager = self.manager
        code = body.error_code
        if code == ErrorCode.NONE:
            manager.set_producer_id_and_epoch(ProducerIdAndEpoch(body.producer_id, body.producer_epoch))
            manager.transition_to(State.READY)
            manager.last_error = None
            if self.is_epoch_bump:
                manager.reset_sequence_numbers()
        elif code in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE) or error_class(code).retriable:
            manager.reenqueue(self)
        elif code in (ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, ErrorCode.CLUSTER_AUTHORIZATION_FAILED):
            manager.fatal_error(error_class(code)())
        elif code in (ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.PRODUCER_FENCED):
            manager.fatal_error(ProducerFencedError())
        else:
            manager.fatal_error(KafkaError(f"Unexpected error in InitProducerIdResponse; "
                                           f"{error_class(code).description}"))


class TransactionManager:
    """Kafka's ``TransactionManager`` for an idempotent (non-transactional) producer. Thread-safe."""

    def __init__(self, log_context: str = "", transactional_id: str | None = None,
                 transaction_timeout_ms: int = 60_000, retry_backoff_ms: int = 100,
                 allow_unsupported_fallback: bool = False, time: Time = SYSTEM_TIME) -> None:
        if transactional_id is not None:
            raise KafkaError("Transactions are not supported yet (transactional.id is set)")
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
        self._pending: deque[TxnRequestHandler] = deque()
        self.in_flight_correlation_id = NO_INFLIGHT_REQUEST_CORRELATION_ID
        self.last_error: BaseException | None = None

    # ------------------------------------------------------------------------------------ state

    def is_transactional(self) -> bool:
        return self.transactional_id is not None

    def is_completing(self) -> bool:
        return False

    def has_ongoing_transaction(self) -> bool:
        return False

    @property
    def state(self) -> State:
        return self._state

    def transition_to(self, state: State, error: BaseException | None = None) -> None:
        with self._lock:
            if self._state is State.FATAL_ERROR and state is not State.FATAL_ERROR:
                return
            if error is not None:
                self.last_error = error
            log.debug("%sTransition from state %s to %s", self.log_context, self._state.name, state.name)
            self._state = state

    def fatal_error(self, error: BaseException) -> None:
        log.error("%sTransition to fatal error state: %s", self.log_context, error)
        self.transition_to(State.FATAL_ERROR, error)
        self._pending.clear()

    def has_fatal_error(self) -> bool:
        return self._state is State.FATAL_ERROR

    def has_abortable_error(self) -> bool:
        return False

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
        return not self.has_fatal_error()

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
                self._pending.append(InitProducerIdHandler(self))

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
            return self._pending.popleft() if self._pending else None

    def retry(self, handler: TxnRequestHandler) -> None:
        with self._lock:
            self._pending.appendleft(handler)

    def reenqueue(self, handler: TxnRequestHandler) -> None:
        with self._lock:
            handler.is_retry = True
            handler.retry_after_ms = self.time.milliseconds() + self.retry_backoff_ms
            self._pending.append(handler)

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
            self._pending.clear()

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
            self.remove_in_flight_batch(batch)
            if self.has_fatal_error():
                return
            if isinstance(exception, OutOfOrderSequenceNumberError):
                log.error("%sThe broker returned %s for topic-partition %s with producerId %d, epoch %d, and "
                          "sequence number %d", self.log_context, type(exception).__name__, batch.topic_partition,
                          batch.producer_id, batch.producer_epoch, batch.base_sequence)
                self.request_epoch_bump_for_partition(batch.topic_partition)  # a gap: restart at sequence 0
            elif isinstance(exception, UnknownProducerIdError):
                self._partitions.pop(batch.topic_partition, None)  # the broker will accept sequence 0 again
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
                    self.request_epoch_bump_for_partition(tp)  # the log head was deleted (retention)
                    return True
                self.request_epoch_bump_for_partition(tp)
                return True
            if error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER:
                if not self.has_unresolved_sequence(tp) and (
                        batch.reopened or not self._is_next_sequence(tp, batch.base_sequence)):
                    return True  # not the next batch: an earlier one failed, this one will be retried after
                if (not self.has_unresolved_sequence(tp)
                        or self._is_next_sequence_for_unresolved_partition(tp, batch.base_sequence)):
                    self.request_epoch_bump_for_partition(tp)  # a real gap
                return True
            return error_class(error_code).retriable
