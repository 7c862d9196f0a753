"""Offset commits and committed-offset lookups for the consumer coordinator.

Kafka counterpart: the offset half of ``ConsumerCoordinator`` (``commitOffsetsSync``, ``commitOffsetsAsync``,
``maybeAutoCommitOffsetsAsync``, ``sendOffsetCommitRequest`` + ``OffsetCommitResponseHandler``,
``fetchCommittedOffsets`` + ``OffsetFetchResponseHandler``, ``refreshCommittedOffsetsIfNeeded``).

A commit carries the member's generation when partitions are auto-assigned (it fails with
``RebalanceInProgressError`` during a rebalance and ``CommitFailedError`` outside a group, as in Kafka) and
generation -1 / member "" for manual assignment. Async commit callbacks ``callback(offsets, exception)`` run
on the consumer's thread, in commit order, from the next ``poll`` / ``commit_*`` call.

Mixed into :class:`~strom.consumer.internals.consumer_coordinator.ConsumerCoordinator`; threading as there.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from strom.common import error_codes as ec
from strom.common.error_codes import ErrorCode
from strom.common.errors import KafkaError, for_code
from strom.common.structs import OffsetAndMetadata, TopicPartition
from strom.consumer.errors import CommitFailedError, RebalanceInProgressError
from strom.consumer.internals.abstract_coordinator import NO_GENERATION, Generation
from strom.consumer.internals.request_future import RequestFuture, coordinator_not_available
from strom.consumer.internals.timer import Timer
from strom.protocol.messages import OffsetCommitRequest, OffsetFetchRequest

__all__ = ["OffsetCommitsMixin", "OffsetCommitCallback", "RetriableCommitFailedError"]

log = logging.getLogger(__name__)

OffsetCommitCallback = Callable[[Mapping[TopicPartition, OffsetAndMetadata], BaseException | None], None]


class RetriableCommitFailedError(KafkaError):
    """An async commit failed with a retriable error (Kafka's ``RetriableCommitFailedException``)."""

    retriable = True


class OffsetCommitsMixin:
    """See the module docstring. Expects the attributes of ``ConsumerCoordinator``."""

    # set by ConsumerCoordinator.__init__
    completed_offset_commits: deque[tuple[OffsetCommitCallback | None, dict[TopicPartition, OffsetAndMetadata],
                                          BaseException | None]]

    def _init_offset_commits(self) -> None:
        self.completed_offset_commits = deque()
        self.pending_async_commits = 0
        self._pending_offset_fetch: tuple[frozenset[TopicPartition], Generation | None, RequestFuture] | None = None
        self.auto_commit_future: RequestFuture | None = None

    # ------------------------------------------------------------------------------------ commits

    def invoke_completed_offset_commit_callbacks(self) -> None:
        if self.async_commit_fenced:  # type: ignore[attr-defined]
            raise ec.FencedInstanceIdError("Get fenced exception for group.instance.id "
                                           f"{self.config.group_instance_id}")  # type: ignore[attr-defined]
        while self.completed_offset_commits:
            callback, offsets, exc = self.completed_offset_commits.popleft()
            if callback is None:
                continue
            try:
                callback(offsets, exc)
            except Exception:
                log.error("Offset commit callback raised", exc_info=True)

    def commit_offsets_sync(self, offsets: Mapping[TopicPartition, OffsetAndMetadata], timer: Timer) -> bool:
        """Commit and wait; ``False`` if ``timer`` expired first. Non-retriable errors raise."""
        self.invoke_completed_offset_commit_callbacks()
        if not offsets:
            return True
        while True:
            if self.coordinator_unknown() and not self.ensure_coordinator_ready(timer):  # type: ignore[attr-defined]
                return False
            future = self.send_offset_commit_request(offsets)
            self.client.poll_future(future, timer)  # type: ignore[attr-defined]
            # earlier async commits finish first: keep callbacks in commit order
            self.invoke_completed_offset_commit_callbacks()
            if future.succeeded():
                self.interceptors.on_commit(dict(offsets))  # type: ignore[attr-defined]
                return True
            if future.failed() and not future.is_retriable():
                raise future.exception
            timer.sleep(self.retry_backoff_ms)  # type: ignore[attr-defined]
            if timer.is_expired():
                return False

    def commit_offsets_async(self, offsets: Mapping[TopicPartition, OffsetAndMetadata],
                             callback: OffsetCommitCallback | None = None) -> RequestFuture:
        self.invoke_completed_offset_commit_callbacks()
        offsets = dict(offsets)
        if not self.coordinator_unknown():  # type: ignore[attr-defined]
            future = self._do_commit_offsets_async(offsets, callback)
        else:
            # chain behind the coordinator lookup (never retried: async commits must not reorder)
            self.pending_async_commits += 1
            future = RequestFuture()

            def found(_value: Any) -> None:
                self.pending_async_commits -= 1
                self._do_commit_offsets_async(offsets, callback).chain(future)

            def not_found(exc: BaseException) -> None:
                self.pending_async_commits -= 1
                error = RetriableCommitFailedError(f"Offset commit failed with a retriable exception: {exc}")
                self.completed_offset_commits.append((callback, offsets, error))
                future.raise_(error)

            self.lookup_coordinator().add_listener(found, not_found)  # type: ignore[attr-defined]
        self.client.poll_no_wakeup()  # type: ignore[attr-defined]  # get the request on the wire
        return future

    def _do_commit_offsets_async(self, offsets: dict[TopicPartition, OffsetAndMetadata],
                                 callback: OffsetCommitCallback | None) -> RequestFuture:
        future = self.send_offset_commit_request(offsets)

        def on_success(_value: Any) -> None:
            self.interceptors.on_commit(offsets)  # type: ignore[attr-defined]
            self.completed_offset_commits.append((callback, offsets, None))

        def on_failure(exc: BaseException) -> None:
            if isinstance(exc, KafkaError) and exc.retriable:
                exc = RetriableCommitFailedError(f"Offset commit failed with a retriable exception: {exc}")
            elif isinstance(exc, ec.FencedInstanceIdError):
                self.async_commit_fenced = True  # type: ignore[attr-defined]
            self.completed_offset_commits.append((callback, offsets, exc))

        future.add_listener(on_success, on_failure)
        return future

    def maybe_auto_commit_offsets_async(self, now: int) -> None:
        if not self.auto_commit_enabled or now < self.next_auto_commit_deadline:  # type: ignore[attr-defined]
            return
        self.next_auto_commit_deadline = now + self.auto_commit_interval_ms  # type: ignore[attr-defined]
        self.auto_commit_future = self._auto_commit_offsets_async()

    def _auto_commit_offsets_async(self) -> RequestFuture:
        offsets = self.subscriptions.all_consumed()  # type: ignore[attr-defined]

        def callback(committed: Mapping[TopicPartition, OffsetAndMetadata], exc: BaseException | None) -> None:
            if exc is None:
                log.debug("Completed asynchronous auto-commit of offsets %s", committed)
                return
            log.warning("Asynchronous auto-commit of offsets %s failed: %s", committed, exc)
            if isinstance(exc, KafkaError) and exc.retriable:
                self.next_auto_commit_deadline = min(  # type: ignore[attr-defined]
                    self.next_auto_commit_deadline,  # type: ignore[attr-defined]
                    self.time.milliseconds() + self.retry_backoff_ms)  # type: ignore[attr-defined]

        return self.commit_offsets_async(offsets, callback)

    def maybe_auto_commit_offsets_sync(self, timer: Timer) -> None:
        if not self.auto_commit_enabled:  # type: ignore[attr-defined]
            return
        offsets = self.subscriptions.all_consumed()  # type: ignore[attr-defined]
        try:
            if not self.commit_offsets_sync(offsets, timer):
                log.debug("Auto-commit of offsets %s timed out before completion", offsets)
        except KafkaError as exc:
            from strom.common.errors import InterruptError

            if isinstance(exc, InterruptError):
                raise
            log.warning("Synchronous auto-commit of offsets %s failed: %s", offsets, exc)

    def send_offset_commit_request(self, offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> RequestFuture:
        if not offsets:
            return RequestFuture.completed(None)
        coordinator = self.check_and_get_coordinator()  # type: ignore[attr-defined]
        if coordinator is None:
            return coordinator_not_available()
        by_topic: dict[str, list[Any]] = {}
        for tp, om in offsets.items():
            if om.offset < 0:
                return RequestFuture.failure(ValueError(f"Invalid offset: {om.offset}"))
            by_topic.setdefault(tp.topic, []).append(OffsetCommitRequest.OffsetCommitRequestPartition(
                partition_index=tp.partition, committed_offset=om.offset,
                committed_leader_epoch=-1 if om.leader_epoch is None else om.leader_epoch,
                commit_timestamp=-1, committed_metadata=om.metadata))
        if self.subscriptions.has_auto_assigned_partitions():  # type: ignore[attr-defined]
            generation = self.generation_if_stable()  # type: ignore[attr-defined]
            if generation is None:
                log.info("Failing OffsetCommit request since the consumer is not part of an active group")
                if self.rebalance_in_progress():  # type: ignore[attr-defined]
                    return RequestFuture.failure(RebalanceInProgressError(
                        "Offset commit cannot be completed since the consumer is undergoing a rebalance for auto "
                        "partition assignment. You can try completing the rebalance by calling poll() and then "
                        "retry the operation."))
                return RequestFuture.failure(CommitFailedError(
                    "Offset commit cannot be completed since the consumer is not part of an active group for auto "
                    "partition assignment; it is likely that the consumer was kicked out of the group."))
        else:
            generation = NO_GENERATION
        request = OffsetCommitRequest(
            group_id=self.config.group_id,  # type: ignore[attr-defined]
            generation_id_or_member_epoch=generation.generation_id, member_id=generation.member_id,
            group_instance_id=self.config.group_instance_id,  # type: ignore[attr-defined]
            retention_time_ms=-1,
            topics=[OffsetCommitRequest.OffsetCommitRequestTopic(name=t, partitions=ps) for t, ps in by_topic.items()])
        log.debug("Sending OffsetCommit request with %s to coordinator %s", dict(offsets), coordinator)
        sent_ms = self.time.milliseconds()  # type: ignore[attr-defined]
        return self.client.send(coordinator, request).compose(  # type: ignore[attr-defined]
            lambda response, future: self._handle_offset_commit(response, future, generation, sent_ms))

    def _handle_offset_commit(self, response: Any, future: RequestFuture, generation: Generation,
                              sent_ms: int | None = None) -> None:
        if sent_ms is not None:  # commit-latency, commit-rate (Kafka records every response)
            now = self.time.milliseconds()  # type: ignore[attr-defined]
            self.sensors.commit.record(now - sent_ms, now)  # type: ignore[attr-defined]
        unauthorized: set[str] = set()
        for topic in response.topics:
            for p in topic.partitions:
                error = p.error_code
                if error == ErrorCode.NONE:
                    continue
                exc = for_code(error)
                log.debug("Offset commit for %s-%d failed: %s", topic.name, p.partition_index, exc.name)
                if error == ErrorCode.TOPIC_AUTHORIZATION_FAILED:
                    unauthorized.add(topic.name)
                    continue
                if error in (ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR,
                             ErrorCode.REQUEST_TIMED_OUT):
                    self.mark_coordinator_unknown(exc.name)  # type: ignore[attr-defined]
                elif error == ErrorCode.REBALANCE_IN_PROGRESS:
                    self.request_rejoin("offset commit failed since group is already rebalancing")  # type: ignore
                    exc = RebalanceInProgressError(
                        "Offset commit cannot be completed since the consumer group is executing a rebalance at "
                        "the moment. You can try completing the rebalance by calling poll() and then retry commit "
                        "again")
                elif error in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION):
                    with self.lock:  # type: ignore[attr-defined]
                        if self.generation == generation:  # type: ignore[attr-defined]
                            self.reset_generation_on_response_error("OffsetCommit", error)  # type: ignore
                    exc = CommitFailedError()
                elif error == ErrorCode.FENCED_INSTANCE_ID:
                    log.info("OffsetCommit failed: group.instance.id is fenced")
                future.raise_(exc)
                return
        if unauthorized:
            future.raise_(ec.TopicAuthorizationFailedError(f"Not authorized to access topics: {sorted(unauthorized)}"))
        else:
            future.complete(None)

    # ---------------------------------------------------------------------------- committed offsets

    def fetch_committed_offsets(self, partitions: Iterable[TopicPartition],
                                timer: Timer) -> dict[TopicPartition, OffsetAndMetadata] | None:
        """The committed offsets (partitions without one are absent); ``None`` if ``timer`` expired."""
        wanted = frozenset(partitions)
        if not wanted:
            return {}
        generation = self.generation_if_stable()  # type: ignore[attr-defined]
        pending = self._pending_offset_fetch
        if pending is not None and (pending[0] != wanted or pending[1] != generation):
            self._pending_offset_fetch = pending = None
        while True:
            if not self.ensure_coordinator_ready(timer):  # type: ignore[attr-defined]
                return None
            if pending is None:
                pending = (wanted, generation, self._send_offset_fetch_request(wanted))
                self._pending_offset_fetch = pending
            future = pending[2]
            self.client.poll_future(future, timer)  # type: ignore[attr-defined]
            if not future.is_done():
                return None
            self._pending_offset_fetch = pending = None
            if future.succeeded():
                return dict(future.value)
            if not future.is_retriable():
                raise future.exception
            timer.sleep(self.retry_backoff_ms)  # type: ignore[attr-defined]
            if timer.is_expired():
                return None

    def _send_offset_fetch_request(self, partitions: frozenset[TopicPartition]) -> RequestFuture:
        coordinator = self.check_and_get_coordinator()  # type: ignore[attr-defined]
        if coordinator is None:
            return coordinator_not_available()
        by_topic: dict[str, list[int]] = {}
        for tp in sorted(partitions):
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        group_id = self.config.group_id  # type: ignore[attr-defined]
        request = OffsetFetchRequest(
            group_id=group_id, require_stable=True,
            topics=[OffsetFetchRequest.OffsetFetchRequestTopic(name=t, partition_indexes=ps) for t, ps in by_topic.items()],
            groups=[OffsetFetchRequest.OffsetFetchRequestGroup(group_id=group_id, topics=[
                OffsetFetchRequest.OffsetFetchRequestTopics(name=t, partition_indexes=ps) for t, ps in by_topic.items()])])
        # v1+: offsets stored in Kafka (v0 reads ZooKeeper-era offsets)
        return self.client.send(coordinator, request, min_version=1).compose(self._handle_offset_fetch)  # type: ignore

    def _handle_offset_fetch(self, response: Any, future: RequestFuture) -> None:
        if response.groups:
            group = response.groups[0]
            error, topics = group.error_code, group.topics
        else:
            error, topics = getattr(response, "error_code", 0), response.topics
        if error != ErrorCode.NONE:
            exc = for_code(error)
            if error == ErrorCode.NOT_COORDINATOR:
                self.mark_coordinator_unknown(exc.name)  # type: ignore[attr-defined]
            future.raise_(exc)
            return
        offsets: dict[TopicPartition, OffsetAndMetadata] = {}
        unstable: set[TopicPartition] = set()
        unauthorized: set[str] = set()
        for topic in topics:
            for p in topic.partitions:
                tp = TopicPartition(topic.name, p.partition_index)
                if p.error_code != ErrorCode.NONE:
                    if p.error_code == ErrorCode.UNSTABLE_OFFSET_COMMIT:
                        unstable.add(tp)
                    elif p.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED:
                        unauthorized.add(topic.name)
                    elif p.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                        log.info("OffsetFetch: topic or partition %s does not exist", tp)
                    else:
                        future.raise_(for_code(p.error_code))
                        return
                elif p.committed_offset >= 0:
                    epoch = getattr(p, "committed_leader_epoch", -1)
                    offsets[tp] = OffsetAndMetadata(p.committed_offset, p.metadata or "",
                                                    epoch if epoch is not None and epoch >= 0 else None)
        if unauthorized:
            future.raise_(ec.TopicAuthorizationFailedError(f"Not authorized to access topics: {sorted(unauthorized)}"))
        elif unstable:
            future.raise_(ec.UnstableOffsetCommitError(f"There are unstable offsets for the requested topic "
                                                       f"partitions {sorted(unstable)}"))
        else:
            future.complete(offsets)

    def refresh_committed_offsets_if_needed(self, timer: Timer) -> bool:
        """Positions of partitions without one come from their committed offsets; ``False`` on timeout."""
        subscriptions = self.subscriptions  # type: ignore[attr-defined]
        initializing = subscriptions.initializing_partitions()
        offsets = self.fetch_committed_offsets(initializing, timer)
        if offsets is None:
            return False
        for tp, om in offsets.items():
            if tp in initializing and subscriptions.is_assigned(tp):
                log.info("Setting offset for partition %s to the committed offset %s", tp, om.offset)
                subscriptions.seek(tp, om.offset, om.leader_epoch)
        return True
