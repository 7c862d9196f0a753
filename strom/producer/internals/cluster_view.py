"""The read-only cluster view the partitioners and the accumulator need.

Kafka counterpart: the subset of ``org.apache.kafka.common.Cluster`` used by ``Partitioner``,
``RecordAccumulator.ready`` and ``drain``. The real producer metadata implements :class:`ClusterView`;
:class:`StaticCluster` is a small immutable implementation for tests, tools and stubs.

Thread-safety: implementations must be safe to read from any thread (a metadata snapshot is immutable; the
producer swaps snapshots instead of mutating them).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol, runtime_checkable

from strom.common.structs import Node, TopicPartition

__all__ = ["ClusterView", "StaticCluster"]


@runtime_checkable
class ClusterView(Protocol):
    """What the producer internals read from cluster metadata."""

    def leader_for(self, tp: TopicPartition) -> Node | None:
        """The current leader of ``tp``, or ``None`` if unknown / no leader."""

    def partitions_for_topic(self, topic: str) -> list[int]:
        """All partition numbers of ``topic`` (sorted), available or not; empty if the topic is unknown."""

    def available_partitions_for_topic(self, topic: str) -> list[int]:
        """Partition numbers of ``topic`` that currently have a leader (sorted)."""

    def partitions_for_node(self, node_id: int) -> list[TopicPartition]:
        """Partitions led by ``node_id``, in a stable order (the accumulator's drain rotates over it)."""

    def node_by_id(self, node_id: int) -> Node | None:
        """The broker with this id, if known."""


class StaticCluster:
    """An immutable :class:`ClusterView` built from ``{TopicPartition: leader Node or None}``. Thread-safe."""

    __slots__ = ("_leaders", "_by_topic", "_available", "_by_node", "_nodes")

    def __init__(self, leaders: Mapping[TopicPartition, Node | None], nodes: Iterable[Node] = ()) -> None:
        self._leaders = dict(leaders)
        by_topic: dict[str, list[int]] = {}
        available: dict[str, list[int]] = {}
        by_node: dict[int, list[TopicPartition]] = {}
        node_map: dict[int, Node] = {n.node_id: n for n in nodes}
        for tp in sorted(self._leaders):
            leader = self._leaders[tp]
            by_topic.setdefault(tp.topic, []).append(tp.partition)
            if leader is not None:
                available.setdefault(tp.topic, []).append(tp.partition)
                by_node.setdefault(leader.node_id, []).append(tp)
                node_map.setdefault(leader.node_id, leader)
        self._by_topic = by_topic
        self._available = available
        self._by_node = by_node
        self._nodes = node_map

    @classmethod
    def with_partitions(cls, nodes: Iterable[Node], topics: Mapping[str, int]) -> StaticCluster:
        """Topics with ``n`` partitions each, leaders assigned round-robin over ``nodes``."""
        node_list = list(nodes)
        leaders: dict[TopicPartition, Node | None] = {}
        i = 0
        for topic, count in topics.items():
            for p in range(count):
                leaders[TopicPartition(topic, p)] = node_list[i % len(node_list)] if node_list else None
                i += 1
        return cls(leaders, node_list)

    def leader_for(self, tp: TopicPartition) -> Node | None:
        return self._leaders.get(tp)

    def partitions_for_topic(self, topic: str) -> list[int]:
        return list(self._by_topic.get(topic, ()))

    def available_partitions_for_topic(self, topic: str) -> list[int]:
        return list(self._available.get(topic, ()))

    def partitions_for_node(self, node_id: int) -> list[TopicPartition]:
        return list(self._by_node.get(node_id, ()))

    def node_by_id(self, node_id: int) -> Node | None:
        return self._nodes.get(node_id)

    @property
    def nodes(self) -> list[Node]:
        return list(self._nodes.values())

    def __repr__(self) -> str:
        return f"StaticCluster(partitions={len(self._leaders)}, nodes={sorted(self._nodes)})"
