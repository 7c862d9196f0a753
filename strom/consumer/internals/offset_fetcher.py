"""ListOffsets: position resets and the ``offsets_for_times`` / ``beginning_offsets`` / ``end_offsets`` APIs.

Kafka counterpart: ``org.apache.kafka.clients.consumer.internals.OffsetFetcher`` (+ ``OffsetFetcherUtils``).

``reset_positions_if_needed`` is asynchronous: partitions awaiting a reset (``auto.offset.reset`` or
``seek_to_beginning/end``) are grouped by leader and a ListOffsets (timestamp -2 = earliest, -1 = latest) goes
to each; when the answer comes the position is set if the partition still awaits that reset. Failed partitions
are retried after ``retry.backoff.ms``; a non-retriable error is raised from the next call.

``validate_positions_if_needed`` (KIP-320) is asynchronous too: after each metadata update, a partition whose
leader changed and whose position has an epoch awaits validation; an OffsetsForLeaderEpoch (v3+, as a consumer:
replica id -1, our current leader epoch for fencing) goes to the leader with the position's epoch, and the answer
validates the position, moves it back to where the log diverged, or (``auto.offset.reset=none``) is raised from
the next call as :class:`~strom.consumer.errors.LogTruncationError`. A leader too old for v3 cannot be asked:
the position is used as it is (Kafka does the same).

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
from strom.consumer.errors import LogTruncationError
from strom.consumer.internals.consumer_network_client import ConsumerNetworkClient
from strom.consumer.internals.request_future import RequestFuture
from strom.consumer.internals.subscription_state import (
    FetchPosition,
    LeaderAndEpoch,
    LogTruncation,
    OffsetResetStrategy,
    SubscriptionState,
)
from strom.consumer.internals.timer import Timer
from strom.protocol.messages import ListOffsetsRequest, OffsetForLeaderEpochRequest

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


CONSUMER_REPLICA_ID = -1
OFFSET_FOR_LEADER_EPOCH_MIN_VERSION = 3  # the first with a replica id (a consumer's -1) and for non-replicas


def current_leader(metadata: Any, tp: TopicPartition) -> LeaderAndEpoch:
    """The leader (node id, epoch) ``metadata`` names for ``tp``; (None, None) when it knows none."""
    lookup = getattr(metadata, "current_leader", None)
    if lookup is None:
        return (None, None)
    node, epoch = lookup(tp)
    return (None if node is None else node.node_id, epoch)


def log_truncation_error(truncations: list[LogTruncation]) -> LogTruncationError:
    """Kafka's ``buildLogTruncationException``."""
    return LogTruncationError(
        f"Detected truncated partitions: [{', '.join(map(str, truncations))}]",
        {t.tp: t.fetch_position.offset for t in truncations},
        {t.tp: t.divergent_offset for t in truncations if t.divergent_offset is not None})


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
        self._cached_validation_error: BaseException | None = None
        self._metadata_version_validated = -1

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
            if self.subscriptions.maybe_seek_unvalidated(tp, found.offset, strategy, current_leader(self.metadata, tp)):
                log.info("Resetting offset for partition %s to position %d.", tp, found.offset)

    def _on_reset_failure(self, timestamps: dict[TopicPartition, int], exc: BaseException) -> None:
        self.subscriptions.request_failed(timestamps, self.time.milliseconds() + self.retry_backoff_ms)
        self.metadata.request_update()
        if not (isinstance(exc, KafkaError) and exc.retriable) and self._cached_reset_error is None:
            self._cached_reset_error = exc

    # ------------------------------------------------------------------------------- validation

    def validate_positions_if_needed(self) -> None:
        """Kafka's ``validatePositionsIfNeeded``: raise a truncation (or other non-retriable error) found by an
        earlier validation, mark positions whose leader changed, and ask each leader about its partitions."""
        error, self._cached_validation_error = self._cached_validation_error, None
        if error is not None:
            raise error
        self.validate_positions_on_metadata_change()
        positions = self.subscriptions.partitions_needing_validation(self.time.milliseconds())
        if positions:
            self._validate_positions_async(positions)

    def validate_positions_on_metadata_change(self) -> None:
        """After a metadata update, every assigned position is compared with the leader the metadata names."""
        version = self.metadata.update_version
        if version == self._metadata_version_validated:
            return
        self._metadata_version_validated = version
        for tp in self.subscriptions.assigned_partitions_list():
            self.subscriptions.maybe_validate_position_for_current_leader(tp, current_leader(self.metadata, tp))

    def _validate_positions_async(self, positions: dict[TopicPartition, FetchPosition]) -> None:
        by_node: dict[int, dict[TopicPartition, FetchPosition]] = {}
        for tp, position in positions.items():
            node_id = position.current_leader[0]
            if node_id is None:
                self.metadata.request_update()
                continue
            by_node.setdefault(node_id, {})[tp] = position
        cluster = self.metadata.fetch()
        now = self.time.milliseconds()
        for node_id, node_positions in by_node.items():
            node = cluster.node_by_id(node_id)
            if node is None:
                self.metadata.request_update()
                continue
            self.subscriptions.set_next_allowed_retry(node_positions, now + self.request_timeout_ms)
            request = OffsetForLeaderEpochRequest(replica_id=CONSUMER_REPLICA_ID, topics=[
                OffsetForLeaderEpochRequest.OffsetForLeaderTopic(topic=topic, partitions=[
                    OffsetForLeaderEpochRequest.OffsetForLeaderPartition(
                        partition=tp.partition, current_leader_epoch=pos.current_leader[1],
                        leader_epoch=pos.offset_epoch)
                    for tp, pos in node_positions.items() if tp.topic == topic])
                for topic in sorted({tp.topic for tp in node_positions})])
            future = self.client.send(node, request, min_version=OFFSET_FOR_LEADER_EPOCH_MIN_VERSION)
            future.add_listener(lambda response, ps=node_positions: self._on_validation_response(ps, response),
                                lambda exc, ps=node_positions: self._on_validation_failure(ps, exc))

    def _on_validation_response(self, positions: dict[TopicPartition, FetchPosition], response: Any) -> None:
        retry: set[TopicPartition] = set()
        unauthorized: set[str] = set()
        truncations: list[LogTruncation] = []
        answered: set[TopicPartition] = set()
        for topic in response.topics:
            for p in topic.partitions:
                tp = TopicPartition(topic.topic, p.partition)
                requested = positions.get(tp)
                if requested is None:
                    continue
                answered.add(tp)
                if p.error_code == ErrorCode.NONE:
                    truncation = self.subscriptions.maybe_complete_validation(tp, requested, p.leader_epoch,
                                                                             p.end_offset)
                    if truncation is not None:
                        truncations.append(truncation)
                elif p.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED:
                    unauthorized.add(tp.topic)
                else:
                    level = logging.DEBUG if p.error_code in _RETRY else logging.WARNING
                    log.log(level, "Attempt to validate the position of partition %s failed due to %s, retrying.",
                            tp, ec.ERROR_CLASSES.get(p.error_code, ec.UnknownServerError).name)
                    retry.add(tp)
        retry |= set(positions) - answered
        if retry:
            self.subscriptions.set_next_allowed_retry(retry, self.time.milliseconds() + self.retry_backoff_ms)
            self.metadata.request_update()
        if unauthorized:
            self._set_validation_error(ec.TopicAuthorizationFailedError(
                f"Not authorized to access topics: {sorted(unauthorized)}"))
        elif truncations:
            self._set_validation_error(log_truncation_error(truncations))

    def _on_validation_failure(self, positions: dict[TopicPartition, FetchPosition], exc: BaseException) -> None:
        if isinstance(exc, ec.UnsupportedVersionError):
            log.debug("Skipping validation of fetch offsets for partitions %s since the broker does not support "
                      "the required protocol version (introduced in Kafka 2.3)", sorted(positions))
            for tp in positions:
                self.subscriptions.complete_validation(tp)
            return
        self.subscriptions.request_failed(positions, self.time.milliseconds() + self.retry_backoff_ms)
        self.metadata.request_update()
        if not (isinstance(exc, KafkaError) and exc.retriable):
            self._set_validation_error(exc)

    def _set_validation_error(self, exc: BaseException) -> None:
        if self._cached_validation_error is None:
            self._cached_validation_error = exc

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
        epoch = current_leader(self.metadata, tp)[1]
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
