"""ListOffsets: position resets and the ``offsets_for_times`` / ``beginning_offsets`` / ``end_offsets`` APIs.

Kafka counterpart: ``org.apache.kafka.clients.consumer.internals.OffsetFetcher`` (+ ``OffsetFetcherUtils``).

``reset_positions_if_needed`` is asynchronous: partitions awaiting a reset (``auto.offset.reset`` or
``seek_to_beginning/end``) are grouped by leader and a ListOffsets (timestamp -2 = earliest, -1 = latest) goes
to each; when the answer comes the position is set if the partition still awaits that reset. Failed partitions
are retried after ``retry.backoff.ms``; a non-retriable error is raised from the next call.

``fetch_offsets_by_times`` is blocking: it retries retriable errors (refreshing metadata for leadership
errors) until every partition has an answer or the timer expires (:class:`KafkaTimeoutError`). ListOffsets
v1..v8 is used; ``read_committed`` asks for the last stable offset as "latest".

Threading: the consumer's thread; response listeners may run on the heartbeat thread but only touch the
(thread-safe) subscription state.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from strom.common import error_codes as ec
from strom.common.error_codes import ErrorCode
from strom.common.errors import KafkaError, KafkaTimeoutError
from strom.common.structs import Node, TopicPartition
from strom.common.time import Time
from strom.consumer.consumer_records import OffsetAndTimestamp
from strom.consumer.internals.consumer_network_client import ConsumerNetworkClient
from strom.consumer.internals.request_future import RequestFuture
from strom.consumer.internals.subscription_state import OffsetResetStrategy, SubscriptionState
from strom.consumer.internals.timer import Timer
from strom.protocol.messages import ListOffsetsRequest

__all__ = ["OffsetFetcher", "ListOffsetResult", "EARLIEST_TIMESTAMP", "LATEST_TIMESTAMP"]

log = logging.getLogger(__name__)

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
LIST_OFFSETS_MIN_VERSION = 1
LIST_OFFSETS_MAX_VERSION = 8
_RETRY = frozenset({
    ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.REPLICA_NOT_AVAILABLE, ErrorCode.KAFKA_STORAGE_ERROR,
    ErrorCode.OFFSET_NOT_AVAILABLE, ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.FENCED_LEADER_EPOCH,
    ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
})


@dataclass(slots=True)
class ListOffsetResult:
    """Offsets found (``None`` = no offset for that timestamp) and partitions to retry."""

    fetched: dict[TopicPartition, OffsetAndTimestamp | None] = field(default_factory=dict)
    to_retry: set[TopicPartition] = field(default_factory=set)


class OffsetFetcher:
    """Kafka's ``OffsetFetcher`` (see the module docstring)."""

    def __init__(self, client: ConsumerNetworkClient, metadata: Any, subscriptions: SubscriptionState, time: Time,
                 retry_backoff_ms: int, request_timeout_ms: int, read_committed: bool = False) -> None:
        self.client = client
        self.metadata = metadata
        self.subscriptions = subscriptions
        self.time = time
        self.retry_backoff_ms = retry_backoff_ms
        self.request_timeout_ms = request_timeout_ms
        self.read_committed = read_committed
        self._cached_reset_error: BaseException | None = None

    # ------------------------------------------------------------------------------------- resets

    def reset_positions_if_needed(self) -> None:
        error, self._cached_reset_error = self._cached_reset_error, None
        if error is not None:
            raise error
        now = self.time.milliseconds()
        timestamps = {}
        for tp in self.subscriptions.partitions_needing_reset(now):
            strategy = self.subscriptions.reset_strategy(tp)
            if strategy is None or strategy is OffsetResetStrategy.NONE:
                from strom.consumer.errors import NoOffsetForPartitionError

                raise NoOffsetForPartitionError(tp)
            timestamps[tp] = strategy.timestamp
        if not timestamps:
            return
        for node, node_timestamps in self._group_by_leader(timestamps, ListOffsetResult()).items():
            self.subscriptions.set_next_allowed_retry(node_timestamps, now + self.request_timeout_ms)
            future = self._send_list_offsets_request(node, node_timestamps)
            future.add_listener(lambda result, ts=node_timestamps: self._on_reset_success(ts, result),
                                lambda exc, ts=node_timestamps: self._on_reset_failure(ts, exc))

    def _on_reset_success(self, timestamps: dict[TopicPartition, int], result: ListOffsetResult) -> None:
        if result.to_retry:
            self.subscriptions.request_failed(result.to_retry, self.time.milliseconds() + self.retry_backoff_ms)
            self.metadata.request_update()
        for tp, found in result.fetched.items():
            strategy = OffsetResetStrategy.EARLIEST if timestamps[tp] == EARLIEST_TIMESTAMP else OffsetResetStrategy.LATEST
            if found is None:
                continue
            if self.subscriptions.maybe_seek_unvalidated(tp, found.offset, strategy, found.leader_epoch):
                log.info("Resetting offset for partition %s to position %d.", tp, found.offset)

    def _on_reset_failure(self, timestamps: dict[TopicPartition, int], exc: BaseException) -> None:
        self.subscriptions.request_failed(timestamps, self.time.milliseconds() + self.retry_backoff_ms)
        self.metadata.request_update()
        if not (isinstance(exc, KafkaError) and exc.retriable) and self._cached_reset_error is None:
            self._cached_reset_error = exc

    # ------------------------------------------------------------------------------ blocking lookups

    def fetch_offsets_by_times(self, timestamps: Mapping[TopicPartition, int],
                               timer: Timer) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        result: dict[TopicPartition, OffsetAndTimestamp | None] = {}
        remaining = dict(timestamps)
        if not remaining:
            return result
        while True:
            future = self._send_list_offsets_requests(remaining)
            if not self.client.poll_future(future, timer):
                break
            if future.succeeded():
                value: ListOffsetResult = future.value
                result.update(value.fetched)
                remaining = {tp: ts for tp, ts in remaining.items() if tp in value.to_retry}
                if not remaining:
                    return result
            elif not future.is_retriable():
                raise future.exception
            if self.metadata.update_requested():
                self.client.await_metadata_update(timer)
            else:
                timer.sleep(self.retry_backoff_ms)
            if timer.is_expired():
                break
        raise KafkaTimeoutError(f"Failed to get offsets by times in {timer.elapsed_ms()}ms")

    def offsets_for_times(self, timestamps: Mapping[TopicPartition, int],
                          timer: Timer) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        for tp, ts in timestamps.items():
            if ts < 0:
                raise ValueError(f"The target time for partition {tp} is {ts}. The target time cannot be negative.")
        found = self.fetch_offsets_by_times(timestamps, timer)
        return {tp: found.get(tp) for tp in timestamps}

    def beginning_or_end_offsets(self, partitions: list[TopicPartition], timestamp: int,
                                 timer: Timer) -> dict[TopicPartition, int]:
        found = self.fetch_offsets_by_times(dict.fromkeys(partitions, timestamp), timer)
        return {tp: v.offset for tp, v in found.items() if v is not None}

    # ------------------------------------------------------------------------------------ requests

    def _group_by_leader(self, timestamps: Mapping[TopicPartition, int],
                         result: ListOffsetResult) -> dict[Node, dict[TopicPartition, int]]:
        cluster = self.metadata.fetch()
        out: dict[Node, dict[TopicPartition, int]] = {}
        for tp, ts in timestamps.items():
            leader = cluster.leader_for(tp)
            if leader is None:
                log.debug("Leader for partition %s is unknown for fetching offset %d", tp, ts)
                self.metadata.request_update()
                result.to_retry.add(tp)
            elif self.client.is_unavailable(leader):
                result.to_retry.add(tp)
            else:
                out.setdefault(leader, {})[tp] = ts
        return out

    def _send_list_offsets_requests(self, timestamps: Mapping[TopicPartition, int]) -> RequestFuture:
        combined = ListOffsetResult()
        by_node = self._group_by_leader(timestamps, combined)
        out = RequestFuture()
        if not by_node:
            out.complete(combined)
            return out
        left = [len(by_node)]

        def done() -> None:
            left[0] -= 1
            if left[0] == 0 and not out.is_done():
                out.complete(combined)

        def on_success(result: ListOffsetResult) -> None:
            combined.fetched.update(result.fetched)
            combined.to_retry |= result.to_retry
            done()

        def on_failure(exc: BaseException) -> None:
            if not out.is_done():
                out.raise_(exc)

        for node, node_timestamps in by_node.items():
            self._send_list_offsets_request(node, node_timestamps).add_listener(on_success, on_failure)
        return out

    def _leader_epoch(self, tp: TopicPartition) -> int:
        """Our metadata's leader epoch (KIP-320 fencing: a stale leader answers FENCED_LEADER_EPOCH); -1 if none."""
        current_leader = getattr(self.metadata, "current_leader", None)
        epoch = current_leader(tp)[1] if current_leader is not None else None
        return -1 if epoch is None else epoch

    def _send_list_offsets_request(self, node: Node, timestamps: Mapping[TopicPartition, int]) -> RequestFuture:
        topics: dict[str, list[Any]] = {}
        for tp, ts in timestamps.items():
            topics.setdefault(tp.topic, []).append(ListOffsetsRequest.ListOffsetsPartition(
                partition_index=tp.partition, current_leader_epoch=self._leader_epoch(tp), timestamp=ts,
                max_num_offsets=1))
        request = ListOffsetsRequest(
            replica_id=-1, isolation_level=1 if self.read_committed else 0,
            topics=[ListOffsetsRequest.ListOffsetsTopic(name=t, partitions=ps) for t, ps in topics.items()],
            timeout_ms=self.request_timeout_ms)
        min_version = 2 if self.read_committed else LIST_OFFSETS_MIN_VERSION
        return self.client.send(node, request, min_version=min_version, max_version=LIST_OFFSETS_MAX_VERSION).compose(
            lambda response, future: self._handle_list_offsets(timestamps, response, future))

    def _handle_list_offsets(self, timestamps: Mapping[TopicPartition, int], response: Any,
                             future: RequestFuture) -> None:
        result = ListOffsetResult()
        unauthorized: set[str] = set()
        for topic in response.topics:
            for p in topic.partitions:
                tp = TopicPartition(topic.name, p.partition_index)
                if tp not in timestamps:
                    continue
                error = p.error_code
                if error == ErrorCode.NONE:
                    if p.offset < 0:
                        result.fetched[tp] = None  # no offset for the timestamp
                    else:
                        epoch = getattr(p, "leader_epoch", -1)
                        result.fetched[tp] = OffsetAndTimestamp(p.offset, p.timestamp,
                                                                epoch if epoch is not None and epoch >= 0 else None)
                elif error == ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT:
                    log.debug("Cannot search by timestamp for partition %s because the message format version is "
                              "before 0.10.0", tp)
                    result.fetched[tp] = None
                elif error == ErrorCode.TOPIC_AUTHORIZATION_FAILED:
                    unauthorized.add(tp.topic)
                else:
                    level = logging.DEBUG if error in _RETRY else logging.WARNING
                    log.log(level, "Attempt to fetch offsets for partition %s failed due to %s, retrying.", tp,
                            ec.ERROR_CLASSES.get(error, ec.UnknownServerError).name)
                    result.to_retry.add(tp)
        if unauthorized:
            future.raise_(ec.TopicAuthorizationFailedError(f"Not authorized to access topics: {sorted(unauthorized)}"))
        else:
            result.to_retry |= {tp for tp in timestamps if tp not in result.fetched and tp not in result.to_retry}
            future.complete(result)
