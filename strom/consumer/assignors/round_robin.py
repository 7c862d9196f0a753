"""The ``roundrobin`` assignor.

Kafka counterpart: ``org.apache.kafka.clients.consumer.RoundRobinAssignor``.

All partitions of all subscribed topics (topics sorted by name, partitions in order) are dealt to the members
in a circle (static members by ``group.instance.id`` first, then dynamic members by member id); a member not
subscribed to a partition's topic is skipped. With identical subscriptions the counts differ by at most one.
Not thread-safe (stateless).
"""

from __future__ import annotations

from collections.abc import Mapping

from strom.common.structs import TopicPartition
from strom.consumer.assignors.abstract import (
    AbstractPartitionAssignor,
    MemberInfo,
    Subscription,
    all_partitions,
    new_assignment,
)

__all__ = ["RoundRobinAssignor"]


class RoundRobinAssignor(AbstractPartitionAssignor):
    """Kafka's ``RoundRobinAssignor`` (protocol name ``roundrobin``, eager)."""

    NAME = "roundrobin"

    def assign(self, partitions_per_topic: Mapping[str, int],
               subscriptions: Mapping[str, Subscription]) -> dict[str, list[TopicPartition]]:
        assignment = new_assignment(subscriptions)
        members = sorted((MemberInfo(m, s.group_instance_id) for m, s in subscriptions.items()),
                         key=lambda m: m.sort_key())
        if not members:
            return assignment
        topics_of = {m: set(s.topics) for m, s in subscriptions.items()}
        every_topic = {t for s in subscriptions.values() for t in s.topics}
        position = 0
        for tp in all_partitions(partitions_per_topic, every_topic):
            # advance the circle to the next member subscribed to this topic (one exists: tp's topic came
            # from some member's subscription)
            while tp.topic not in topics_of[members[position].member_id]:
                position = (position + 1) % len(members)
            assignment[members[position].member_id].append(tp)
            position = (position + 1) % len(members)
        return assignment
