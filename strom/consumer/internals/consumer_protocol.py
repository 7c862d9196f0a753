"""The "consumer" embedded protocol: subscription bytes in JoinGroup, assignment bytes in SyncGroup.

Kafka counterpart: ``org.apache.kafka.clients.consumer.internals.ConsumerProtocol``.

Layout: INT16 version + ``ConsumerProtocolSubscription`` / ``ConsumerProtocolAssignment`` (generated from
Kafka's JSON schemas). Writers use version 3 (rack id); readers accept any version and read a newer one as
the newest they know (fields are only ever appended). Pure functions; thread-safe.
"""

from __future__ import annotations

from collections.abc import Iterable

from strom.common.structs import TopicPartition
from strom.consumer.assignors.abstract import Assignment, Subscription
from strom.protocol.messages import ConsumerProtocolAssignment, ConsumerProtocolSubscription

__all__ = ["serialize_subscription", "deserialize_subscription", "serialize_assignment", "deserialize_assignment",
           "CONSUMER_PROTOCOL_VERSION"]

CONSUMER_PROTOCOL_VERSION = 3


def _group(partitions: Iterable[TopicPartition]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for tp in sorted(partitions):
        out.setdefault(tp.topic, []).append(tp.partition)
    return out


def serialize_subscription(sub: Subscription, version: int = CONSUMER_PROTOCOL_VERSION) -> bytes:
    msg = ConsumerProtocolSubscription(
        topics=sorted(sub.topics), user_data=sub.user_data,
        owned_partitions=[ConsumerProtocolSubscription.TopicPartition(topic=t, partitions=ps)
                          for t, ps in _group(sub.owned_partitions).items()],
        generation_id=-1 if sub.generation_id is None else sub.generation_id, rack_id=sub.rack_id)
    return msg.encode_versioned(version)


def deserialize_subscription(data: bytes | bytearray | memoryview,
                             group_instance_id: str | None = None) -> Subscription:
    version, msg = ConsumerProtocolSubscription.decode_versioned(data)
    owned = [TopicPartition(t.topic, p) for t in msg.owned_partitions for p in t.partitions] if version >= 1 else []
    generation = msg.generation_id if version >= 2 and msg.generation_id >= 0 else None
    user_data = bytes(msg.user_data) if msg.user_data is not None else None
    return Subscription(list(msg.topics), user_data, owned, generation,
                        msg.rack_id if version >= 3 else None, group_instance_id)


def serialize_assignment(assignment: Assignment, version: int = CONSUMER_PROTOCOL_VERSION) -> bytes:
    msg = ConsumerProtocolAssignment(
        assigned_partitions=[ConsumerProtocolAssignment.TopicPartition(topic=t, partitions=ps)
                             for t, ps in _group(assignment.partitions).items()],
        user_data=assignment.user_data)
    return msg.encode_versioned(version)


def deserialize_assignment(data: bytes | bytearray | memoryview) -> Assignment:
    if not data:  # an empty SyncGroup assignment: nothing assigned
        return Assignment([])
    _version, msg = ConsumerProtocolAssignment.decode_versioned(data)
    user_data = bytes(msg.user_data) if msg.user_data is not None else None
    return Assignment([TopicPartition(t.topic, p) for t in msg.assigned_partitions for p in t.partitions], user_data)
