"""Consumer embedded protocol: round trips, and bytes other clients write."""

from __future__ import annotations

import pytest

from strom.common.structs import TopicPartition
from strom.consumer.assignors.abstract import Assignment, Subscription
from strom.consumer.internals.consumer_protocol import (
    deserialize_assignment,
    deserialize_subscription,
    serialize_assignment,
    serialize_subscription,
)

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]


def test_subscription_round_trip() -> None:
    sub = Subscription(["b", "a"], b"ud", [TopicPartition("a", 1), TopicPartition("a", 0)], 4, "rack-1")
    back = deserialize_subscription(serialize_subscription(sub), "inst")
    assert back.topics == ["a", "b"] and back.user_data == b"ud" and back.generation_id == 4
    assert back.owned_partitions == [TopicPartition("a", 0), TopicPartition("a", 1)]
    assert back.rack_id == "rack-1" and back.group_instance_id == "inst"
    v0 = deserialize_subscription(serialize_subscription(sub, 0))
    assert v0.owned_partitions == [] and v0.generation_id is None and v0.rack_id is None


def test_assignment_round_trip_and_empty() -> None:
    a = Assignment([TopicPartition("t", 2), TopicPartition("t", 0), TopicPartition("u", 1)], None)
    assert sorted(deserialize_assignment(serialize_assignment(a)).partitions) == sorted(a.partitions)
    assert deserialize_assignment(b"").partitions == []


def test_reads_kafka_python_v0_bytes() -> None:
    kp = pytest.importorskip("kafka.protocol.old.consumer_protocol")
    meta = kp.ConsumerProtocolMemberMetadata_v0(0, ["t1", "t2"], b"xy").encode()
    sub = deserialize_subscription(bytes(meta))
    assert sub.topics == ["t1", "t2"] and sub.user_data == b"xy"
    assignment = kp.ConsumerProtocolMemberAssignment_v0(0, [("t1", [0, 2])], b"").encode()
    assert deserialize_assignment(bytes(assignment)).partitions == [TopicPartition("t1", 0), TopicPartition("t1", 2)]
    # and kafka-python reads ours (the v0 layout is a prefix of every later version)
    decoded = kp.ConsumerProtocolMemberMetadata_v0.decode(serialize_subscription(Subscription(["t1"], b"z"), 0))
    assert decoded.topics == ["t1"] and decoded.user_data == b"z"
