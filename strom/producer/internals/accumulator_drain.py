"""``RecordAccumulator``'s Sender-side reading of the deques: ``ready``, ``drain`` and partition muting.

Kafka counterpart: ``RecordAccumulator.ready`` / ``drain`` / ``drainBatchesForOneNode`` /
``shouldStopDrainBatchesForPartition`` (SPEC §6.8-6.9), plus ``ReadyCheckResult`` and the per-partition deque.
Split out of ``record_accumulator`` (module size); :class:`ReadyDrainMixin` is only meant to be mixed into
``RecordAccumulator``, whose fields it uses.

Thread-safety: Sender thread only; each deque lock is taken briefly, ``batch.close()`` (which may compress)
runs outside it.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from strom.common.structs import Node, TopicPartition
from strom.producer.internals.cluster_view import ClusterView
from strom.producer.internals.producer_batch import NO_SEQUENCE, ProducerBatch
from strom.producer.internals.producer_id_and_epoch import ProducerIdAndEpoch

if TYPE_CHECKING:
    from strom.producer.internals.buffer_pool import BufferPool

__all__ = ["LONG_MAX", "ReadyCheckResult", "ReadyDrainMixin", "TransactionManagerHooks"]

log = logging.getLogger(__name__)

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




class ReadyDrainMixin:
    """``ready`` / ``drain`` / muting for :class:`~strom.producer.internals.record_accumulator.RecordAccumulator`."""

    # Fields of RecordAccumulator used here.
    _batches: dict[TopicPartition, _PartitionDeque]
    _muted: set[TopicPartition]
    _nodes_drain_index: dict[int, int]
    _closed: bool
    free: BufferPool
    transaction_manager: TransactionManagerHooks | None
    retry_backoff_ms: int
    linger_ms: int
    log_context: str

    def flush_in_progress(self) -> bool:  # pragma: no cover - overridden by RecordAccumulator
        raise NotImplementedError

    # ------------------------------------------------------------------------------------------- ready

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
                if self._should_stop_drain_batches_for_partition(first, tp):
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

    def _should_stop_drain_batches_for_partition(self, first: ProducerBatch, tp: TopicPartition) -> bool:
        tm = self.transaction_manager
        if tm is None:
            return False
        if not tm.is_send_to_partition_allowed(tp):
            return True
        if not tm.producer_id_and_epoch().is_valid():
            return True  # no producer id yet
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
