"""Position control and offset/metadata lookups of :class:`~strom.consumer.kafka_consumer.KafkaConsumer`.

Kafka counterparts: ``KafkaConsumer.seek``, ``seekToBeginning``, ``seekToEnd``, ``position``, ``committed``,
``offsetsForTimes``, ``beginningOffsets``, ``endOffsets``, ``partitionsFor``, ``listTopics``, ``pause``,
``resume``, ``paused``, ``currentLag``. Timeouts default to ``default.api.timeout.ms`` and raise
:class:`KafkaTimeoutError` when they expire.

Mixed into ``KafkaConsumer``; not thread-safe (same contract as the consumer).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from datetime import timedelta
from typing import Any

from strom.common.errors import IllegalStateError, KafkaTimeoutError
from strom.common.structs import OffsetAndMetadata, TopicPartition
from strom.consumer.consumer_records import OffsetAndTimestamp
from strom.consumer.internals.offset_fetcher import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from strom.consumer.internals.subscription_state import OffsetResetStrategy
from strom.consumer.internals.timer import Timer

__all__ = ["ConsumerLookupsMixin"]

log = logging.getLogger(__name__)

Timeout = float | timedelta | None


class ConsumerLookupsMixin:
    """See the module docstring; relies on the attributes ``KafkaConsumer`` sets up."""

    _subscriptions: Any
    _fetcher: Any
    _offset_fetcher: Any
    _metadata: Any
    _client: Any
    _coordinator: Any
    _log_context: str

    def _acquire_and_ensure_open(self) -> None: ...  # provided by KafkaConsumer
    def _release(self) -> None: ...
    def _timer(self, timeout: Timeout, timeout_ms: int | None = None) -> Timer: ...  # type: ignore[empty-body]
    def _require_group(self) -> Any: ...
    def _update_fetch_positions(self, timer: Timer) -> bool: ...  # type: ignore[empty-body]

    # ------------------------------------------------------------------------------------ positions

    def seek(self, partition: TopicPartition, offset: int | OffsetAndMetadata) -> None:
        """Fetch ``partition`` from ``offset`` on the next ``poll``."""
        om = offset if isinstance(offset, OffsetAndMetadata) else OffsetAndMetadata(int(offset))
        if om.offset < 0:
            raise ValueError("seek offset must not be a negative number")
        self._acquire_and_ensure_open()
        try:
            log.info("%sSeeking to offset %d for partition %s", self._log_context, om.offset, partition)
            self._subscriptions.seek(partition, om.offset, om.leader_epoch)
            self._fetcher.clear_buffered_data_for(partition)
        finally:
            self._release()

    def _seek_to(self, partitions: Iterable[TopicPartition] | None, strategy: OffsetResetStrategy) -> None:
        self._acquire_and_ensure_open()
        try:
            targets = self._subscriptions.assigned_partitions() if partitions is None else list(partitions)
            for tp in targets:
                log.info("%sSeeking to %s offset of partition %s", self._log_context, strategy.name, tp)
                self._subscriptions.request_offset_reset(tp, strategy)
                self._fetcher.clear_buffered_data_for(tp)
        finally:
            self._release()

    def seek_to_beginning(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        """Reset to the earliest offset lazily (on the next ``poll``/``position``); ``None`` = all assigned."""
        self._seek_to(partitions, OffsetResetStrategy.EARLIEST)

    def seek_to_end(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        """Reset to the latest offset (LSO with ``read_committed``) lazily; ``None`` = all assigned."""
        self._seek_to(partitions, OffsetResetStrategy.LATEST)

    def position(self, partition: TopicPartition, timeout: Timeout = None) -> int:
        """The offset of the next record to fetch, looking it up (committed offset / reset) if needed."""
        self._acquire_and_ensure_open()
        try:
            if not self._subscriptions.is_assigned(partition):
                raise IllegalStateError("You can only check the position for partitions assigned to this consumer.")
            timer = self._timer(timeout)
            while True:
                offset = self._subscriptions.position(partition)
                if offset is not None:
                    return int(offset)
                self._update_fetch_positions(timer)
                offset = self._subscriptions.position(partition)
                if offset is not None:
                    return int(offset)
                self._client.poll(timer.remaining_ms())
                timer.update()
                if timer.is_expired():
                    raise KafkaTimeoutError(f"Timeout of {timer.timeout_ms}ms expired before the position for "
                                            f"partition {partition} could be determined")
        finally:
            self._release()

    def committed(self, partitions: TopicPartition | Iterable[TopicPartition],
                  timeout: Timeout = None) -> Any:
        """The last committed offsets: ``{partition: OffsetAndMetadata | None}`` for a collection, or one
        ``OffsetAndMetadata | None`` for a single partition."""
        self._acquire_and_ensure_open()
        try:
            coordinator = self._require_group()
            single = isinstance(partitions, TopicPartition)
            wanted = {partitions} if single else set(partitions)  # type: ignore[arg-type]
            timer = self._timer(timeout)
            offsets = coordinator.fetch_committed_offsets(wanted, timer)
            if offsets is None:
                raise KafkaTimeoutError(f"Timeout of {timer.timeout_ms}ms expired before the last committed offset "
                                        f"for partitions {sorted(wanted)} could be determined.")
            result = {tp: offsets.get(tp) for tp in wanted}
            return result[partitions] if single else result  # type: ignore[index]
        finally:
            self._release()

    # ------------------------------------------------------------------------------ offset lookups

    def _with_topics(self, partitions: Iterable[TopicPartition], timer: Timer) -> None:
        """Make sure metadata knows the partitions' topics (transient topics for unsubscribed ones)."""
        topics = {tp.topic for tp in partitions}
        missing = topics - self._metadata.fetch().topics()
        if missing:
            self._metadata.add_transient_topics(missing)
            self._client.await_metadata_update(timer)

    def offsets_for_times(self, timestamps: Mapping[TopicPartition, int],
                          timeout: Timeout = None) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """The earliest offset whose timestamp is >= the given one per partition (``None`` if none)."""
        self._acquire_and_ensure_open()
        try:
            timer = self._timer(timeout)
            self._with_topics(timestamps, timer)
            return self._offset_fetcher.offsets_for_times(dict(timestamps), timer)
        finally:
            self._release()

    def beginning_offsets(self, partitions: Iterable[TopicPartition],
                          timeout: Timeout = None) -> dict[TopicPartition, int]:
        return self._edge_offsets(partitions, EARLIEST_TIMESTAMP, timeout)

    def end_offsets(self, partitions: Iterable[TopicPartition],
                    timeout: Timeout = None) -> dict[TopicPartition, int]:
        """The high watermark (last stable offset with ``read_committed``) of each partition."""
        return self._edge_offsets(partitions, LATEST_TIMESTAMP, timeout)

    def _edge_offsets(self, partitions: Iterable[TopicPartition], timestamp: int,
                      timeout: Timeout) -> dict[TopicPartition, int]:
        self._acquire_and_ensure_open()
        try:
            wanted = list(partitions)
            timer = self._timer(timeout)
            self._with_topics(wanted, timer)
            return self._offset_fetcher.beginning_or_end_offsets(wanted, timestamp, timer)
        finally:
            self._release()

    def partitions_for(self, topic: str, timeout: Timeout = None) -> list[Any]:
        """The topic's partitions (``PartitionInfo``), fetching metadata if needed; ``[]`` if unknown."""
        self._acquire_and_ensure_open()
        try:
            cluster = self._metadata.fetch()
            infos = cluster.partition_infos_for_topic(topic)
            if infos:
                return infos
            timer = self._timer(timeout)
            self._metadata.add_transient_topics([topic])
            while not self._metadata.fetch().partition_infos_for_topic(topic) and timer.not_expired():
                if not self._client.await_metadata_update(timer):
                    break
                self._metadata.maybe_throw_exception_for_topic(topic)
            return self._metadata.fetch().partition_infos_for_topic(topic)
        finally:
            self._release()

    def list_topics(self, timeout: Timeout = None) -> dict[str, list[Any]]:
        """Every topic the cluster reports (internal ones excluded unless configured), with partitions."""
        self._acquire_and_ensure_open()
        try:
            from strom.network.cluster import PartitionInfo
            from strom.network.metadata import metadata_request

            timer = self._timer(timeout)
            node = self._client.least_loaded_node()
            while node is None and timer.not_expired():
                self._client.await_metadata_update(timer)
                node = self._client.least_loaded_node()
            if node is None:
                raise KafkaTimeoutError("Timeout expired while fetching topic metadata")
            future = self._client.send(node, metadata_request(None, False), min_version=1)
            if not self._client.poll_future(future, timer):
                raise KafkaTimeoutError("Timeout expired while fetching topic metadata")
            if future.failed():
                raise future.exception
            include_internal = self._metadata.include_internal_topics
            out: dict[str, list[Any]] = {}
            nodes = {b.node_id: b for b in future.value.brokers}
            for topic in future.value.topics:
                if topic.error_code or topic.name is None or (topic.is_internal and not include_internal):
                    continue
                out[topic.name] = [PartitionInfo(topic.name, p.partition_index, _node(nodes.get(p.leader_id)))
                                   for p in sorted(topic.partitions, key=lambda p: p.partition_index)]
            return out
        finally:
            self._release()

    # ----------------------------------------------------------------------------------- pausing

    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        """Stop fetching from these (assigned) partitions until ``resume``."""
        self._acquire_and_ensure_open()
        try:
            for tp in partitions:
                log.debug("%sPausing partition %s", self._log_context, tp)
                self._subscriptions.pause(tp)
        finally:
            self._release()

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        self._acquire_and_ensure_open()
        try:
            for tp in partitions:
                log.debug("%sResuming partition %s", self._log_context, tp)
                self._subscriptions.resume(tp)
        finally:
            self._release()

    def paused(self) -> set[TopicPartition]:
        self._acquire_and_ensure_open()
        try:
            return self._subscriptions.paused_partitions()
        finally:
            self._release()

    def current_lag(self, partition: TopicPartition) -> int | None:
        """Lag from the last fetch response (``None`` if unknown); no request is sent."""
        self._acquire_and_ensure_open()
        try:
            return self._subscriptions.partition_lag(partition, self._fetcher.read_committed)
        finally:
            self._release()


def _node(broker: Any) -> Any:
    if broker is None:
        return None
    from strom.common.structs import Node

    return Node(broker.node_id, broker.host, broker.port, broker.rack)
