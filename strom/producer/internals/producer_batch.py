"""A batch of records for one partition, being filled, sent and completed.

Kafka counterpart: ``org.apache.kafka.clients.producer.internals.ProducerBatch`` (+ ``CompressionRatioEstimator``).

Life cycle: created by the accumulator around a :class:`~strom.record.records.MemoryRecordsBuilder` that
writes into the ``bytearray`` claimed from the ``BufferPool`` (kept in :attr:`ProducerBatch.buffer` and returned
on deallocation; ``records()`` is then a ``memoryview`` of it, so it must not be read after the batch is
deallocated) → records appended by caller threads under the partition deque's lock
(``try_append``) → drained by the Sender (``close`` builds the bytes; producer id/sequence set before) →
completed exactly once with ``complete`` / ``complete_exceptionally`` / ``abort`` (``done``), which fires every
record's callback in append order and then releases the batch latch the record futures wait on.

Thread-safety: appends happen under the deque lock held by the accumulator; everything after draining is
"Sender thread only". ``done`` / ``abort`` are safe to race (the final state is set atomically).
"""

from __future__ import annotations

import enum
import logging
import threading
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from itertools import repeat
from typing import Any

from strom.common.error_codes import RecordListTooLargeError
from strom.common.errors import IllegalStateError
from strom.common.structs import TopicPartition
from strom.producer.internals.future_record_metadata import (
    FutureRecordMetadata,
    ProduceRequestResult,
    RecordErrorFn,
)
from strom.producer.record import NO_TIMESTAMP, RecordMetadata
from strom.record.records import CompressionType, MemoryRecordsBuilder, RecordBatch, upper_bound_size

__all__ = [
    "ProducerBatch",
    "FinalState",
    "CompressionRatioEstimator",
    "COMPRESSION_RATIO_ESTIMATOR",
    "NO_SEQUENCE",
    "NO_PRODUCER_ID",
    "NO_PRODUCER_EPOCH",
    "Callback",
]

log = logging.getLogger(__name__)

NO_SEQUENCE = -1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1

Callback = Callable[[RecordMetadata | None, BaseException | None], None]
_NO_THUNK = (None, None)  # a record of a bulk send without a future of its own


class FinalState(enum.Enum):
    """Kafka's ``ProducerBatch.FinalState``."""

    ABORTED = "ABORTED"
    FAILED = "FAILED"
    SUCCEEDED = "SUCCEEDED"


class CompressionRatioEstimator:
    """Per topic and codec, how well batches compress (Kafka's ``CompressionRatioEstimator``). Thread-safe.

    New batches of a topic estimate their compressed size with this ratio (1.0 at first), so compressed
    batches fill up to about ``batch.size`` *after* compression. A worse observed ratio moves the estimate up
    at once (by at least 0.05), a better one moves it down slowly (0.005 per batch).
    """

    DETERIORATE_STEP = 0.05
    IMPROVING_STEP = 0.005

    def __init__(self) -> None:
        self._ratios: dict[tuple[str, int], float] = {}
        self._lock = threading.Lock()

    def estimation(self, topic: str, compression_type: CompressionType) -> float:
        return self._ratios.get((topic, int(compression_type)), 1.0)

    def update_estimation(self, topic: str, compression_type: CompressionType, observed: float) -> float:
        key = (topic, int(compression_type))
        with self._lock:
            current = self._ratios.get(key, 1.0)
            if observed > current:
                current = max(current + self.DETERIORATE_STEP, observed)
            elif observed < current:
                current = max(current - self.IMPROVING_STEP, observed)
            self._ratios[key] = current
            return current

    def set_estimation(self, topic: str, compression_type: CompressionType, ratio: float) -> None:
        with self._lock:
            self._ratios[(topic, int(compression_type))] = ratio


COMPRESSION_RATIO_ESTIMATOR = CompressionRatioEstimator()
"""The process-wide estimator (Kafka's is static too)."""


class ProducerBatch:
    """Records for one partition (Kafka's ``ProducerBatch``).

    ``try_append`` is called under the partition deque's lock; ``close``/``done``/``reenqueued``/``drained``
    and the producer-state setters are Sender-thread only.
    """

    __slots__ = (
        "topic_partition", "records_builder", "created_ms", "last_attempt_ms", "last_append_time", "drained_ms",
        "produce_future", "thunks", "record_count", "attempts", "retry", "reopened", "is_splitting_batch",
        "buffer", "initial_capacity", "_final_state", "_state_lock", "_closed_for_appends", "_records",
        "compression_ratio_estimator", "in_flight", "sent_to", "deallocate_pending", "__weakref__",
    )

    def __init__(
        self,
        tp: TopicPartition,
        records_builder: MemoryRecordsBuilder,
        created_ms: int,
        is_splitting_batch: bool = False,
        *,
        buffer: bytearray | None = None,
        compression_ratio_estimator: CompressionRatioEstimator | None = COMPRESSION_RATIO_ESTIMATOR,
    ) -> None:
        self.topic_partition = tp
        self.records_builder = records_builder
        self.created_ms = created_ms
        self.last_attempt_ms = created_ms
        self.last_append_time = created_ms
        self.drained_ms = 0
        self.produce_future = ProduceRequestResult(tp)
        self.thunks: list[tuple[Callback | None, FutureRecordMetadata | None]] = []
        self.record_count = 0
        self.attempts = 0
        self.retry = False
        self.reopened = False
        self.is_splitting_batch = is_splitting_batch
        self.buffer = buffer
        """The memory claimed from the BufferPool, the builder's write buffer (``None`` for ``split`` batches)."""
        self.in_flight = False
        """A request carrying ``records()`` is outstanding (Sender): the buffer must not be reused yet."""
        self.sent_to = -1
        """The node the last request carrying the batch went to (Sender); outstanding while ``in_flight``."""
        self.deallocate_pending = False
        """Deallocated while in flight: the buffer goes back when that request completes."""
        self.initial_capacity = len(buffer) if buffer is not None else (records_builder.write_limit or 0)
        self.compression_ratio_estimator = compression_ratio_estimator
        self._final_state: FinalState | None = None
        self._state_lock = threading.Lock()
        self._closed_for_appends = False
        self._records: bytes | memoryview | None = None

    # ------------------------------------------------------------------------------------------ append

    def try_append(self, timestamp: int, key: bytes | None, value: bytes | None, headers: Sequence[Any],
                   callback: Callback | None, now: int) -> FutureRecordMetadata | None:
        """Append a record if it fits; its future, or ``None`` when the batch is full / closed.

        Caller holds the partition deque's lock.
        """
        if self._closed_for_appends:
            return None
        index = self.records_builder.try_append(timestamp, key, value, headers)
        if index < 0:
            return None
        self.last_append_time = now
        future = FutureRecordMetadata(self.produce_future, index, timestamp,
                                      -1 if key is None else len(key), -1 if value is None else len(value))
        # A thunk per record (the batch may be split and its records re-batched); the future itself only with a
        # callback (which gets its metadata): a future the caller drops should die now, not when the batch
        # completes (after a split it finds its record through the batch result's ``split_to``).
        self.thunks.append(_NO_THUNK if callback is None else (callback, future))
        self.record_count = index + 1
        return future

    def try_append_many(self, timestamp: int, keys: Sequence[bytes | None] | None, values: Sequence[bytes | None],
                        start: int, stop: int, callback: Callback | None,
                        now: int) -> tuple[int, FutureRecordMetadata | None]:
        """Append records ``start..stop-1`` (bulk send), as many as fit: ``(count, future)`` where the one
        future (and ``callback``) stands for the last record appended; ``(0, None)`` when none fits.

        The other records get no future of their own (their thunk is ``(None, None)``): a batch succeeds or
        fails as a whole, so the last record's outcome is the segment's. Caller holds the deque's lock.
        """
        if self._closed_for_appends:
            return 0, None
        builder = self.records_builder
        first = builder.num_records
        count = builder.try_append_many(timestamp, keys, values, start, stop)
        if count <= 0:
            return 0, None
        self.last_append_time = now
        index = first + count - 1
        key = keys[start + count - 1] if keys is not None else None
        value = values[start + count - 1]
        future = FutureRecordMetadata(self.produce_future, index, timestamp,
                                      -1 if key is None else len(key), -1 if value is None else len(value))
        thunks = self.thunks
        if count > 1:
            thunks.extend(repeat(_NO_THUNK, count - 1))
        thunks.append((callback, future))
        self.record_count = index + 1
        return count, future

    def _try_append_for_split(self, timestamp: int, key: bytes | None, value: bytes | None,
                              headers: Sequence[Any], thunk: tuple[Callback | None, FutureRecordMetadata | None]
                              ) -> int:
        """Append a record of a batch being split: its index here, or -1 when it does not fit."""
        index = self.records_builder.try_append(timestamp, key, value, headers)
        if index < 0:
            return -1
        self.thunks.append(thunk)
        self.record_count = index + 1
        return index

    # --------------------------------------------------------------------------------------- completion

    @property
    def final_state(self) -> FinalState | None:
        return self._final_state

    def is_done(self) -> bool:
        return self._final_state is not None

    def abort(self, exception: BaseException) -> None:
        """Fail every record with ``exception`` (forced close / abort). Raises :class:`IllegalStateError`
        if the batch was already completed."""
        with self._state_lock:
            if self._final_state is not None:
                raise IllegalStateError(f"Batch has already been completed in final state {self._final_state.name}")
            self._final_state = FinalState.ABORTED
        log.debug("Aborting batch for partition %s", self.topic_partition, exc_info=exception)
        self._complete_future_and_fire_callbacks(-1, NO_TIMESTAMP, lambda _i: exception)

    def complete(self, base_offset: int, log_append_time: int) -> bool:
        """Success: record ``i`` gets offset ``base_offset + i``."""
        return self.done(base_offset, log_append_time, None)

    def complete_exceptionally(
        self,
        top_level_exception: BaseException,
        record_exceptions: Callable[[int], BaseException | None] | Mapping[int, BaseException] | None = None,
    ) -> bool:
        """Failure: every record fails with ``top_level_exception`` unless ``record_exceptions`` (a function
        or a mapping index → error; unmapped indexes get the top-level error) says otherwise."""
        return self.done(-1, NO_TIMESTAMP, top_level_exception, record_exceptions)

    def done(
        self,
        base_offset: int,
        log_append_time: int,
        exception: BaseException | None,
        record_exceptions: Callable[[int], BaseException | None] | Mapping[int, BaseException] | None = None,
    ) -> bool:
        """Complete the batch once; ``True`` if this call did it.

        A second call is ignored (and logged) after a failure, and raises :class:`IllegalStateError` after a
        success — Kafka's rule: a SUCCEEDED batch must not change state again.
        """
        attempted = FinalState.SUCCEEDED if exception is None else FinalState.FAILED
        with self._state_lock:
            current = self._final_state
            if current is None:
                self._final_state = attempted
        if current is None:
            error_fn: RecordErrorFn | None = None
            if exception is not None:
                error_fn = _error_fn(exception, record_exceptions)
            self._complete_future_and_fire_callbacks(base_offset, log_append_time, error_fn)
            return True
        if current is not FinalState.SUCCEEDED:
            if attempted is FinalState.SUCCEEDED:
                log.debug("ProduceResponse returned %s for %s after batch with base offset %s had already been %s.",
                          attempted.name, self.topic_partition, base_offset, current.name)
            else:
                log.debug("Ignored state transition %s -> %s for %s batch with base offset %s",
                          current.name, attempted.name, self.topic_partition, base_offset)
            return False
        raise IllegalStateError(f"A {current.name} batch must not attempt another state change to {attempted.name}")

    def _complete_future_and_fire_callbacks(self, base_offset: int, log_append_time: int,
                                            error_fn: RecordErrorFn | None) -> None:
        # The result is set before the callbacks run (they read it through future.value()); the latch
        # opens after all of them, as in Kafka, then the futures' own done callbacks fire.
        self.produce_future.set(base_offset, log_append_time, error_fn)
        tp = self.topic_partition
        for i, (callback, future) in enumerate(self.thunks):
            if callback is None:
                continue
            try:
                if error_fn is None:
                    callback(future.value(), None)
                else:
                    callback(None, error_fn(i))
            except Exception:
                log.error("Error executing user-provided callback on message for topic-partition '%s'", tp,
                          exc_info=True)
        self.produce_future.done()
        self.produce_future.fire_watchers()

    # -------------------------------------------------------------------------------------- Sender side

    def has_reached_delivery_timeout(self, delivery_timeout_ms: int, now: int) -> bool:
        return delivery_timeout_ms <= now - self.created_ms

    def waited_time_ms(self, now: int) -> int:
        """Time since the last attempt (since creation if never sent)."""
        return max(0, now - self.last_attempt_ms)

    def reenqueued(self, now: int) -> None:
        """The batch goes back to its deque for a retry."""
        self.attempts += 1
        self.last_attempt_ms = max(self.last_append_time, now)
        self.last_append_time = max(self.last_append_time, now)
        self.retry = True

    def drained(self, now: int) -> None:
        self.drained_ms = max(self.drained_ms, now)

    def queue_time_ms(self) -> int:
        return self.drained_ms - self.created_ms

    def in_retry(self) -> bool:
        return self.retry

    def close_for_record_appends(self) -> None:
        """No more appends (the batch is full or being expired); the records can still be built."""
        self._closed_for_appends = True

    abort_record_appends = close_for_record_appends

    def close(self) -> None:
        """Build the final bytes (compression happens here) and update the compression estimate."""
        if self._records is not None:
            return
        self._closed_for_appends = True
        builder = self.records_builder
        self._records = builder.build()
        if self.compression_ratio_estimator is not None and builder.compression_type != CompressionType.NONE:
            self.compression_ratio_estimator.update_estimation(
                self.topic_partition.topic, builder.compression_type, builder.compression_ratio)
        self.reopened = False

    def records(self) -> bytes | memoryview:
        """The built batch bytes (after :meth:`close`): a view of :attr:`buffer`, valid until deallocation."""
        if self._records is None:
            raise IllegalStateError("the batch has not been closed yet")
        return self._records

    def is_closed(self) -> bool:
        return self._records is not None

    def is_full(self) -> bool:
        return self._closed_for_appends or self.records_builder.is_full()

    def estimated_size_in_bytes(self) -> int:
        if self._records is not None:
            return len(self._records)
        return self.records_builder.estimated_size_in_bytes()

    def is_split_batch(self) -> bool:
        return self.is_splitting_batch

    @property
    def compression_type(self) -> CompressionType:
        return self.records_builder.compression_type

    # ------------------------------------------------------------------------------ producer id / sequence

    def set_producer_state(self, producer_id: int, producer_epoch: int, base_sequence: int,
                           is_transactional: bool) -> None:
        self.records_builder.set_producer_state(producer_id, producer_epoch, base_sequence, is_transactional)

    def reset_producer_state(self, producer_id: int, producer_epoch: int, base_sequence: int,
                             is_transactional: bool) -> None:
        """New producer id/epoch/sequence for an already built batch (Kafka's ``resetProducerState``)."""
        self.reopened = True
        self.records_builder.reopen_and_rewrite_producer_state(producer_id, producer_epoch, base_sequence,
                                                               is_transactional)
        if self._records is not None:
            self._records = self.records_builder.build()

    @property
    def producer_id(self) -> int:
        return self.records_builder.producer_id

    @property
    def producer_epoch(self) -> int:
        return self.records_builder.producer_epoch

    @property
    def base_sequence(self) -> int:
        return self.records_builder.base_sequence

    def last_sequence(self) -> int:
        return self.base_sequence + self.record_count - 1 if self.base_sequence != NO_SEQUENCE else NO_SEQUENCE

    def has_sequence(self) -> bool:
        return self.base_sequence != NO_SEQUENCE

    @property
    def is_transactional(self) -> bool:
        return self.records_builder.is_transactional

    # ------------------------------------------------------------------------------------------- split

    def split(self, split_batch_size: int) -> deque[ProducerBatch]:
        """Re-encode the records into batches of about ``split_batch_size`` bytes (MESSAGE_TOO_LARGE).

        Every record keeps its callback and user-visible future (chained to the new batch), the new batches
        keep this batch's creation time and, if it had one, consecutive sequence numbers. This batch's own
        latch is released with ``RecordListTooLargeError`` (its futures follow their chains). Sender only.
        """
        built = self.records_builder.build()
        if not built:
            raise IllegalStateError("cannot split an empty batch")
        record_batch = RecordBatch(built)
        if record_batch.size_in_bytes != len(built):
            raise ValueError("A producer batch should only have one record batch.")
        records = list(record_batch)
        if len(records) != len(self.thunks):
            raise IllegalStateError(f"batch of {len(records)} records has {len(self.thunks)} thunks")
        batches: deque[ProducerBatch] = deque()
        batch: ProducerBatch | None = None
        split_to: list[tuple[ProduceRequestResult, int]] = []
        for record, thunk in zip(records, self.thunks, strict=True):
            if batch is None:
                batch = self._create_batch_off_accumulator_for_record(record, split_batch_size)
            index = batch._try_append_for_split(record.timestamp, record.key, record.value, record.headers, thunk)
            if index < 0:
                batches.append(batch)
                batch.close_for_record_appends()
                batch = self._create_batch_off_accumulator_for_record(record, split_batch_size)
                index = batch._try_append_for_split(record.timestamp, record.key, record.value, record.headers,
                                                    thunk)
            split_to.append((batch.produce_future, index))
        if batch is not None:
            batches.append(batch)
            batch.close_for_record_appends()
        self.produce_future.set(-1, NO_TIMESTAMP, lambda _i: RecordListTooLargeError())
        self.produce_future.split(split_to)  # every record's future now follows its new batch
        self.produce_future.done()
        if self.has_sequence():
            sequence = self.base_sequence
            for new_batch in batches:
                new_batch.set_producer_state(self.producer_id, self.producer_epoch, sequence, self.is_transactional)
                sequence += new_batch.record_count
        return batches

    def _create_batch_off_accumulator_for_record(self, record: Any, batch_size: int) -> ProducerBatch:
        size = max(upper_bound_size(record.key, record.value, record.headers, self.compression_type), batch_size)
        estimator = self.compression_ratio_estimator
        builder = MemoryRecordsBuilder(
            self.compression_type,
            write_limit=size,
            compression_level=self.records_builder.compression_level,
            estimated_compression_ratio=(estimator.estimation(self.topic_partition.topic, self.compression_type)
                                         if estimator is not None else 1.0),
        )
        return ProducerBatch(self.topic_partition, builder, self.created_ms, True,
                             compression_ratio_estimator=estimator)

    def __repr__(self) -> str:
        return (f"ProducerBatch(topicPartition={self.topic_partition}, recordCount={self.record_count}, "
                f"attempts={self.attempts}, finalState={self._final_state and self._final_state.name})")


def _error_fn(top_level: BaseException,
              record_exceptions: Callable[[int], BaseException | None] | Mapping[int, BaseException] | None
              ) -> RecordErrorFn:
    if record_exceptions is None:
        return lambda _i: top_level
    if isinstance(record_exceptions, Mapping):
        mapping = dict(record_exceptions)
        return lambda i: mapping.get(i, top_level)
    fn = record_exceptions

    def lookup(i: int) -> BaseException:
        error = fn(i)
        return error if error is not None else top_level

    return lookup

