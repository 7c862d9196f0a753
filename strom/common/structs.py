"""Small immutable value types shared by clients and broker."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["TopicPartition", "Node", "OffsetAndMetadata"]


@dataclass(frozen=True, slots=True, order=True)
class TopicPartition:
    """A topic name and a partition number (Kafka's ``TopicPartition``)."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass(frozen=True, slots=True)
class Node:
    """A broker as clients see it (Kafka's ``Node``)."""

    node_id: int
    host: str
    port: int
    rack: str | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    """A committed consumer position."""

    offset: int
    metadata: str = ""
    leader_epoch: int | None = None
