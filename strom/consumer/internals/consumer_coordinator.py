"""The consumer's group coordinator client: subscriptions, assignment, rebalance callbacks, commits.

Kafka counterpart: ``org.apache.kafka.clients.consumer.internals.ConsumerCoordinator`` (classic protocol).

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

Listener callbacks run on the consumer's thread; an exception from a callback is raised from ``poll`` once
the rebalance step is done. Threading: see :mod:`abstract_coordinator`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from strom.common.errors import IllegalStateError, InterruptError, KafkaError
from strom.common.structs import TopicPartition
from strom.common.time import Time
from strom.consumer.assignors.abstract import (
    ConsumerGroupMetadata,
    GroupSubscription,
    RebalanceProtocol,
    Subscription,
)
from strom.consumer.interceptors import ConsumerInterceptors
from strom.consumer.internals.abstract_coordinator import (
    NO_GENERATION,
    AbstractCoordinator,
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
from strom.consumer.internals.offset_commits import OffsetCommitsMixin
from strom.consumer.internals.subscription_state import SubscriptionState
from strom.consumer.internals.timer import Timer
from strom.metrics import Metrics

__all__ = ["ConsumerCoordinator"]

log = logging.getLogger(__name__)


class ConsumerCoordinator(OffsetCommitsMixin, AbstractCoordinator):
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
        self._init_offset_commits()

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
