"""The producer's in-memory queue of record batches, one deque per partition.

Kafka counterpart: ``org.apache.kafka.clients.producer.internals.RecordAccumulator`` (SPEC §6), with
``IncompleteBatches`` and ``CopyOnWriteMap``.

* ``batches``: ``TopicPartition → _PartitionDeque`` (a ``collections.deque`` of :class:`ProducerBatch` plus its
  own lock). The dict is copy-on-write: readers use the current dict without locking, the rare writer (a new
  partition) copies it under ``_batches_lock`` and swaps the reference.
* ``append`` (caller threads) follows Kafka's two-block design: try the last batch under the deque lock;
  otherwise allocate from the :class:`BufferPool` **without** any deque lock (it may block up to what is left
  of ``max.block.ms``), retake the lock, try again (another thread may have created a batch meanwhile — then the
  buffer is given back), and only then create a batch.
* ``ready`` / ``drain`` / ``expired_batches`` / ``reenqueue`` / muting are Sender-thread only; they take each
  deque lock briefly. Batches are appended at the tail and drained from the head (FIFO per partition).

Version choices: Kafka 3.x forms — per-node drain index, ``muted`` as a set, ``batch.close()`` outside the
deque lock in ``drain``, delivery-timeout expiry; the sticky partition switch uses ``abort_on_new_batch`` (2.4).

Thread-safety: thread-safe as described; no callback or allocation runs while a deque lock is held.
"""

from __future__ import annotations

import logging
import threading
import time as _time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, NamedTuple, Protocol

from strom.common.errors import IllegalStateError, KafkaError, KafkaTimeoutError
from strom.common.structs import Node, TopicPartition
from strom.common.time import SYSTEM_TIME, Time
from strom.producer.internals.buffer_pool import BufferPool
from strom.producer.internals.cluster_view import ClusterView
from strom.producer.internals.future_record_metadata import FutureRecordMetadata
from strom.producer.internals.incomplete_batches import IncompleteBatches
from strom.producer.internals.producer_batch import (
    COMPRESSION_RATIO_ESTIMATOR,
    NO_SEQUENCE,
    Callback,
    CompressionRatioEstimator,
    ProducerBatch,
)
from strom.producer.internals.producer_id_and_epoch import ProducerIdAndEpoch
from strom.record.records import CompressionType, MemoryRecordsBuilder, upper_bound_size
from strom.record.sizes import EncodedHeaders

__all__ = [
    "RecordAccumulator",
    "RecordAppendResult",
    "BulkAppendResult",
    "ReadyCheckResult",
    "IncompleteBatches",
    "TransactionManagerHooks",
    "CLOSED_WHILE_SENDING",
    "LONG_MAX",
]

log = logging.getLogger(__name__)

CLOSED_WHILE_SENDING = "Producer closed while send in progress"
_new_tuple = tuple.__new__


LONG_MAX = 2**63 - 1


@dataclass(frozen=True, slots=True)
class ReadyCheckResult:
    """Kafka's ``ReadyCheckResult``: nodes with sendable data, the next time to look again, and topics with
    queued data whose leader is unknown."""

    ready_nodes: set[Node] = field(default_factory=set)
    next_ready_check_delay_ms: int = LONG_MAX
    unknown_leader_topics: set[str] = field(default_factory=set)


class TransactionManagerHooks(Protocol):
    """What the accumulator asks the (idempotent / transactional) TransactionManager (Sender-thread calls)."""

    def is_transactional(self) -> bool: ...
    def is_completing(self) -> bool: ...
    def producer_id_and_epoch(self) -> ProducerIdAndEpoch: ...
    def is_send_to_partition_allowed(self, tp: TopicPartition) -> bool: ...
    def has_inflight_batches(self, tp: TopicPartition) -> bool: ...
    def has_request_outstanding_elsewhere(self, tp: TopicPartition, node_id: int) -> bool: ...
    def has_stale_producer_id_and_epoch(self, tp: TopicPartition) -> bool: ...
    def has_unresolved_sequence(self, tp: TopicPartition) -> bool: ...
    def first_in_flight_sequence(self, tp: TopicPartition) -> int: ...
    def maybe_update_producer_id_and_epoch(self, tp: TopicPartition) -> None: ...
    def sequence_number(self, tp: TopicPartition) -> int: ...
    def increment_sequence_number(self, tp: TopicPartition, increment: int) -> None: ...
    def add_in_flight_batch(self, batch: ProducerBatch) -> None: ...


class _PartitionDeque:
    """One partition's batches and the lock guarding them (Java's ``synchronized (deque)``)."""

    __slots__ = ("lock", "batches")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.batches: deque[ProducerBatch] = deque()


class RecordAppendResult(NamedTuple):
    """Kafka's ``RecordAccumulator.RecordAppendResult``.

    ``batch_is_full``: the deque holds more than one batch or the batch appended to is full;
    ``new_batch_created``: this append created the batch — either wakes the Sender. ``abort_for_new_batch``:
    nothing was appended because a new batch would be needed and the caller asked to be told first.
    """

    future: FutureRecordMetadata | None
    batch_is_full: bool
    new_batch_created: bool
    abort_for_new_batch: bool = False


class BulkAppendResult(NamedTuple):
    """What :meth:`RecordAccumulator.append_many` did: one future per batch segment, how many records it
    appended, whether a batch is full (wake the Sender) and how many batches it created."""

    futures: list[FutureRecordMetadata]
    consumed: int
    batch_is_full: bool
    new_batches: int


class _Counter:
    """An atomic int (``AtomicInteger``) for counts of things in progress: a deque's ``append``/``pop`` are
    atomic and far cheaper than taking a lock (``append`` runs on every send)."""

    __slots__ = ("_d", "increment", "decrement")

    def __init__(self) -> None:
        self._d: deque[None] = deque()
        # C-level callables (no Python frame per call): ``increment()`` appends, ``decrement()`` pops
        self.increment: Callable[[], None] = partial(self._d.append, None)
        self.decrement: Callable[[], None] = self._d.pop

    @property
    def value(self) -> int:
        return len(self._d)


class RecordAccumulator:
    """Batches records per partition for the Sender (Kafka's ``RecordAccumulator``).

    ``append`` and ``begin_flush``/``await_flush_completion``/``close``/``abort_incomplete_batches`` are
    thread-safe; ``ready``, ``drain``, ``expired_batches``, ``reenqueue``, ``split_and_reenqueue``,
    ``mute_partition``/``unmute_partition`` and ``deallocate`` are Sender-thread only.
    """

    def __init__(
        self,
        batch_size: int,
        compression_type: CompressionType | int | str,
        linger_ms: int,
        retry_backoff_ms: int,
        delivery_timeout_ms: int,
        buffer_pool: BufferPool,
        time: Time = SYSTEM_TIME,
        *,
        transaction_manager: TransactionManagerHooks | None = None,
        compression_level: int | None = None,
        compression_ratio_estimator: CompressionRatioEstimator | None = None,
        log_context: str = "",
    ) -> None:
        if isinstance(compression_type, str):
            compression_type = CompressionType.from_name(compression_type)
        self.batch_size = batch_size
        self.compression = CompressionType(compression_type)
        self.compression_level = compression_level
        self.linger_ms = linger_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.delivery_timeout_ms = delivery_timeout_ms
        self.free = buffer_pool
        self.time = time
        self.transaction_manager = transaction_manager
        self.compression_ratio_estimator = compression_ratio_estimator or COMPRESSION_RATIO_ESTIMATOR
        self.log_context = log_context
        self._closed = False
        self._flushes_in_progress = _Counter()
        self._appends_in_progress = _Counter()
        self._batches: dict[TopicPartition, _PartitionDeque] = {}
        self._batches_lock = threading.Lock()
        self._incomplete = IncompleteBatches()
        self._muted: set[TopicPartition] = set()
        self._nodes_drain_index: dict[int, int] = {}
        self._next_batch_expiry_time_ms = LONG_MAX

    # ------------------------------------------------------------------------------------------ deques

    def _get_or_create_deque(self, tp: TopicPartition) -> _PartitionDeque:
        d = self._batches.get(tp)
        if d is not None:
            return d
        with self._batches_lock:  # CopyOnWriteMap.putIfAbsent
            d = self._batches.get(tp)
            if d is None:
                d = _PartitionDeque()
                copy = dict(self._batches)
                copy[tp] = d
                self._batches = copy
            return d

    def get_deque(self, tp: TopicPartition) -> deque[ProducerBatch] | None:
        """The live deque of ``tp`` (tests / diagnostics; do not mutate)."""
        d = self._batches.get(tp)
        return d.batches if d is not None else None

    def batches(self) -> dict[TopicPartition, list[ProducerBatch]]:
        """A snapshot of every partition's queued batches."""
        out: dict[TopicPartition, list[ProducerBatch]] = {}
        for tp, d in self._batches.items():
            with d.lock:
                out[tp] = list(d.batches)
        return out

    # ------------------------------------------------------------------------------------------ append

    def append(
        self,
        tp: TopicPartition,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: Iterable[Any] | None,
        callback: Callback | None,
        max_time_to_block_ms: int,
        abort_on_new_batch: bool,
        now_ms: int,
        cluster: ClusterView | None = None,
    ) -> RecordAppendResult:
        """Add a record to the partition's last batch, creating a batch if needed (thread-safe).

        May block in buffer allocation for up to ``max_time_to_block_ms`` (raising ``KafkaTimeoutError``).
        Raises :class:`KafkaError` "Producer closed while send in progress" once closed. ``cluster`` is
        accepted for Kafka 3.3's signature (built-in partitioner) and unused.
        """
        self._appends_in_progress.increment()
        buffer: bytearray | None = None
        hdrs: Any = (() if headers is None else headers if isinstance(headers, (tuple, EncodedHeaders))
                     else tuple(headers))
        try:
            dq = self._batches.get(tp) or self._get_or_create_deque(tp)
            with dq.lock:  # block 1 (the hot path: _try_append inlined)
                if self._closed:
                    raise KafkaError(CLOSED_WHILE_SENDING)
                batches = dq.batches
                if batches:
                    last = batches[-1]
                    future = last.try_append(timestamp, key, value, hdrs, callback, now_ms)
                    if future is not None:
                        # tuple.__new__ skips the NamedTuple's Python-level __new__ (~70 ns a send).
                        return _new_tuple(RecordAppendResult, (future, len(batches) > 1 or last.is_full(), False,
                                                               False))
                    last.close_for_record_appends()
            if abort_on_new_batch:
                # Let the sticky partitioner pick another partition before we create a batch.
                return RecordAppendResult(None, False, False, True)
            size = max(self.batch_size, upper_bound_size(key, value, hdrs, self.compression))
            log.debug("%sAllocating a new %d byte message buffer for topic %s partition %d with remaining "
                      "timeout %dms", self.log_context, size, tp.topic, tp.partition, max_time_to_block_ms)
            buffer = self.free.allocate(size, max_time_to_block_ms)  # may block; no deque lock held
            now_ms = self.time.milliseconds()  # allocation may have blocked
            with dq.lock:  # block 2
                if self._closed:
                    raise KafkaError(CLOSED_WHILE_SENDING)
                result = self._try_append(timestamp, key, value, hdrs, callback, dq.batches, now_ms)
                if result is not None:
                    # Somebody else created a batch meanwhile; our buffer goes back in `finally`.
                    return result
                batch = self._new_batch(tp, buffer, now_ms)
                future = batch.try_append(timestamp, key, value, hdrs, callback, now_ms)
                if future is None:  # pragma: no cover - a new batch always takes its first record
                    raise IllegalStateError("a new batch refused its first record")
                dq.batches.append(batch)
                self._incomplete.add(batch)
                buffer = None  # now owned by the batch
                return RecordAppendResult(future, len(dq.batches) > 1 or batch.is_full(), True, False)
        finally:
            if buffer is not None:
                self.free.deallocate(buffer)
            self._appends_in_progress.decrement()

    def append_many(
        self,
        tp: TopicPartition,
        timestamp: int,
        keys: Sequence[bytes | None] | None,
        values: Sequence[bytes | None],
        start: int,
        stop: int,
        callback: Callback | None,
        max_time_to_block_ms: int,
        now_ms: int,
        max_new_batches: int | None = None,
    ) -> BulkAppendResult:
        """Append records ``start..stop-1`` (one timestamp, no headers) to the partition as whole runs: the
        rest of the last batch first, then new batches of ``batch.size`` (thread-safe; the bulk counterpart of
        :meth:`append`, with the same two-block allocation). Stops after creating ``max_new_batches`` batches
        (``None`` = no limit), so the caller may move on to another partition (the sticky partitioner).

        One future per batch segment (see :meth:`ProducerBatch.try_append_many`). May block in buffer
        allocation for up to ``max_time_to_block_ms`` (``KafkaTimeoutError``, records appended so far stay
        appended: ``consumed`` tells how many).
        """
        self._appends_in_progress.increment()
        futures: list[FutureRecordMetadata] = []
        buffer: bytearray | None = None
        new_batches = 0
        full = False
        pos = start
        deadline_ms = now_ms + max_time_to_block_ms
        try:
            dq = self._batches.get(tp) or self._get_or_create_deque(tp)
            while pos < stop:
                with dq.lock:  # block 1: the rest of the last batch
                    if self._closed:
                        raise KafkaError(CLOSED_WHILE_SENDING)
                    pos = self._fill_last(dq.batches, timestamp, keys, values, pos, stop, callback, now_ms, futures)
                    if pos >= stop:
                        full = full or len(dq.batches) > 1 or dq.batches[-1].is_full()
                        break
                    full = True
                if max_new_batches is not None and new_batches >= max_new_batches:
                    break
                key = keys[pos] if keys is not None else None
                size = max(self.batch_size, upper_bound_size(key, values[pos], (), self.compression))
                buffer = self.free.allocate(size, max(0, deadline_ms - self.time.milliseconds()))  # no lock held
                now_ms = self.time.milliseconds()
                with dq.lock:  # block 2
                    if self._closed:
                        raise KafkaError(CLOSED_WHILE_SENDING)
                    pos = self._fill_last(dq.batches, timestamp, keys, values, pos, stop, callback, now_ms, futures)
                    if pos >= stop:
                        break  # another thread's batch took the rest; our buffer goes back in `finally`
                    batch = self._new_batch(tp, buffer, now_ms)
                    count, future = batch.try_append_many(timestamp, keys, values, pos, stop, callback, now_ms)
                    if future is None:  # pragma: no cover - a new batch always takes its first record
                        raise IllegalStateError("a new batch refused its first record")
                    futures.append(future)
                    pos += count
                    dq.batches.append(batch)
                    self._incomplete.add(batch)
                    buffer = None  # now owned by the batch
                    new_batches += 1
            return BulkAppendResult(futures, pos - start, full, new_batches)
        finally:
            if buffer is not None:
                self.free.deallocate(buffer)
            self._appends_in_progress.decrement()

    @staticmethod
    def _fill_last(batches: deque[ProducerBatch], timestamp: int, keys: Sequence[bytes | None] | None,
                   values: Sequence[bytes | None], pos: int, stop: int, callback: Callback | None, now_ms: int,
                   futures: list[FutureRecordMetadata]) -> int:
        """Append what fits to the last batch (deque lock held); close it for appends when it is full."""
        if batches:
            last = batches[-1]
            count, future = last.try_append_many(timestamp, keys, values, pos, stop, callback, now_ms)
            if future is not None:
                futures.append(future)
                pos += count
            if pos < stop:
                last.close_for_record_appends()
        return pos

    def _new_batch(self, tp: TopicPartition, buffer: bytearray, now_ms: int) -> ProducerBatch:
        builder = MemoryRecordsBuilder(
            self.compression,
            buffer=buffer,  # the batch writes into its pooled buffer (Kafka's MemoryRecordsBuilder(buffer))
            write_limit=len(buffer),
            compression_level=self.compression_level,
            estimated_compression_ratio=(
                self.compression_ratio_estimator.estimation(tp.topic, self.compression) if self.compression else 1.0
            ),
        )
        return ProducerBatch(tp, builder, now_ms, buffer=buffer,
                             compression_ratio_estimator=self.compression_ratio_estimator)

    @staticmethod
    def _try_append(timestamp: int, key: bytes | None, value: bytes | None, headers: Any,
                    callback: Callback | None, batches: deque[ProducerBatch], now_ms: int) -> RecordAppendResult | None:
        """Append to the last batch if it has room (deque lock held); close it for appends when it has not."""
        if batches:
            last = batches[-1]
            future = last.try_append(timestamp, key, value, headers, callback, now_ms)
            if future is None:
                last.close_for_record_appends()
            else:
                return RecordAppendResult(future, len(batches) > 1 or last.is_full(), False, False)
        return None

    def appends_in_progress(self) -> bool:
        return self._appends_in_progress.value > 0

    # --------------------------------------------------------------------------------- expiry / retry

    def expired_batches(self, now_ms: int) -> list[ProducerBatch]:
        """Remove and return queued head batches that reached ``delivery.timeout.ms`` (Sender thread only).
        The caller fails them ("Expiring N record(s) for tp:X ms has passed since batch creation")."""
        expired: list[ProducerBatch] = []
        for dq in self._batches.values():
            with dq.lock:
                batches = dq.batches
                while batches:
                    batch = batches[0]
                    if batch.has_reached_delivery_timeout(self.delivery_timeout_ms, now_ms):
                        batches.popleft()
                        batch.abort_record_appends()
                        expired.append(batch)
                    else:
                        self.maybe_update_next_batch_expiry_time(batch)
                        break
        return expired

    def maybe_update_next_batch_expiry_time(self, batch: ProducerBatch) -> None:
        """Lower the next expiry time to ``batch``'s delivery deadline (Sender thread only)."""
        expiry = batch.created_ms + self.delivery_timeout_ms
        if expiry > 0:  # overflow guard, as Kafka
            self._next_batch_expiry_time_ms = min(self._next_batch_expiry_time_ms, expiry)

    def reset_next_batch_expiry_time(self) -> None:
        self._next_batch_expiry_time_ms = LONG_MAX

    def next_expiry_time_ms(self) -> int:
        return self._next_batch_expiry_time_ms

    def reenqueue(self, batch: ProducerBatch, now_ms: int) -> None:
        """Put a failed batch back at the head of its deque for a retry (Sender thread only)."""
        batch.reenqueued(now_ms)
        dq = self._get_or_create_deque(batch.topic_partition)
        with dq.lock:
            if self.transaction_manager is not None:
                self._insert_in_sequence_order(dq.batches, batch)
            else:
                dq.batches.appendleft(batch)

    def discard_queued(self, batch: ProducerBatch) -> bool:
        """Take ``batch`` out of its deque if it is queued there (Sender thread only); whether it was."""
        dq = self._batches.get(batch.topic_partition)
        if dq is None:
            return False
        with dq.lock:
            try:
                dq.batches.remove(batch)
            except ValueError:
                return False
            return True

    def _insert_in_sequence_order(self, batches: deque[ProducerBatch], batch: ProducerBatch) -> None:
        if batch.base_sequence == NO_SEQUENCE:
            raise IllegalStateError("Trying to re-enqueue a batch which doesn't have a sequence even though "
                                    "idempotency is enabled.")
        assert self.transaction_manager is not None
        if not self.transaction_manager.has_inflight_batches(batch.topic_partition):
            raise IllegalStateError(
                "We are re-enqueueing a batch which is not tracked as part of the in flight requests. "
                f"batch.topicPartition: {batch.topic_partition}; batch.baseSequence: {batch.base_sequence}"
            )
        ahead: list[ProducerBatch] = []
        while batches and batches[0].has_sequence() and batches[0].base_sequence < batch.base_sequence:
            ahead.append(batches.popleft())
        batches.appendleft(batch)
        for earlier in reversed(ahead):
            batches.appendleft(earlier)

    def split_and_reenqueue(self, big_batch: ProducerBatch) -> int:
        """Split a batch rejected as too large and put the parts at the head of its deque (they count as never
        tried). Returns the number of new batches; the caller then deallocates ``big_batch``. Sender only."""
        self.compression_ratio_estimator.set_estimation(
            big_batch.topic_partition.topic, self.compression,
            max(1.0, big_batch.records_builder.compression_ratio))
        parts = big_batch.split(self.batch_size)
        count = len(parts)
        dq = self._get_or_create_deque(big_batch.topic_partition)
        while parts:
            batch = parts.pop()
            self._incomplete.add(batch)
            with dq.lock:
                if self.transaction_manager is not None:
                    self.transaction_manager.add_in_flight_batch(batch)
                    self._insert_in_sequence_order(dq.batches, batch)
                else:
                    dq.batches.appendleft(batch)
        return count

    def deallocate(self, batch: ProducerBatch) -> None:
        """The batch is complete: forget it and give its memory back (split batches own none).

        If a request carrying the batch is still outstanding (``batch.in_flight``: it expired or was aborted in
        flight) its buffer — which that request's records view — is only returned by :meth:`request_completed`.
        """
        self._incomplete.remove(batch)
        if batch.in_flight:
            batch.deallocate_pending = True
        else:
            self._release_buffer(batch)

    def request_completed(self, batch: ProducerBatch) -> None:
        """The request carrying ``batch`` completed (response, disconnection or timeout; Sender thread only):
        its buffer may now be reused; returned at once if the batch was deallocated meanwhile."""
        batch.in_flight = False
        if batch.deallocate_pending:
            batch.deallocate_pending = False
            self._release_buffer(batch)

    def _release_buffer(self, batch: ProducerBatch) -> None:
        if not batch.is_split_batch() and batch.buffer is not None:
            self.free.deallocate(batch.buffer, batch.initial_capacity)
            batch.buffer = None

    def buffer_pool_available_memory(self) -> int:
        return self.free.available_memory()

    # -------------------------------------------------------------------------------------------- flush

    def begin_flush(self) -> None:
        """Make every queued batch sendable at once until :meth:`await_flush_completion` returns."""
        self._flushes_in_progress.increment()

    def flush_in_progress(self) -> bool:
        return self._flushes_in_progress.value > 0

    def await_flush_completion(self, timeout_ms: int | None = None) -> None:
        """Wait until every batch that was incomplete when called has completed (thread-safe).

        ``timeout_ms`` (``None`` = forever, real time) bounds the wait: :class:`KafkaTimeoutError` if exceeded.
        The flush ends either way.
        """
        try:
            deadline = None if timeout_ms is None else _time.monotonic() + timeout_ms / 1000
            for result in self._incomplete.request_results():
                remaining = None if deadline is None else max(0.0, deadline - _time.monotonic())
                if not result.await_(remaining):
                    raise KafkaTimeoutError(f"Flush did not complete within {timeout_ms} ms.")
        finally:
            self._flushes_in_progress.decrement()

    def has_incomplete(self) -> bool:
        return not self._incomplete.is_empty()

    # -------------------------------------------------------------------------------------- abort / close

    def abort_incomplete_batches(self) -> None:
        """Forced close: fail every incomplete batch ("Producer is closed forcefully.") and free its memory,
        repeating while appends are in progress so no batch is missed."""
        while True:
            self.abort_batches(KafkaError("Producer is closed forcefully."))
            if not self.appends_in_progress():
                break
            _time.sleep(0)  # let the appending threads see `closed`
        # After this no thread appends (they see `closed`); one last pass for a batch the last one created.
        self.abort_batches(KafkaError("Producer is closed forcefully."))
        with self._batches_lock:
            self._batches = {}

    def abort_batches(self, reason: BaseException) -> None:
        """Fail every incomplete batch with ``reason`` (queued or in flight) and free its memory (thread-safe)."""
        for batch in self._incomplete.copy_all():
            dq = self._batches.get(batch.topic_partition)
            if dq is not None:
                with dq.lock:
                    batch.abort_record_appends()
                    try:
                        dq.batches.remove(batch)
                    except ValueError:
                        pass  # in flight, not queued
            if batch.is_done():
                continue  # completed meanwhile; its owner deallocates it
            batch.abort(reason)
            self.deallocate(batch)

    def abort_undrained_batches(self, reason: BaseException) -> None:
        """Fail the batches not yet sent (transaction abort): those without a sequence when idempotent,
        those not yet closed otherwise."""
        for batch in self._incomplete.copy_all():
            dq = self._batches.get(batch.topic_partition)
            aborted = False
            if dq is not None:
                with dq.lock:
                    undrained = (not batch.has_sequence()) if self.transaction_manager is not None \
                        else (not batch.is_closed())
                    if undrained:
                        aborted = True
                        batch.abort_record_appends()
                        try:
                            dq.batches.remove(batch)
                        except ValueError:
                            pass
            if aborted:
                batch.abort(reason)
                self.deallocate(batch)

    def close(self) -> None:
        """Refuse further appends and wake threads blocked on memory (they fail)."""
        self._closed = True
        self.free.close()

    @property
    def is_closed(self) -> bool:
        return self._closed

    def __repr__(self) -> str:
        return (f"RecordAccumulator(partitions={len(self._batches)}, incomplete={len(self._incomplete)}, "
                f"available={self.free.available_memory()})")

    def ready(self, cluster: ClusterView, now_ms: int) -> ReadyCheckResult:
        """Nodes with a sendable partition head batch, the delay until the next one may become sendable, and
        topics with queued data but no known leader. Sender thread only."""
        ready_nodes: set[Node] = set()
        next_delay = LONG_MAX
        unknown_leader_topics: set[str] = set()
        exhausted = self.free.queued() > 0
        tm = self.transaction_manager
        retry_backoff_ms = self.retry_backoff_ms
        linger_ms = self.linger_ms
        for tp, dq in self._batches.items():
            with dq.lock:
                batches = dq.batches
                if not batches:
                    continue  # hot path with many partitions: most deques are empty
                batch = batches[0]
                waited_ms = batch.waited_time_ms(now_ms)
                backing_off = batch.attempts > 0 and waited_ms < retry_backoff_ms
                full = len(batches) > 1 or batch.is_full()
            leader = cluster.leader_for(tp)
            if leader is None:
                unknown_leader_topics.add(tp.topic)
            elif leader not in ready_nodes and tp not in self._muted:
                time_to_wait_ms = retry_backoff_ms if backing_off else linger_ms
                expired = waited_ms >= time_to_wait_ms
                transaction_completing = tm is not None and tm.is_completing()
                sendable = (full or expired or exhausted or self._closed or self.flush_in_progress()
                            or transaction_completing)
                if sendable and not backing_off:
                    ready_nodes.add(leader)
                else:
                    # A conservative estimate: we may wake up and find nothing to do.
                    next_delay = min(next_delay, max(time_to_wait_ms - waited_ms, 0))
        return ReadyCheckResult(ready_nodes, next_delay, unknown_leader_topics)

    def has_undrained(self) -> bool:
        """Whether any deque still holds a batch."""
        for dq in self._batches.values():
            with dq.lock:
                if dq.batches:
                    return True
        return False

    # ------------------------------------------------------------------------------------------- drain

    def drain(self, cluster: ClusterView, nodes: Iterable[Node], max_size: int, now_ms: int
              ) -> dict[int, list[ProducerBatch]]:
        """For each node, the head batches of its partitions that fit in ``max_size`` bytes (at least one),
        starting where the previous drain for that node stopped. Sender thread only."""
        out: dict[int, list[ProducerBatch]] = {}
        for node in nodes:
            out[node.node_id] = self._drain_batches_for_one_node(cluster, node, max_size, now_ms)
        return out

    def _drain_batches_for_one_node(self, cluster: ClusterView, node: Node, max_size: int, now_ms: int
                                    ) -> list[ProducerBatch]:
        ready: list[ProducerBatch] = []
        parts = cluster.partitions_for_node(node.node_id)
        if not parts:
            return ready
        size = 0
        n = len(parts)
        start = self._nodes_drain_index.get(node.node_id, 0) % n
        tm = self.transaction_manager
        for i in range(n):
            index = (start + i) % n
            tp = parts[index]
            # Remember where we are: if the request fills up here, the next drain starts with this partition.
            self._nodes_drain_index[node.node_id] = index
            if tp in self._muted:
                continue  # only one in-flight batch per partition when ordering is guaranteed
            dq = self._batches.get(tp)
            if dq is None:
                continue
            with dq.lock:
                if not dq.batches:
                    continue
                first = dq.batches[0]
                if first.attempts > 0 and first.waited_time_ms(now_ms) < self.retry_backoff_ms:
                    continue  # still backing off
                if size + first.estimated_size_in_bytes() > max_size and ready:
                    # A single batch larger than max_size (compression) still goes alone in some request.
                    break
                if self._should_stop_drain_batches_for_partition(first, tp, node.node_id):
                    break
                batch = dq.batches.popleft()
                if tm is not None:
                    producer_id_and_epoch = tm.producer_id_and_epoch()
                    if not batch.has_sequence():
                        # Never re-assign a sequence: the previous attempt may have been written.
                        tm.maybe_update_producer_id_and_epoch(batch.topic_partition)
                        batch.set_producer_state(producer_id_and_epoch.producer_id, producer_id_and_epoch.epoch,
                                                 tm.sequence_number(batch.topic_partition), tm.is_transactional())
                        tm.increment_sequence_number(batch.topic_partition, batch.record_count)
                        log.debug("%sAssigned producerId %d and producerEpoch %d to batch with base sequence %d "
                                  "being sent to partition %s", self.log_context, producer_id_and_epoch.producer_id,
                                  producer_id_and_epoch.epoch, batch.base_sequence, tp)
                        tm.add_in_flight_batch(batch)
            batch.close()  # builds (and compresses) the records: outside the lock, it can be slow
            size += len(batch.records())
            ready.append(batch)
            batch.drained(now_ms)
        return ready

    def _should_stop_drain_batches_for_partition(self, first: ProducerBatch, tp: TopicPartition,
                                                 node_id: int) -> bool:
        tm = self.transaction_manager
        if tm is None:
            return False
        if not tm.is_send_to_partition_allowed(tp):
            return True
        if not tm.producer_id_and_epoch().is_valid():
            return True  # no producer id yet
        if tm.has_request_outstanding_elsewhere(tp, node_id):
            return True  # the leader changed: the old leader answers first
        if not first.has_sequence():
            if tm.has_inflight_batches(tp) and tm.has_stale_producer_id_and_epoch(tp):
                return True  # wait for in-flight batches of the old epoch before starting sequence 0 again
            if tm.has_unresolved_sequence(first.topic_partition):
                return True
        first_in_flight = tm.first_in_flight_sequence(first.topic_partition)
        # A retried batch goes first: wait until it is the oldest in flight (in-flight 1 while retrying).
        return first_in_flight != NO_SEQUENCE and first.has_sequence() and first.base_sequence != first_in_flight

    # -------------------------------------------------------------------------------------- muting

    def mute_partition(self, tp: TopicPartition) -> None:
        """No more batches of ``tp`` are drained until :meth:`unmute_partition` (Sender thread only)."""
        self._muted.add(tp)

    def unmute_partition(self, tp: TopicPartition) -> None:
        self._muted.discard(tp)

    def is_muted(self, tp: TopicPartition) -> bool:
        return tp in self._muted
