"""The ``sticky`` (eager) and ``cooperative-sticky`` (incremental, KIP-429) assignors.

Kafka counterparts: ``org.apache.kafka.clients.consumer.StickyAssignor`` and ``CooperativeStickyAssignor``.

User data, as Kafka writes it (non-flexible ``Struct`` encoding, no version prefix)::

    StickyAssignor v1:  previous_assignment ARRAY(topic STRING, partitions ARRAY(INT32)), generation INT32
    StickyAssignor v0:  previous_assignment only (read: a v1 read that fails falls back to v0)
    CooperativeStickyAssignor v0: generation INT32

``StickyAssignor`` reports its previous assignment only through user data (eager members own nothing when
they join). ``CooperativeStickyAssignor`` takes the owned partitions from the subscription and the generation
from the subscription (v2+) or its user data; after the sticky algorithm it withholds every partition whose
valid previous owner is another member (and every partition claimed twice in one generation): the owner
revokes it first and rejoins, and the next rebalance hands it over — the two-phase cooperative protocol.

Not thread-safe: used on the consumer's thread (``on_assignment`` after each rebalance).
"""

from __future__ import annotations

import struct
from collections.abc import Mapping

from strom.common.structs import TopicPartition
from strom.consumer.assignors.abstract import (
    DEFAULT_GENERATION,
    Assignment,
    ConsumerGroupMetadata,
    RebalanceProtocol,
    Subscription,
)
from strom.consumer.assignors.abstract_sticky import AbstractStickyAssignor, MemberData

__all__ = [
    "StickyAssignor",
    "CooperativeStickyAssignor",
    "encode_sticky_user_data",
    "decode_sticky_user_data",
]

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


def encode_sticky_user_data(partitions: list[TopicPartition], generation: int | None) -> bytes:
    """``StickyAssignor`` user data: v1 with ``generation``, v0 when it is ``None``."""
    by_topic: dict[str, list[int]] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    out = bytearray(_I32.pack(len(by_topic)))
    for topic, parts in by_topic.items():
        name = topic.encode("utf-8")
        out += _I16.pack(len(name)) + name + _I32.pack(len(parts))
        for p in parts:
            out += _I32.pack(p)
    if generation is not None:
        out += _I32.pack(generation)
    return bytes(out)


def decode_sticky_user_data(data: bytes | bytearray | memoryview) -> MemberData:
    """Inverse of :func:`encode_sticky_user_data` (generation ``None`` for v0). Raises ``ValueError`` on
    malformed input."""
    buf = bytes(data)
    try:
        (count,) = _I32.unpack_from(buf, 0)
        if count < 0:
            raise ValueError("negative topic count")
        pos = 4
        partitions: list[TopicPartition] = []
        for _ in range(count):
            (n,) = _I16.unpack_from(buf, pos)
            pos += 2
            if n < 0 or pos + n > len(buf):
                raise ValueError("bad topic name length")
            topic = buf[pos:pos + n].decode("utf-8")
            pos += n
            (np_,) = _I32.unpack_from(buf, pos)
            pos += 4
            if np_ < 0:
                raise ValueError("negative partition count")
            for _ in range(np_):
                partitions.append(TopicPartition(topic, _I32.unpack_from(buf, pos)[0]))
                pos += 4
    except (struct.error, UnicodeDecodeError) as exc:
        raise ValueError(f"malformed sticky assignor user data: {exc}") from None
    generation = _I32.unpack_from(buf, pos)[0] if len(buf) - pos >= 4 else None
    return MemberData(partitions, generation)


class StickyAssignor(AbstractStickyAssignor):
    """Kafka's ``StickyAssignor`` (protocol name ``sticky``, eager)."""

    NAME = "sticky"

    def __init__(self) -> None:
        super().__init__()
        self.member_assignment: list[TopicPartition] | None = None
        self.generation: int = DEFAULT_GENERATION

    def on_assignment(self, assignment: Assignment, metadata: ConsumerGroupMetadata | None) -> None:
        self.member_assignment = list(assignment.partitions)
        self.generation = metadata.generation_id if metadata is not None else DEFAULT_GENERATION

    def subscription_user_data(self, topics: set[str]) -> bytes | None:
        if self.member_assignment is None:
            return None
        return encode_sticky_user_data(self.member_assignment, self.generation)

    def member_data(self, subscription: Subscription) -> MemberData:
        data = subscription.user_data
        if not data:
            return MemberData([], None, subscription.rack_id)
        try:
            decoded = decode_sticky_user_data(data)
        except ValueError:
            return MemberData([], None, subscription.rack_id)
        return MemberData(decoded.partitions, decoded.generation, subscription.rack_id)


class CooperativeStickyAssignor(AbstractStickyAssignor):
    """Kafka's ``CooperativeStickyAssignor`` (protocol name ``cooperative-sticky``; supports the
    COOPERATIVE and EAGER rebalance protocols)."""

    NAME = "cooperative-sticky"

    def __init__(self) -> None:
        super().__init__()
        self.generation: int = DEFAULT_GENERATION

    def supported_protocols(self) -> list[RebalanceProtocol]:
        return [RebalanceProtocol.COOPERATIVE, RebalanceProtocol.EAGER]

    def on_assignment(self, assignment: Assignment, metadata: ConsumerGroupMetadata | None) -> None:
        self.generation = metadata.generation_id if metadata is not None else DEFAULT_GENERATION

    def subscription_user_data(self, topics: set[str]) -> bytes | None:
        return _I32.pack(self.generation)

    def member_data(self, subscription: Subscription) -> MemberData:
        generation = subscription.generation_id
        if generation is None or generation < 0:
            generation = self._generation_from_user_data(subscription.user_data)
        return MemberData(list(subscription.owned_partitions), generation, subscription.rack_id)

    @staticmethod
    def _generation_from_user_data(data: bytes | None) -> int | None:
        if not data:
            return None
        if len(data) == 4:
            return int(_I32.unpack(bytes(data))[0])
        try:  # librdkafka sends the StickyAssignor layout for cooperative-sticky too
            return decode_sticky_user_data(data).generation
        except ValueError:
            return DEFAULT_GENERATION

    def assign(self, partitions_per_topic: Mapping[str, int],
               subscriptions: Mapping[str, Subscription]) -> dict[str, list[TopicPartition]]:
        assignment = super().assign(partitions_per_topic, subscriptions)
        withheld = self.partitions_with_multiple_previous_owners
        owners = self.previous_owners
        for member, parts in assignment.items():
            assignment[member] = [tp for tp in parts
                                  if tp not in withheld and owners.get(tp, member) == member]
        return assignment
