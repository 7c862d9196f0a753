"""The assignor plug-in interface and its value types.

Kafka counterparts: ``ConsumerPartitionAssignor`` (+ its nested ``Subscription``, ``Assignment``,
``GroupSubscription``, ``GroupAssignment``, ``RebalanceProtocol``), ``ConsumerGroupMetadata`` and
``AbstractPartitionAssignor`` (with ``MemberInfo`` ordering: static members by instance id first, then dynamic
members by member id).

An assignor runs on the group leader: ``assign(partitions_per_topic, group_subscription)`` maps every member
to the partitions it gets. ``partitions_per_topic`` is ``{topic: partition count}`` for the topics the
members subscribe to that exist in the leader's metadata. Assignors keep per-member state only in
``on_assignment`` (sticky's previous assignment). Not thread-safe; called on the consumer's thread.
"""

from __future__ import annotations

import enum
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from strom.common.structs import TopicPartition

__all__ = [
    "RebalanceProtocol",
    "Subscription",
    "Assignment",
    "GroupSubscription",
    "GroupAssignment",
    "ConsumerGroupMetadata",
    "ConsumerPartitionAssignor",
    "AbstractPartitionAssignor",
    "MemberInfo",
    "sorted_partitions",
    "DEFAULT_GENERATION",
]

DEFAULT_GENERATION = -1


class RebalanceProtocol(enum.IntEnum):
    """Kafka's ``ConsumerPartitionAssignor.RebalanceProtocol``: EAGER revokes everything before joining,
    COOPERATIVE only what moves (KIP-429)."""

    EAGER = 0
    COOPERATIVE = 1


@dataclass(slots=True)
class Subscription:
    """One member's subscription as carried in JoinGroup metadata (``ConsumerProtocolSubscription``)."""

    topics: list[str]
    user_data: bytes | None = None
    owned_partitions: list[TopicPartition] = field(default_factory=list)
    generation_id: int | None = None
    rack_id: str | None = None
    group_instance_id: str | None = None


@dataclass(slots=True)
class Assignment:
    """One member's assignment as carried in SyncGroup (``ConsumerProtocolAssignment``)."""

    partitions: list[TopicPartition]
    user_data: bytes | None = None


@dataclass(slots=True)
class GroupSubscription:
    subscriptions: dict[str, Subscription]


@dataclass(slots=True)
class GroupAssignment:
    assignments: dict[str, Assignment]


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadata:
    """Kafka's ``ConsumerGroupMetadata`` (also what ``send_offsets_to_transaction`` takes)."""

    group_id: str | None
    generation_id: int = DEFAULT_GENERATION
    member_id: str = ""
    group_instance_id: str | None = None


@runtime_checkable
class ConsumerPartitionAssignor(Protocol):
    """Kafka's ``ConsumerPartitionAssignor``."""

    def name(self) -> str:
        """The protocol name in JoinGroup (e.g. ``range``); must match across clients."""

    def supported_protocols(self) -> list[RebalanceProtocol]: ...

    def version(self) -> int: ...

    def subscription_user_data(self, topics: set[str]) -> bytes | None: ...

    def assign_group(self, partitions_per_topic: Mapping[str, int],
                     group_subscription: GroupSubscription) -> GroupAssignment: ...

    def on_assignment(self, assignment: Assignment, metadata: ConsumerGroupMetadata | None) -> None: ...


@dataclass(frozen=True, slots=True)
class MemberInfo:
    """A member for ordering purposes (Kafka's ``AbstractPartitionAssignor.MemberInfo``)."""

    member_id: str
    group_instance_id: str | None = None

    def sort_key(self) -> tuple[int, str]:
        if self.group_instance_id is not None:
            return (0, self.group_instance_id)
        return (1, self.member_id)


def sorted_partitions(partitions: Iterable[TopicPartition]) -> list[TopicPartition]:
    return sorted(partitions, key=lambda tp: (tp.topic, tp.partition))


class AbstractPartitionAssignor:
    """Base of the built-in assignors (Kafka's ``AbstractPartitionAssignor``): subclasses implement
    ``assign(partitions_per_topic, subscriptions) -> {member: [TopicPartition]}``."""

    NAME = ""

    def name(self) -> str:
        return self.NAME

    def supported_protocols(self) -> list[RebalanceProtocol]:
        return [RebalanceProtocol.EAGER]

    def version(self) -> int:
        return 0

    def subscription_user_data(self, topics: set[str]) -> bytes | None:
        return None

    def on_assignment(self, assignment: Assignment, metadata: ConsumerGroupMetadata | None) -> None:
        pass

    def assign(self, partitions_per_topic: Mapping[str, int],
               subscriptions: Mapping[str, Subscription]) -> dict[str, list[TopicPartition]]:
        raise NotImplementedError

    def assign_group(self, partitions_per_topic: Mapping[str, int],
                     group_subscription: GroupSubscription) -> GroupAssignment:
        """Kafka's ``assign(Cluster, GroupSubscription)``: drop topics missing from the metadata, run
        :meth:`assign`, wrap the result."""
        subscriptions = group_subscription.subscriptions
        known = {t: n for t, n in partitions_per_topic.items() if n is not None and n > 0}
        raw = self.assign(known, subscriptions)
        return GroupAssignment({m: Assignment(list(parts)) for m, parts in raw.items()})

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def consumers_per_topic(subscriptions: Mapping[str, Subscription]) -> dict[str, list[MemberInfo]]:
    """``{topic: [MemberInfo of its subscribers]}`` (Kafka's ``consumersPerTopic``)."""
    out: dict[str, list[MemberInfo]] = defaultdict(list)
    for member_id, sub in subscriptions.items():
        info = MemberInfo(member_id, sub.group_instance_id)
        for topic in sub.topics:
            out[topic].append(info)
    return out


def all_partitions(partitions_per_topic: Mapping[str, int], topics: Iterable[str]) -> list[TopicPartition]:
    return [TopicPartition(t, p) for t in sorted(set(topics)) if t in partitions_per_topic
            for p in range(partitions_per_topic[t])]


def new_assignment(subscriptions: Mapping[str, Any]) -> dict[str, list[TopicPartition]]:
    return {m: [] for m in subscriptions}
