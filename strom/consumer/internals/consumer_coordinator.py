"""The consumer's group coordinator client: subscriptions, assignment, rebalance callbacks, offset commits.

Kafka counterpart: ``org.apache.kafka.clients.consumer.internals.ConsumerCoordinator`` (classic protocol),
one class as in Kafka: the rebalance callbacks and the commits share the generation, the coordinator
connection and the auto-commit deadline.

* Rebalance protocol: COOPERATIVE when every configured assignor supports it, else EAGER.
* ``on_join_prepare``: with auto-commit, commit the consumed offsets (async, waiting up to the rebalance
  timeout); then EAGER revokes everything, COOPERATIVE only partitions of topics no longer subscribed; a
  reset generation reports the partitions as *lost* instead.
* ``perform_assignment`` (leader): decode every member's subscription, make sure metadata covers all their
  topics, run the chosen assignor, and for COOPERATIVE check that no partition goes straight from one owner
  to another (``validate_cooperative_assignment``).
* ``on_join_complete``: EAGER assigns everything received; COOPERATIVE revokes what it lost first (then
  rejoins) and reports only the added partitions as assigned.
* The leader rejoins when the partition counts of the group's topics change; every member rejoins when its
  subscription changes (pattern subscriptions are re-evaluated on each metadata update).

* Offset commits (``commitOffsetsSync``, ``commitOffsetsAsync``, ``maybeAutoCommitOffsetsAsync``,
  ``sendOffsetCommitRequest`` + its response handler) carry the member's generation when partitions are
  auto-assigned (a commit fails with ``RebalanceInProgressError`` during a rebalance and ``CommitFailedError``
  outside a group, as in Kafka) and generation -1 / member "" for manual assignment. Async commit callbacks
  ``callback(offsets, exception)`` run on the consumer's thread, in commit order, from the next ``poll`` /
  ``commit_*`` call.
* Committed offsets (``fetchCommittedOffsets`` + its response handler, ``refreshCommittedOffsetsIfNeeded``):
  one OffsetFetch in flight at a time, reused while the partitions and the generation stay the same.

Listener callbacks run on the consumer's thread; an exception from a callback is raised from ``poll`` once
the rebalance step is done. Threading: see :mod:`abstract_coordinator`.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from strom.common import error_codes as ec
from strom.common.error_codes import ErrorCode
from strom.common.errors import IllegalStateError, InterruptError, KafkaError, for_code
from strom.common.structs import OffsetAndMetadata, TopicPartition
from strom.common.time import Time
from strom.consumer.assignors.abstract import (
    ConsumerGroupMetadata,
    GroupSubscription,
    RebalanceProtocol,
    Subscription,
)
from strom.consumer.errors import CommitFailedError, RebalanceInProgressError, RetriableCommitFailedError
from strom.consumer.interceptors import ConsumerInterceptors
from strom.consumer.internals.abstract_coordinator import (
    NO_GENERATION,
    AbstractCoordinator,
    Generation,
    GroupRebalanceConfig,
    MemberState,
)
from strom.consumer.internals.consumer_network_client import ConsumerNetworkClient
from strom.consumer.internals.consumer_protocol import (
    deserialize_assignment,
    deserialize_subscription,
    serialize_assignment,
    serialize_subscription,
)
from strom.consumer.internals.offset_fetcher import current_leader
from strom.consumer.internals.request_future import RequestFuture, coordinator_not_available
from strom.consumer.internals.subscription_state import SubscriptionState
from strom.consumer.internals.timer import Timer
from strom.metrics import Metrics
from strom.protocol.messages import OffsetCommitRequest, OffsetFetchRequest

__all__ = ["ConsumerCoordinator", "OffsetCommitCallback", "RetriableCommitFailedError"]

log = logging.getLogger(__name__)

OffsetCommitCallback = Callable[[Mapping[TopicPartition, OffsetAndMetadata], BaseException | None], None]


class ConsumerCoordinator(AbstractCoordinator):
    """Kafka's ``ConsumerCoordinator`` (see the module docstring)."""

    def __init__(self, config: GroupRebalanceConfig, client: ConsumerNetworkClient, time: Time,
                 subscriptions: SubscriptionState, metadata: Any, assignors: list[Any], *,
                 auto_commit_enabled: bool = True, auto_commit_interval_ms: int = 5000,
                 interceptors: ConsumerInterceptors | None = None, client_rack: str | None = None,
                 client_id: str = "", metrics: Metrics | None = None) -> None:
        super().__init__(config, client, time, client_id, metrics)
        self.subscriptions = subscriptions
        self.metadata_source = metadata
        self.assignors = list(assignors)
        self.auto_commit_enabled = auto_commit_enabled
        self.auto_commit_interval_ms = auto_commit_interval_ms
        self.next_auto_commit_deadline = time.milliseconds() + auto_commit_interval_ms
        self.interceptors = interceptors or ConsumerInterceptors()
        self.client_rack = client_rack or None
        self.protocol = self._common_protocol(self.assignors)
        self.joined_subscription: set[str] | None = None
        self.assignment_snapshot: dict[str, int] | None = None
        self.metadata_snapshot: dict[str, int] = {}
        self._metadata_version_seen = -1
        self.is_leader = False
        self.async_commit_fenced = False
        self._join_prepare_deadline: int | None = None
        # offset commits: async commit callbacks wait here until the consumer's thread runs them, in order
        self.completed_offset_commits: deque[tuple[OffsetCommitCallback | None,
                                                   dict[TopicPartition, OffsetAndMetadata],
                                                   BaseException | None]] = deque()
        self.pending_async_commits = 0
        self._pending_offset_fetch: tuple[frozenset[TopicPartition], Generation | None, RequestFuture] | None = None
        self.auto_commit_future: RequestFuture | None = None

    @staticmethod
    def _common_protocol(assignors: list[Any]) -> RebalanceProtocol | None:
        if not assignors:
            return None
        common = set(assignors[0].supported_protocols())
        for assignor in assignors[1:]:
            common &= set(assignor.supported_protocols())
        if not common:
            raise IllegalStateError("Specified assignors " + str([a.name() for a in assignors])
                                    + " do not have commonly supported rebalance protocol")
        return max(common)  # COOPERATIVE (1) over EAGER (0)

    def group_metadata(self) -> ConsumerGroupMetadata:
        generation = self.generation
        return ConsumerGroupMetadata(self.config.group_id, generation.generation_id, generation.member_id,
                                     self.config.group_instance_id)

    def _assignor(self, name: str) -> Any:
        for assignor in self.assignors:
            if assignor.name() == name:
                return assignor
        raise IllegalStateError(f"Coordinator selected invalid assignment protocol: {name}")

    # ------------------------------------------------------------------------------------ metadata

    def maybe_update_subscription_metadata(self) -> None:
        metadata = self.metadata_source
        version = metadata.update_version
        if version == self._metadata_version_seen:
            return
        self._metadata_version_seen = version
        cluster = metadata.fetch()
        if self.subscriptions.has_pattern_subscription():
            exclude_internal = getattr(metadata, "include_internal_topics", False) is False
            topics = {t for t in cluster.topics() if self.subscriptions.matches_subscribed_pattern(t)
                      and not (exclude_internal and t in cluster.internal_topics)}
            if self.subscriptions.subscribe_from_pattern(topics):
                metadata.request_update_for_new_topics()
        self.metadata_snapshot = self._partition_counts(cluster, self.subscriptions.metadata_topics())

    @staticmethod
    def _partition_counts(cluster: Any, topics: Iterable[str]) -> dict[str, int]:
        out = {}
        for topic in topics:
            count = cluster.partition_count_for_topic(topic)
            if count:
                out[topic] = count
        return out

    def rejoin_needed_or_pending(self) -> bool:
        if not self.subscriptions.has_auto_assigned_partitions():
            return False
        if self.assignment_snapshot is not None and self.assignment_snapshot != self.metadata_snapshot:
            self.request_rejoin(f"cached metadata has changed from {self.assignment_snapshot} at the beginning "
                                f"of the rebalance to {self.metadata_snapshot}")
            return True
        if self.joined_subscription is not None and self.joined_subscription != self.subscriptions.subscription():
            self.request_rejoin(f"subscription has changed from {sorted(self.joined_subscription)} to "
                                f"{sorted(self.subscriptions.subscription())}")
            return True
        return super().rejoin_needed_or_pending()

    # ------------------------------------------------------------------------------------------ poll

    def poll(self, timer: Timer, wait_for_join_group: bool = True) -> bool:
        """Drive the group protocol from ``KafkaConsumer.poll``; ``False`` when ``timer`` expired first."""
        self.maybe_update_subscription_metadata()
        self.invoke_completed_offset_commit_callbacks()
        if self.subscriptions.has_auto_assigned_partitions():
            if self.protocol is None:
                raise IllegalStateError("User configured partition.assignment.strategy to include no assignors")
            self.poll_heartbeat(timer.current_ms)
            if self.coordinator_unknown() and not self.ensure_coordinator_ready(timer):
                return False
            if self.rejoin_needed_or_pending():
                if self.subscriptions.has_pattern_subscription():
                    # match the pattern against fresh metadata before joining
                    if self.metadata_source.time_to_allow_update(timer.current_ms) == 0:
                        self.metadata_source.request_update()
                    if not self.client.await_metadata_update(timer):
                        return False
                    self.maybe_update_subscription_metadata()
                join_timer = timer if wait_for_join_group else Timer(self.time, 0)
                if not self.ensure_active_group(join_timer):
                    timer.update()
                    return False
        elif self.metadata_source.update_requested() and not self.client.has_ready_nodes(timer.current_ms):
            self.client.await_metadata_update(timer)
        self.maybe_auto_commit_offsets_async(timer.current_ms)
        return True

    def time_to_next_poll(self, now: int) -> int:
        """How long ``KafkaConsumer.poll`` may block before the coordinator needs attention."""
        heartbeat = self.time_to_next_heartbeat(now)
        if not self.auto_commit_enabled or (self.subscriptions.has_auto_assigned_partitions()
                                            and self.state is not MemberState.STABLE):
            return heartbeat  # nothing to auto-commit while (re)joining: do not spin on an overdue commit
        return min(max(0, self.next_auto_commit_deadline - now), heartbeat)

    # -------------------------------------------------------------------------------- join protocol

    def metadata(self) -> list[tuple[str, bytes]]:
        joined = self.subscriptions.subscription()
        self.joined_subscription = set(joined)
        owned = self.subscriptions.assigned_partitions_list() if self.protocol is RebalanceProtocol.COOPERATIVE \
            else []
        generation = self.generation.generation_id
        out = []
        for assignor in self.assignors:
            sub = Subscription(sorted(joined), assignor.subscription_user_data(set(joined)), owned,
                               generation if generation >= 0 else None, self.client_rack)
            out.append((assignor.name(), serialize_subscription(sub)))
        return out

    def on_join_prepare(self, timer: Timer, generation: int, member_id: str) -> bool:
        log.debug("Executing onJoinPrepare with generation %d and memberId %s", generation, member_id)
        if self.auto_commit_enabled:
            if self._join_prepare_deadline is None:
                self._join_prepare_deadline = self.time.milliseconds() + self.config.rebalance_timeout_ms
            if self.auto_commit_future is None:
                self.auto_commit_future = self._auto_commit_offsets_async()
            future = self.auto_commit_future
            deadline = Timer(self.time, min(timer.remaining_ms(),
                                            max(0, self._join_prepare_deadline - self.time.milliseconds())))
            self.client.poll_future(future, deadline)
            timer.update()
            expired = self.time.milliseconds() >= self._join_prepare_deadline
            if not expired and (not future.is_done() or (future.failed() and future.is_retriable())):
                if future.is_done():
                    self.auto_commit_future = None  # retry the commit on the next attempt
                return False
            if expired:
                log.error("Asynchronous auto-commit of offsets failed: joinPrepare timeout. Will continue to join")
            self.auto_commit_future = None
            self._join_prepare_deadline = None
        error: BaseException | None = None
        if generation == NO_GENERATION.generation_id or member_id == NO_GENERATION.member_id:
            lost = self.subscriptions.assigned_partitions()
            if lost:
                log.info("Giving away all assigned partitions as lost since generation/memberID has been reset, "
                         "indicating that consumer is in old state or no longer part of the group")
                error = self.invoke_partitions_lost(lost)
                self.subscriptions.assign_from_subscribed([])
        elif self.protocol is RebalanceProtocol.EAGER:
            revoked = self.subscriptions.assigned_partitions()
            error = self.invoke_partitions_revoked(revoked)
            self.subscriptions.assign_from_subscribed([])
        else:
            owned = self.subscriptions.assigned_partitions()
            subscribed = self.subscriptions.subscription()
            revoked = {tp for tp in owned if tp.topic not in subscribed}
            if revoked:
                error = self.invoke_partitions_revoked(revoked)
                self.subscriptions.assign_from_subscribed(owned - revoked)
        self.is_leader = False
        self.subscriptions.reset_group_subscription()
        if error is not None:
            raise KafkaError(f"User rebalance callback throws an error: {error}") from error
        return True

    def perform_assignment(self, leader_id: str, protocol: str, members: list[Any],
                           skip_assignment: bool) -> dict[str, bytes]:
        assignor = self._assignor(protocol)
        subscriptions = {}
        all_topics: set[str] = set()
        for member in members:
            sub = deserialize_subscription(member.metadata, member.group_instance_id)
            subscriptions[member.member_id] = sub
            all_topics.update(sub.topics)
        self.is_leader = True
        if skip_assignment:
            return {}
        # watch every member's topics; fetch metadata for the ones we did not know
        if self.subscriptions.group_subscribe(all_topics):
            self.metadata_source.request_update_for_new_topics()
            self.client.await_metadata_update(Timer(self.time, self.config.request_timeout_ms))
        cluster = self.metadata_source.fetch()
        self.assignment_snapshot = self._partition_counts(cluster, all_topics)
        self.metadata_snapshot = dict(self.assignment_snapshot)
        self._metadata_version_seen = self.metadata_source.update_version
        log.debug("Performing assignment using strategy %s with subscriptions %s", protocol, subscriptions)
        result = assignor.assign_group(self.assignment_snapshot, GroupSubscription(subscriptions)).assignments
        if self.protocol is RebalanceProtocol.COOPERATIVE:
            self.validate_cooperative_assignment({m: s.owned_partitions for m, s in subscriptions.items()},
                                                 {m: a.partitions for m, a in result.items()})
        log.info("Finished assignment for group at generation %d: %s", self.generation.generation_id,
                 {m: a.partitions for m, a in result.items()})
        return {m: serialize_assignment(a) for m, a in result.items()}

    @staticmethod
    def validate_cooperative_assignment(owned: dict[str, list[TopicPartition]],
                                        assigned: dict[str, list[TopicPartition]]) -> None:
        """No partition may be added to one member while another still owns it (KIP-429)."""
        added: set[TopicPartition] = set()
        revoked: set[TopicPartition] = set()
        for member, parts in assigned.items():
            mine = set(owned.get(member, ()))
            added |= set(parts) - mine
            revoked |= mine - set(parts)
        both = added & revoked
        if both:
            raise IllegalStateError(f"Assignor supporting the COOPERATIVE protocol violates its requirements: "
                                    f"partitions {sorted(both)} are revoked and added in the same rebalance")

    def on_join_complete(self, generation: int, member_id: str, protocol: str, assignment: bytes) -> None:
        log.debug("Executing onJoinComplete with generation %d and memberId %s", generation, member_id)
        if not self.is_leader:
            self.assignment_snapshot = None
        assignor = self._assignor(protocol)
        group_metadata = ConsumerGroupMetadata(self.config.group_id, generation, member_id,
                                               self.config.group_instance_id)
        decoded = deserialize_assignment(assignment)
        assigned = set(decoded.partitions)
        if not all(self.subscriptions._is_subscribed_topic(tp.topic) for tp in assigned):
            self.request_rejoin(f"received an assignment {sorted(assigned)} that does not match the subscription; "
                                f"it is likely that the subscription has changed since we joined the group")
            return
        owned = self.subscriptions.assigned_partitions()
        added = assigned - owned
        revoked = owned - assigned
        log.info("Notifying assignor about the new assignment %s (added %s, revoked %s)", sorted(assigned),
                 sorted(added), sorted(revoked))
        error: BaseException | None = None
        if self.protocol is RebalanceProtocol.COOPERATIVE and revoked:
            error = self.invoke_partitions_revoked(revoked)
            self.request_rejoin(f"need to revoke partitions {sorted(revoked)} as indicated by the current "
                                f"assignment and re-join")
        self.subscriptions.assign_from_subscribed(decoded.partitions)
        try:
            assignor.on_assignment(decoded, group_metadata)
        except Exception as exc:
            log.warning("Assignor %s failed in on_assignment: %s", protocol, exc)
        self.next_auto_commit_deadline = self.time.milliseconds() + self.auto_commit_interval_ms
        assigned_error = self.invoke_partitions_assigned(added)
        error = error or assigned_error
        if error is not None:
            raise KafkaError(f"User rebalance callback throws an error: {error}") from error

    def on_leave_prepare(self) -> None:
        """Before leaving the group (close / unsubscribe): revoke (or lose) what we own."""
        generation = self.generation
        owned = self.subscriptions.assigned_partitions()
        error = None
        if owned:
            if generation.generation_id == NO_GENERATION.generation_id or not generation.member_id:
                error = self.invoke_partitions_lost(owned)
            else:
                error = self.invoke_partitions_revoked(owned)
        if self.subscriptions.has_auto_assigned_partitions():
            self.subscriptions.assign_from_subscribed([])
        if error is not None:
            raise KafkaError(f"User rebalance callback throws an error: {error}") from error

    # --------------------------------------------------------------------------------- listeners

    def _invoke(self, method: str, partitions: set[TopicPartition]) -> BaseException | None:
        """Call the rebalance listener's ``method``; its duration feeds partition-<x>-latency."""
        start = self.time.milliseconds()
        try:
            return self._invoke_listener(method, partitions)
        finally:
            now = self.time.milliseconds()
            sensors = self.sensors
            {"on_partitions_revoked": sensors.revoked, "on_partitions_assigned": sensors.assigned,
             "on_partitions_lost": sensors.lost}[method].record(now - start, now)

    def _invoke_listener(self, method: str, partitions: set[TopicPartition]) -> BaseException | None:
        listener = self.subscriptions.rebalance_listener
        if listener is None:
            return None
        callback = getattr(listener, method, None)
        if callback is None and method == "on_partitions_lost":
            callback = getattr(listener, "on_partitions_revoked", None)
        if callback is None:
            return None
        try:
            callback(set(partitions))
        except InterruptError:
            raise
        except Exception as exc:
            log.error("User provided listener %s failed on invocation of %s for partitions %s",
                      type(listener).__name__, method, sorted(partitions), exc_info=True)
            return exc
        return None

    def invoke_partitions_revoked(self, partitions: set[TopicPartition]) -> BaseException | None:
        log.info("Revoke previously assigned partitions %s", sorted(partitions))
        if not partitions:
            return None
        self.subscriptions.mark_pending_revocation(partitions)
        return self._invoke("on_partitions_revoked", partitions)

    def invoke_partitions_assigned(self, partitions: set[TopicPartition]) -> BaseException | None:
        log.info("Adding newly assigned partitions: %s", sorted(partitions))
        return self._invoke("on_partitions_assigned", partitions)

    def invoke_partitions_lost(self, partitions: set[TopicPartition]) -> BaseException | None:
        log.info("Lost previously assigned partitions %s", sorted(partitions))
        if not partitions:
            return None
        return self._invoke("on_partitions_lost", partitions)

    def close(self, timer: Timer) -> None:
        """Commit (auto-commit), revoke, leave the group and stop the heartbeat thread."""
        self.client.disable_wakeups()
        try:
            self.maybe_auto_commit_offsets_sync(timer)
            while self.pending_async_commits > 0 and timer.not_expired():
                self.client.poll(timer.remaining_ms(), disable_wakeup=True)
                timer.update()
        finally:
            super().close(timer)
            self.invoke_completed_offset_commit_callbacks()


    # ------------------------------------------------------------------------------------ commits

    def invoke_completed_offset_commit_callbacks(self) -> None:
        if self.async_commit_fenced:
            raise ec.FencedInstanceIdError("Get fenced exception for group.instance.id "
                                           f"{self.config.group_instance_id}")
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
            if self.coordinator_unknown() and not self.ensure_coordinator_ready(timer):
                return False
            future = self.send_offset_commit_request(offsets)
            self.client.poll_future(future, timer)
            # earlier async commits finish first: keep callbacks in commit order
            self.invoke_completed_offset_commit_callbacks()
            if future.succeeded():
                self.interceptors.on_commit(dict(offsets))
                return True
            if future.failed() and not future.is_retriable():
                raise future.exception
            timer.sleep(self.retry_backoff_ms)
            if timer.is_expired():
                return False

    def commit_offsets_async(self, offsets: Mapping[TopicPartition, OffsetAndMetadata],
                             callback: OffsetCommitCallback | None = None) -> RequestFuture:
        self.invoke_completed_offset_commit_callbacks()
        offsets = dict(offsets)
        if not self.coordinator_unknown():
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

            self.lookup_coordinator().add_listener(found, not_found)
        self.client.poll_no_wakeup()  # get the request on the wire
        return future

    def _do_commit_offsets_async(self, offsets: dict[TopicPartition, OffsetAndMetadata],
                                 callback: OffsetCommitCallback | None) -> RequestFuture:
        future = self.send_offset_commit_request(offsets)

        def on_success(_value: Any) -> None:
            self.interceptors.on_commit(offsets)
            self.completed_offset_commits.append((callback, offsets, None))

        def on_failure(exc: BaseException) -> None:
            if isinstance(exc, KafkaError) and exc.retriable:
                exc = RetriableCommitFailedError(f"Offset commit failed with a retriable exception: {exc}")
            elif isinstance(exc, ec.FencedInstanceIdError):
                self.async_commit_fenced = True
            self.completed_offset_commits.append((callback, offsets, exc))

        future.add_listener(on_success, on_failure)
        return future

    def maybe_auto_commit_offsets_async(self, now: int) -> None:
        if not self.auto_commit_enabled or now < self.next_auto_commit_deadline:
            return
        self.next_auto_commit_deadline = now + self.auto_commit_interval_ms
        self.auto_commit_future = self._auto_commit_offsets_async()

    def _auto_commit_offsets_async(self) -> RequestFuture:
        offsets = self.subscriptions.all_consumed()

        def callback(committed: Mapping[TopicPartition, OffsetAndMetadata], exc: BaseException | None) -> None:
            if exc is None:
                log.debug("Completed asynchronous auto-commit of offsets %s", committed)
                return
            log.warning("Asynchronous auto-commit of offsets %s failed: %s", committed, exc)
            if isinstance(exc, KafkaError) and exc.retriable:
                self.next_auto_commit_deadline = min(
                    self.next_auto_commit_deadline,
                    self.time.milliseconds() + self.retry_backoff_ms)

        return self.commit_offsets_async(offsets, callback)

    def maybe_auto_commit_offsets_sync(self, timer: Timer) -> None:
        if not self.auto_commit_enabled:
            return
        offsets = self.subscriptions.all_consumed()
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
        coordinator = self.check_and_get_coordinator()
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
        if self.subscriptions.has_auto_assigned_partitions():
            generation = self.generation_if_stable()
            if generation is None:
                log.info("Failing OffsetCommit request since the consumer is not part of an active group")
                if self.rebalance_in_progress():
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
            group_id=self.config.group_id,
            generation_id_or_member_epoch=generation.generation_id, member_id=generation.member_id,
            group_instance_id=self.config.group_instance_id,
            retention_time_ms=-1,
            topics=[OffsetCommitRequest.OffsetCommitRequestTopic(name=t, partitions=ps) for t, ps in by_topic.items()])
        log.debug("Sending OffsetCommit request with %s to coordinator %s", dict(offsets), coordinator)
        sent_ms = self.time.milliseconds()
        return self.client.send(coordinator, request).compose(
            lambda response, future: self._handle_offset_commit(response, future, generation, sent_ms))

    def _handle_offset_commit(self, response: Any, future: RequestFuture, generation: Generation,
                              sent_ms: int | None = None) -> None:
        if sent_ms is not None:  # commit-latency, commit-rate (Kafka records every response)
            now = self.time.milliseconds()
            self.sensors.commit.record(now - sent_ms, now)
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
                    self.mark_coordinator_unknown(exc.name)
                elif error == ErrorCode.REBALANCE_IN_PROGRESS:
                    self.request_rejoin("offset commit failed since group is already rebalancing")
                    exc = RebalanceInProgressError(
                        "Offset commit cannot be completed since the consumer group is executing a rebalance at "
                        "the moment. You can try completing the rebalance by calling poll() and then retry commit "
                        "again")
                elif error in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION):
                    with self.lock:
                        if self.generation == generation:
                            self.reset_generation_on_response_error("OffsetCommit", error)
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
        generation = self.generation_if_stable()
        pending = self._pending_offset_fetch
        if pending is not None and (pending[0] != wanted or pending[1] != generation):
            self._pending_offset_fetch = pending = None
        while True:
            if not self.ensure_coordinator_ready(timer):
                return None
            if pending is None:
                pending = (wanted, generation, self._send_offset_fetch_request(wanted))
                self._pending_offset_fetch = pending
            future = pending[2]
            self.client.poll_future(future, timer)
            if not future.is_done():
                return None
            self._pending_offset_fetch = pending = None
            if future.succeeded():
                return dict(future.value)
            if not future.is_retriable():
                raise future.exception
            timer.sleep(self.retry_backoff_ms)
            if timer.is_expired():
                return None

    def _send_offset_fetch_request(self, partitions: frozenset[TopicPartition]) -> RequestFuture:
        coordinator = self.check_and_get_coordinator()
        if coordinator is None:
            return coordinator_not_available()
        by_topic: dict[str, list[int]] = {}
        for tp in sorted(partitions):
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        group_id = self.config.group_id
        request = OffsetFetchRequest(
            group_id=group_id, require_stable=True,
            topics=[OffsetFetchRequest.OffsetFetchRequestTopic(name=t, partition_indexes=ps) for t, ps in by_topic.items()],
            groups=[OffsetFetchRequest.OffsetFetchRequestGroup(group_id=group_id, topics=[
                OffsetFetchRequest.OffsetFetchRequestTopics(name=t, partition_indexes=ps) for t, ps in by_topic.items()])])
        # v1+: offsets stored in Kafka (v0 reads ZooKeeper-era offsets)
        return self.client.send(coordinator, request, min_version=1).compose(self._handle_offset_fetch)

    def _handle_offset_fetch(self, response: Any, future: RequestFuture) -> None:
        if response.groups:
            group = response.groups[0]
            error, topics = group.error_code, group.topics
        else:
            error, topics = getattr(response, "error_code", 0), response.topics
        if error != ErrorCode.NONE:
            exc = for_code(error)
            if error == ErrorCode.NOT_COORDINATOR:
                self.mark_coordinator_unknown(exc.name)
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
        subscriptions = self.subscriptions
        initializing = subscriptions.initializing_partitions()
        offsets = self.fetch_committed_offsets(initializing, timer)
        if offsets is None:
            return False
        for tp, om in offsets.items():
            if tp in initializing and subscriptions.is_assigned(tp):
                log.info("Setting offset for partition %s to the committed offset %s", tp, om.offset)
                if om.leader_epoch is not None:
                    self.metadata_source.update_last_seen_epoch_if_newer(tp, om.leader_epoch)
                subscriptions.seek(tp, om.offset, om.leader_epoch, current_leader(self.metadata_source, tp))
        return True
