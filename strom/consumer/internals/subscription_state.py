"""What the consumer is subscribed to, what it is assigned and where it is in each partition.

Kafka counterpart: ``org.apache.kafka.clients.consumer.internals.SubscriptionState`` (+ ``TopicPartitionState``,
``FetchState``, ``OffsetResetStrategy``).

Subscription types are mutually exclusive: topics (``subscribe(list)``), a pattern (``subscribe(pattern)``,
matched against the whole topic name) or a user assignment (``assign``). The assignment keeps its order
(assignment order drives fetch order). Each assigned partition has a fetch state:

* ``INITIALIZING`` — no position yet: the committed offset is looked up, else the reset policy applies;
* ``AWAIT_RESET`` — a ListOffsets (earliest/latest) is needed;
* ``AWAIT_VALIDATION`` — a position whose leader changed (KIP-320): an OffsetsForLeaderEpoch to the new leader
  checks that the log was not truncated below it before fetching goes on;
* ``FETCHING`` — a valid position: fetchable unless paused or pending revocation.

A position is Kafka's ``FetchPosition``: the offset, the leader epoch of the record before it (from fetched
batches or a committed offset; ``None`` after a reset or a plain ``seek``) and the leader (node id, epoch) it was
last valid for. When the metadata names another leader, a position with an epoch goes to ``AWAIT_VALIDATION``
(:meth:`maybe_validate_position_for_current_leader`); one without cannot be checked and stays fetching.
:meth:`maybe_complete_validation` applies the answer: the epoch's end offset at or past the position validates it;
below it, the log was truncated, and the position moves back to the end offset (with a reset policy) or a
:class:`LogTruncation` is returned (``auto.offset.reset=none``). Thread-safety: every method takes one re-entrant
lock, so the heartbeat thread and the caller may both read it (Kafka's methods are ``synchronized``).
"""

from __future__ import annotations

import enum
import logging
import re
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from strom.common.errors import IllegalStateError
from strom.common.structs import OffsetAndMetadata, TopicPartition
from strom.consumer.errors import NoOffsetForPartitionError

__all__ = ["SubscriptionState", "SubscriptionType", "FetchState", "OffsetResetStrategy", "TopicPartitionState",
           "FetchPosition", "LogTruncation", "LeaderAndEpoch"]

log = logging.getLogger(__name__)

SUBSCRIPTION_EXCEPTION_MESSAGE = "Subscription to topics, partitions and pattern are mutually exclusive"


class SubscriptionType(enum.Enum):
    NONE = "NONE"
    AUTO_TOPICS = "AUTO_TOPICS"
    AUTO_PATTERN = "AUTO_PATTERN"
    USER_ASSIGNED = "USER_ASSIGNED"


class FetchState(enum.Enum):
    INITIALIZING = "INITIALIZING"
    FETCHING = "FETCHING"
    AWAIT_RESET = "AWAIT_RESET"
    AWAIT_VALIDATION = "AWAIT_VALIDATION"


# Kafka's ``Metadata.LeaderAndEpoch``: the leader's node id and the leader epoch, either unknown (None).
LeaderAndEpoch = tuple["int | None", "int | None"]
NO_LEADER: LeaderAndEpoch = (None, None)


@dataclass(frozen=True, slots=True)
class FetchPosition:
    """Kafka's ``SubscriptionState.FetchPosition``: the next offset, the leader epoch of the record before it,
    and the leader the position was last valid for."""

    offset: int
    offset_epoch: int | None
    current_leader: LeaderAndEpoch


@dataclass(frozen=True, slots=True)
class LogTruncation:
    """A truncation found by validation without a reset policy: the position that was checked and, when the
    leader knew the epoch, the first offset known to diverge (with its epoch)."""

    tp: TopicPartition
    fetch_position: FetchPosition
    divergent_offset: OffsetAndMetadata | None

    def __str__(self) -> str:
        return (f"(partition={self.tp}, fetchOffset={self.fetch_position.offset}, "
                f"divergentOffset={self.divergent_offset})")


class OffsetResetStrategy(enum.Enum):
    """``auto.offset.reset`` (Kafka's ``OffsetResetStrategy``); the ListOffsets timestamp of each policy."""

    LATEST = "latest"
    EARLIEST = "earliest"
    NONE = "none"

    @property
    def timestamp(self) -> int:
        return {"latest": -1, "earliest": -2}.get(self.value, 0)

    @classmethod
    def parse(cls, value: str | OffsetResetStrategy) -> OffsetResetStrategy:
        return value if isinstance(value, OffsetResetStrategy) else cls(value.lower())


class TopicPartitionState:
    """Per-partition state (Kafka's ``SubscriptionState.TopicPartitionState``). Guarded by the owner's lock."""

    __slots__ = ("fetch_state", "position", "position_epoch", "current_leader", "high_watermark",
                 "log_start_offset", "last_stable_offset", "paused", "pending_revocation", "reset_strategy",
                 "next_retry_time_ms")

    def __init__(self) -> None:
        self.fetch_state = FetchState.INITIALIZING
        self.position: int | None = None
        self.position_epoch: int | None = None
        self.current_leader: LeaderAndEpoch = NO_LEADER
        self.high_watermark: int | None = None
        self.log_start_offset: int | None = None
        self.last_stable_offset: int | None = None
        self.paused = False
        self.pending_revocation = False
        self.reset_strategy: OffsetResetStrategy | None = None
        self.next_retry_time_ms: int | None = None

    @property
    def has_valid_position(self) -> bool:
        return self.fetch_state is FetchState.FETCHING

    @property
    def is_fetchable(self) -> bool:
        return self.fetch_state is FetchState.FETCHING and not self.paused and not self.pending_revocation

    def awaiting_retry_backoff(self, now_ms: int) -> bool:
        return self.next_retry_time_ms is not None and now_ms < self.next_retry_time_ms

    def __repr__(self) -> str:
        return (f"TopicPartitionState(state={self.fetch_state.name}, position={self.position}, "
                f"paused={self.paused}, pendingRevocation={self.pending_revocation})")


class SubscriptionState:
    """Kafka's ``SubscriptionState`` (see the module docstring). Thread-safe (one re-entrant lock)."""

    def __init__(self, default_reset_strategy: OffsetResetStrategy | str = OffsetResetStrategy.LATEST) -> None:
        self._lock = threading.RLock()
        self.default_reset_strategy = OffsetResetStrategy.parse(default_reset_strategy)
        self.subscription_type = SubscriptionType.NONE
        self._subscription: set[str] = set()
        self._group_subscription: set[str] = set()
        self._pattern: re.Pattern[str] | None = None
        self._assignment: dict[TopicPartition, TopicPartitionState] = {}
        self.rebalance_listener: Any = None
        self.assignment_id = 0

    # ------------------------------------------------------------------------------------ subscriptions

    def _set_type(self, kind: SubscriptionType) -> None:
        if self.subscription_type is SubscriptionType.NONE:
            self.subscription_type = kind
        elif self.subscription_type is not kind:
            raise IllegalStateError(SUBSCRIPTION_EXCEPTION_MESSAGE)

    def subscribe(self, topics: Iterable[str], listener: Any = None) -> bool:
        """Subscribe to a fixed topic set; returns whether the subscription changed."""
        with self._lock:
            self._set_type(SubscriptionType.AUTO_TOPICS)
            self.rebalance_listener = listener
            return self._change_subscription(set(topics))

    def subscribe_pattern(self, pattern: re.Pattern[str] | str, listener: Any = None) -> None:
        with self._lock:
            self._set_type(SubscriptionType.AUTO_PATTERN)
            self.rebalance_listener = listener
            self._pattern = re.compile(pattern) if isinstance(pattern, str) else pattern

    def subscribe_from_pattern(self, topics: Iterable[str]) -> bool:
        """The metadata's topics matching the pattern become the subscription."""
        with self._lock:
            if self.subscription_type is not SubscriptionType.AUTO_PATTERN:
                raise IllegalStateError("Attempt to subscribe from pattern while subscription type set to "
                                        f"{self.subscription_type.name}")
            return self._change_subscription(set(topics))

    def _change_subscription(self, topics: set[str]) -> bool:
        if topics == self._subscription:
            return False
        self._subscription = topics
        return True

    def group_subscribe(self, topics: Iterable[str]) -> bool:
        """The leader tracks every member's topics in its metadata; returns whether that set grew."""
        with self._lock:
            if not self.has_auto_assigned_partitions():
                raise IllegalStateError(SUBSCRIPTION_EXCEPTION_MESSAGE)
            before = set(self._group_subscription)
            self._group_subscription = set(self._subscription) | set(topics)
            return self._group_subscription != before

    def reset_group_subscription(self) -> None:
        with self._lock:
            self._group_subscription = set()

    def assign_from_user(self, partitions: Iterable[TopicPartition]) -> bool:
        """``assign()``: replace the assignment, keeping the state of partitions already assigned."""
        with self._lock:
            self._set_type(SubscriptionType.USER_ASSIGNED)
            wanted = list(dict.fromkeys(partitions))
            if set(wanted) == set(self._assignment):
                return False
            self.assignment_id += 1
            self._assignment = {tp: self._assignment.get(tp) or TopicPartitionState() for tp in wanted}
            return True

    def assign_from_subscribed(self, partitions: Iterable[TopicPartition]) -> None:
        """A rebalance result: every partition must belong to the subscription."""
        with self._lock:
            if not self.has_auto_assigned_partitions():
                raise IllegalStateError("Attempt to dynamically assign partitions while manual assignment in use")
            wanted = list(dict.fromkeys(partitions))
            for tp in wanted:
                if not self._is_subscribed_topic(tp.topic):
                    raise ValueError(f"Assigned partition {tp} for non-subscribed topic.")
            self.assignment_id += 1
            self._assignment = {tp: self._assignment.get(tp) or TopicPartitionState() for tp in wanted}

    def _is_subscribed_topic(self, topic: str) -> bool:
        if topic in self._subscription:
            return True
        return self._pattern is not None and self._pattern.fullmatch(topic) is not None

    def unsubscribe(self) -> None:
        with self._lock:
            self._subscription = set()
            self._group_subscription = set()
            self._assignment = {}
            self.assignment_id += 1
            self._pattern = None
            self.subscription_type = SubscriptionType.NONE

    def subscription(self) -> set[str]:
        with self._lock:
            return set(self._subscription) if self.has_auto_assigned_partitions() else set()

    @property
    def subscribed_pattern(self) -> re.Pattern[str] | None:
        return self._pattern

    def matches_subscribed_pattern(self, topic: str) -> bool:
        pattern = self._pattern
        return pattern is not None and pattern.fullmatch(topic) is not None

    def metadata_topics(self) -> set[str]:
        """Topics whose metadata the consumer needs."""
        with self._lock:
            if self.subscription_type is SubscriptionType.USER_ASSIGNED:
                return {tp.topic for tp in self._assignment}
            return set(self._group_subscription) | set(self._subscription)

    def needs_metadata(self, topic: str) -> bool:
        return topic in self.metadata_topics()

    def has_pattern_subscription(self) -> bool:
        return self.subscription_type is SubscriptionType.AUTO_PATTERN

    def has_auto_assigned_partitions(self) -> bool:
        return self.subscription_type in (SubscriptionType.AUTO_TOPICS, SubscriptionType.AUTO_PATTERN)

    def has_no_subscription_or_user_assignment(self) -> bool:
        return self.subscription_type is SubscriptionType.NONE

    # -------------------------------------------------------------------------------------- assignment

    def assigned_partitions(self) -> set[TopicPartition]:
        with self._lock:
            return set(self._assignment)

    def assigned_partitions_list(self) -> list[TopicPartition]:
        with self._lock:
            return list(self._assignment)

    def num_assigned_partitions(self) -> int:
        return len(self._assignment)

    def is_assigned(self, tp: TopicPartition) -> bool:
        return tp in self._assignment

    def _state(self, tp: TopicPartition) -> TopicPartitionState:
        state = self._assignment.get(tp)
        if state is None:
            raise IllegalStateError(f"No current assignment for partition {tp}")
        return state

    def is_paused(self, tp: TopicPartition) -> bool:
        state = self._assignment.get(tp)
        return state is not None and state.paused

    def is_fetchable(self, tp: TopicPartition) -> bool:
        state = self._assignment.get(tp)
        return state is not None and state.is_fetchable

    def has_valid_position(self, tp: TopicPartition) -> bool:
        state = self._assignment.get(tp)
        return state is not None and state.has_valid_position

    def fetchable_partitions(self, predicate: Callable[[TopicPartition], bool] | None = None) -> list[TopicPartition]:
        with self._lock:
            return [tp for tp, s in self._assignment.items() if s.is_fetchable and (predicate is None or predicate(tp))]

    def mark_pending_revocation(self, partitions: Iterable[TopicPartition]) -> None:
        with self._lock:
            for tp in partitions:
                state = self._assignment.get(tp)
                if state is not None:
                    state.pending_revocation = True

    def pause(self, tp: TopicPartition) -> None:
        with self._lock:
            self._state(tp).paused = True

    def resume(self, tp: TopicPartition) -> None:
        with self._lock:
            self._state(tp).paused = False

    def paused_partitions(self) -> set[TopicPartition]:
        with self._lock:
            return {tp for tp, s in self._assignment.items() if s.paused}

    # -------------------------------------------------------------------------------------- positions

    def seek(self, tp: TopicPartition, offset: int, epoch: int | None = None,
             current_leader: LeaderAndEpoch = NO_LEADER) -> None:
        """Set the position (Kafka's ``seekUnvalidated``): with an epoch and a known leader epoch, the position is
        validated with the leader before fetching from it (``AWAIT_VALIDATION``)."""
        with self._lock:
            state = self._state(tp)
            self._seek_validated(state, offset, epoch, current_leader)
            self._validate_position(state)

    @staticmethod
    def _seek_validated(state: TopicPartitionState, offset: int, epoch: int | None,
                        current_leader: LeaderAndEpoch) -> None:
        state.position = offset
        state.position_epoch = epoch
        state.current_leader = current_leader
        state.fetch_state = FetchState.FETCHING
        state.reset_strategy = None
        state.next_retry_time_ms = None

    @staticmethod
    def _validate_position(state: TopicPartitionState) -> None:
        """Kafka's ``TopicPartitionState.validatePosition``: a position with epoch information is checked with the
        leader; without it there is nothing to check."""
        if state.position_epoch is not None and state.current_leader[1] is not None:
            state.fetch_state = FetchState.AWAIT_VALIDATION
        else:
            state.fetch_state = FetchState.FETCHING
        state.next_retry_time_ms = None

    def maybe_seek_unvalidated(self, tp: TopicPartition, offset: int,
                               strategy: OffsetResetStrategy | None,
                               current_leader: LeaderAndEpoch = NO_LEADER) -> bool:
        """Apply a reset result if the partition still awaits that reset (it may have been sought or
        unassigned meanwhile). Returns whether the position was set. A reset position carries no epoch, so it is
        not validated (as Kafka: the offset just came from the leader)."""
        with self._lock:
            state = self._assignment.get(tp)
            if state is None or state.fetch_state is not FetchState.AWAIT_RESET:
                return False
            if strategy is not None and state.reset_strategy is not strategy:
                return False
            self.seek(tp, offset, None, current_leader)
            return True

    # ------------------------------------------------------------------------------------ validation

    def maybe_validate_position_for_current_leader(self, tp: TopicPartition, leader: LeaderAndEpoch) -> bool:
        """The metadata names ``leader`` for ``tp``: a position last valid for another leader is validated anew
        (Kafka's ``maybeValidatePositionForCurrentLeader``). Returns whether ``tp`` awaits validation."""
        with self._lock:
            state = self._assignment.get(tp)
            if state is None or state.fetch_state is FetchState.AWAIT_RESET or leader[0] is None:
                return False
            if state.position is not None and state.current_leader != leader:
                state.current_leader = leader
                self._validate_position(state)
            return state.fetch_state is FetchState.AWAIT_VALIDATION

    def partitions_needing_validation(self, now_ms: int) -> dict[TopicPartition, FetchPosition]:
        """Positions awaiting validation whose retry backoff has elapsed."""
        with self._lock:
            return {tp: FetchPosition(s.position, s.position_epoch, s.current_leader)
                    for tp, s in self._assignment.items()
                    if s.fetch_state is FetchState.AWAIT_VALIDATION and s.position is not None
                    and not s.awaiting_retry_backoff(now_ms)}

    def is_awaiting_validation(self, tp: TopicPartition) -> bool:
        state = self._assignment.get(tp)
        return state is not None and state.fetch_state is FetchState.AWAIT_VALIDATION

    def complete_validation(self, tp: TopicPartition) -> None:
        """Fetch without validating (the leader cannot answer OffsetsForLeaderEpoch for consumers)."""
        with self._lock:
            state = self._assignment.get(tp)
            if state is not None and state.fetch_state is FetchState.AWAIT_VALIDATION:
                state.fetch_state = FetchState.FETCHING

    def maybe_complete_validation(self, tp: TopicPartition, requested: FetchPosition, end_epoch: int,
                                  end_offset: int) -> LogTruncation | None:
        """Apply the leader's answer for ``requested`` (Kafka's ``maybeCompleteValidation``): the end offset of
        the position's epoch (``end_epoch`` the largest epoch at most the position's) at or past the position
        validates it. Below it, records the consumer may have read were truncated: with a reset policy the
        position moves back to the end offset (the first offset known to diverge), otherwise the truncation is
        returned. An unknown epoch (-1) is a truncation with no known divergence point: reset or report."""
        with self._lock:
            state = self._assignment.get(tp)
            if state is None or state.fetch_state is not FetchState.AWAIT_VALIDATION:
                log.debug("Skipping completed validation for partition %s which is not currently awaiting "
                          "validation", tp)
                return None
            current = FetchPosition(state.position, state.position_epoch, state.current_leader)  # type: ignore[arg-type]
            if current != requested:
                log.debug("Skipping completed validation for partition %s since the current position %s no "
                          "longer matches the position %s when the request was sent", tp, current, requested)
                return None
            if end_offset < 0 or end_epoch < 0:
                if self.has_default_offset_reset_policy():
                    log.info("Truncation detected for partition %s at offset %s, resetting offset", tp, current)
                    self.request_offset_reset(tp)
                    return None
                log.warning("Truncation detected for partition %s at offset %s, but no reset policy is set", tp,
                            current)
                return LogTruncation(tp, requested, None)
            if end_offset < current.offset:
                if self.has_default_offset_reset_policy():
                    log.info("Truncation detected for partition %s at offset %s, resetting offset to the first "
                             "offset known to diverge %d (epoch %d)", tp, current, end_offset, end_epoch)
                    self._seek_validated(state, end_offset, end_epoch, current.current_leader)
                    return None
                divergent = OffsetAndMetadata(end_offset, "", end_epoch)
                log.warning("Truncation detected for partition %s at offset %s (the end offset is %s), but no "
                            "reset policy is set", tp, current, divergent)
                return LogTruncation(tp, requested, divergent)
            state.fetch_state = FetchState.FETCHING
            return None

    def position(self, tp: TopicPartition) -> int | None:
        """The next offset to fetch, or ``None`` without a valid position."""
        state = self._assignment.get(tp)
        if state is None or state.fetch_state is not FetchState.FETCHING:
            return None
        return state.position

    def update_position(self, tp: TopicPartition, offset: int, epoch: int | None = None) -> None:
        """Advance the position after records were returned (no state change)."""
        state = self._assignment.get(tp)
        if state is not None and state.fetch_state is FetchState.FETCHING:
            state.position = offset
            if epoch is not None:
                state.position_epoch = epoch

    def position_epoch(self, tp: TopicPartition) -> int | None:
        state = self._assignment.get(tp)
        return None if state is None else state.position_epoch

    def update_high_watermark(self, tp: TopicPartition, value: int) -> None:
        state = self._assignment.get(tp)
        if state is not None and value >= 0:
            state.high_watermark = value

    def update_log_start_offset(self, tp: TopicPartition, value: int) -> None:
        state = self._assignment.get(tp)
        if state is not None and value >= 0:
            state.log_start_offset = value

    def update_last_stable_offset(self, tp: TopicPartition, value: int) -> None:
        state = self._assignment.get(tp)
        if state is not None and value >= 0:
            state.last_stable_offset = value

    def partition_lag(self, tp: TopicPartition, read_committed: bool) -> int | None:
        state = self._assignment.get(tp)
        if state is None or state.position is None:
            return None
        end = state.last_stable_offset if read_committed else state.high_watermark
        return None if end is None else end - state.position

    def assignment_token(self) -> object:
        """An object that changes whenever the assignment does (Kafka's ``assignmentId``): the assignment map is
        replaced on every change, never mutated, so its identity is the token."""
        return self._assignment

    def partition_lead(self, tp: TopicPartition) -> int | None:
        """Position minus log start offset (Kafka's ``partitionLead``), once both are known."""
        state = self._assignment.get(tp)
        if state is None or state.position is None or state.log_start_offset is None:
            return None
        return state.position - state.log_start_offset

    def partition_end_offset(self, tp: TopicPartition, read_committed: bool) -> int | None:
        state = self._assignment.get(tp)
        if state is None:
            return None
        return state.last_stable_offset if read_committed else state.high_watermark

    def all_consumed(self) -> dict[TopicPartition, OffsetAndMetadata]:
        """Positions of every partition with a valid position, as offsets to commit."""
        with self._lock:
            return {tp: OffsetAndMetadata(s.position, "", s.position_epoch)
                    for tp, s in self._assignment.items() if s.has_valid_position and s.position is not None}

    def has_all_fetch_positions(self) -> bool:
        with self._lock:
            return all(s.has_valid_position for s in self._assignment.values())

    # ------------------------------------------------------------------------------------------ resets

    def request_offset_reset(self, tp: TopicPartition, strategy: OffsetResetStrategy | None = None) -> None:
        """The partition waits for a ListOffsets (earliest/latest per ``strategy``, default the reset policy)."""
        with self._lock:
            state = self._state(tp)
            state.fetch_state = FetchState.AWAIT_RESET
            state.reset_strategy = strategy or self.default_reset_strategy
            state.next_retry_time_ms = None

    def request_offset_reset_if_assigned(self, tp: TopicPartition) -> bool:
        with self._lock:
            if tp in self._assignment:
                self.request_offset_reset(tp)
                return True
            return False

    def has_default_offset_reset_policy(self) -> bool:
        return self.default_reset_strategy is not OffsetResetStrategy.NONE

    def is_offset_reset_needed(self, tp: TopicPartition) -> bool:
        state = self._assignment.get(tp)
        return state is not None and state.fetch_state is FetchState.AWAIT_RESET

    def reset_strategy(self, tp: TopicPartition) -> OffsetResetStrategy | None:
        state = self._assignment.get(tp)
        return None if state is None else state.reset_strategy

    def initializing_partitions(self) -> set[TopicPartition]:
        with self._lock:
            return {tp for tp, s in self._assignment.items() if s.fetch_state is FetchState.INITIALIZING}

    def reset_initializing_positions(self) -> None:
        """Partitions still without a position (no committed offset) go to the reset policy; with
        ``auto.offset.reset=none`` raises :class:`NoOffsetForPartitionError`."""
        with self._lock:
            missing: set[TopicPartition] = set()
            for tp, state in self._assignment.items():
                if state.fetch_state is FetchState.INITIALIZING:
                    if self.default_reset_strategy is OffsetResetStrategy.NONE:
                        missing.add(tp)
                    else:
                        self.request_offset_reset(tp)
            if missing:
                raise NoOffsetForPartitionError(missing)

    def partitions_needing_reset(self, now_ms: int) -> list[TopicPartition]:
        """Partitions awaiting a reset whose retry backoff has elapsed."""
        with self._lock:
            return [tp for tp, s in self._assignment.items()
                    if s.fetch_state is FetchState.AWAIT_RESET and not s.awaiting_retry_backoff(now_ms)]

    def set_next_allowed_retry(self, partitions: Iterable[TopicPartition], next_retry_time_ms: int) -> None:
        with self._lock:
            for tp in partitions:
                state = self._assignment.get(tp)
                if state is not None:
                    state.next_retry_time_ms = next_retry_time_ms

    request_failed = set_next_allowed_retry

    def __repr__(self) -> str:
        return (f"SubscriptionState(type={self.subscription_type.name}, subscribedTopics={sorted(self._subscription)}, "
                f"subscribedPattern={self._pattern.pattern if self._pattern else None}, "
                f"assignment={self._assignment})")
