"""An immutable snapshot of cluster metadata.

Kafka counterparts: ``org.apache.kafka.common.Cluster``, ``PartitionInfo`` and ``MetadataCache``'s cluster view.
:class:`Cluster` implements the producer's :class:`~strom.producer.internals.cluster_view.ClusterView`
(``leader_for``, ``partitions_for_topic``, ``available_partitions_for_topic``, ``partitions_for_node``,
``node_by_id``) plus Kafka's other accessors (partition counts, invalid / unauthorized / internal topics,
topic ids, controller, cluster id). Lists returned by the hot-path accessors are shared: do not mutate them.

Thread-safety: immutable; any thread may read a snapshot while the I/O thread builds the next one.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from strom.common.structs import Node, TopicPartition

__all__ = ["Cluster", "PartitionInfo"]

_EMPTY: list = []  # type: ignore[type-arg]


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """One partition as metadata describes it (Kafka's ``PartitionInfo``); ``leader`` is ``None`` without
    a leader."""

    topic: str
    partition: int
    leader: Node | None
    replicas: tuple[Node, ...] = ()
    in_sync_replicas: tuple[Node, ...] = ()
    offline_replicas: tuple[Node, ...] = ()
    leader_epoch: int | None = None

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


class Cluster:
    """Kafka's ``Cluster``: nodes, partitions and their leaders at one point in time. Immutable."""

    __slots__ = ("cluster_id", "_nodes", "_nodes_by_id", "_partitions", "_by_topic", "_partition_numbers",
                 "_available", "_by_node", "unauthorized_topics", "invalid_topics", "internal_topics",
                 "controller", "_topic_ids", "_topic_names", "is_bootstrap_configured", "_leaders")

    def __init__(
        self,
        cluster_id: str | None,
        nodes: Iterable[Node],
        partitions: Iterable[PartitionInfo],
        unauthorized_topics: Iterable[str] = (),
        invalid_topics: Iterable[str] = (),
        internal_topics: Iterable[str] = (),
        controller: Node | None = None,
        topic_ids: Mapping[str, uuid.UUID] | None = None,
        is_bootstrap_configured: bool = False,
    ) -> None:
        self.cluster_id = cluster_id
        self._nodes = list(nodes)
        self._nodes_by_id = {n.node_id: n for n in self._nodes}
        self._partitions: dict[TopicPartition, PartitionInfo] = {}
        self._leaders: dict[TopicPartition, Node | None] = {}
        by_topic: dict[str, list[PartitionInfo]] = {}
        for p in partitions:
            tp = TopicPartition(p.topic, p.partition)
            self._partitions[tp] = p
            self._leaders[tp] = p.leader
            by_topic.setdefault(p.topic, []).append(p)
        self._by_topic: dict[str, list[PartitionInfo]] = {}
        self._partition_numbers: dict[str, list[int]] = {}
        self._available: dict[str, list[int]] = {}
        self._by_node: dict[int, list[TopicPartition]] = {}
        for topic in sorted(by_topic):
            infos = sorted(by_topic[topic], key=lambda p: p.partition)
            self._by_topic[topic] = infos
            self._partition_numbers[topic] = [p.partition for p in infos]
            self._available[topic] = [p.partition for p in infos if p.leader is not None]
            for p in infos:
                if p.leader is not None:
                    self._by_node.setdefault(p.leader.node_id, []).append(TopicPartition(topic, p.partition))
        self.unauthorized_topics = frozenset(unauthorized_topics)
        self.invalid_topics = frozenset(invalid_topics)
        self.internal_topics = frozenset(internal_topics)
        self.controller = controller
        self._topic_ids = dict(topic_ids or {})
        self._topic_names = {v: k for k, v in self._topic_ids.items()}
        self.is_bootstrap_configured = is_bootstrap_configured

    @classmethod
    def empty(cls) -> Cluster:
        return cls(None, (), ())

    @classmethod
    def bootstrap(cls, addresses: Iterable[tuple[str, int]]) -> Cluster:
        """Only the bootstrap servers, with ids -1, -2, ... (Kafka's ``Cluster.bootstrap``)."""
        nodes = [Node(-(i + 1), host, port) for i, (host, port) in enumerate(addresses)]
        return cls(None, nodes, (), is_bootstrap_configured=True)

    # ----------------------------------------------------------------------------------- ClusterView

    def leader_for(self, tp: TopicPartition) -> Node | None:
        return self._leaders.get(tp)

    def partitions_for_topic(self, topic: str) -> list[int]:
        return self._partition_numbers.get(topic, _EMPTY)

    def available_partitions_for_topic(self, topic: str) -> list[int]:
        return self._available.get(topic, _EMPTY)

    def partitions_for_node(self, node_id: int) -> list[TopicPartition]:
        return self._by_node.get(node_id, _EMPTY)

    def node_by_id(self, node_id: int) -> Node | None:
        return self._nodes_by_id.get(node_id)

    # ---------------------------------------------------------------------------------- Kafka extras

    @property
    def nodes(self) -> list[Node]:
        return self._nodes

    def partition(self, tp: TopicPartition) -> PartitionInfo | None:
        return self._partitions.get(tp)

    def partition_infos_for_topic(self, topic: str) -> list[PartitionInfo]:
        """Kafka's ``partitionsForTopic``: every partition's :class:`PartitionInfo`."""
        return list(self._by_topic.get(topic, ()))

    def available_partition_infos_for_topic(self, topic: str) -> list[PartitionInfo]:
        return [p for p in self._by_topic.get(topic, ()) if p.leader is not None]

    def partition_infos_for_node(self, node_id: int) -> list[PartitionInfo]:
        return [self._partitions[tp] for tp in self._by_node.get(node_id, ())]

    def partition_count_for_topic(self, topic: str) -> int | None:
        """The number of partitions, or ``None`` when the topic is unknown."""
        numbers = self._partition_numbers.get(topic)
        return None if numbers is None else len(numbers)

    def topics(self) -> set[str]:
        return set(self._by_topic)

    def topic_id(self, topic: str) -> uuid.UUID | None:
        return self._topic_ids.get(topic)

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        return self._topic_names.get(topic_id)

    def topic_ids(self) -> dict[str, uuid.UUID]:
        return dict(self._topic_ids)

    def all_partitions(self) -> list[PartitionInfo]:
        return list(self._partitions.values())

    def __repr__(self) -> str:
        return (f"Cluster(id = {self.cluster_id}, nodes = {self._nodes}, partitions = "
                f"{len(self._partitions)}, controller = {self.controller})")
