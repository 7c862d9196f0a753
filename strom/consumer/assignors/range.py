"""The ``range`` assignor.

Kafka counterpart: ``org.apache.kafka.clients.consumer.RangeAssignor`` (without the rack-aware variant).

Per topic, the subscribed members are ordered (static members by ``group.instance.id``, then dynamic members
by member id) and the partitions are cut into contiguous ranges: with ``n`` partitions and ``c`` members the
first ``n % c`` members get ``n // c + 1`` partitions, the rest ``n // c``. Not thread-safe (stateless).
"""

from __future__ import annotations

from collections.abc import Mapping

from strom.common.structs import TopicPartition
from strom.consumer.assignors.abstract import (
    AbstractPartitionAssignor,
    Subscription,
    consumers_per_topic,
    new_assignment,
)

__all__ = ["RangeAssignor"]


class RangeAssignor(AbstractPartitionAssignor):
    """Kafka's ``RangeAssignor`` (protocol name ``range``, eager)."""

    NAME = "range"

    def assign(self, partitions_per_topic: Mapping[str, int],
               subscriptions: Mapping[str, Subscription]) -> dict[str, list[TopicPartition]]:
        assignment = new_assignment(subscriptions)
        for topic, members in sorted(consumers_per_topic(subscriptions).items()):
            n_partitions = partitions_per_topic.get(topic)
            if not n_partitions:
                continue
            ordered = sorted(members, key=lambda m: m.sort_key())
            per_member, extra = divmod(n_partitions, len(ordered))
            for i, member in enumerate(ordered):
                start = per_member * i + min(i, extra)
                length = per_member + (1 if i < extra else 0)
                assignment[member.member_id].extend(TopicPartition(topic, p) for p in range(start, start + length))
        return assignment
