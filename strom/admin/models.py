"""Values the admin client takes and returns.

Kafka counterparts (``org.apache.kafka.clients.admin`` and ``org.apache.kafka.common.config``): ``NewTopic``,
``NewPartitions``, ``TopicListing``, ``TopicDescription``, ``TopicPartitionInfo``, ``ConfigResource``,
``ConfigEntry`` (+ ``ConfigSource``, ``ConfigSynonym``), ``Config``, ``AlterConfigOp``, ``ConsumerGroupListing``,
``ConsumerGroupDescription``, ``MemberDescription``, ``MemberAssignment``, ``ConsumerGroupState``,
``OffsetSpec``, ``ListOffsetsResultInfo``, ``RecordsToDelete``, ``DeletedRecords``, ``ClusterDescription``.

All are immutable frozen dataclasses (thread-safe).
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum, IntEnum

from strom.common.structs import Node, TopicPartition

__all__ = [
    "ReplicaInfo",
    "TopicPartitionReplica",
    "LogDirDescription",
    "ElectionType",
    "NewTopic",
    "NewPartitions",
    "TopicListing",
    "TopicPartitionInfo",
    "TopicDescription",
    "ConfigResourceType",
    "ConfigResource",
    "ConfigSource",
    "ConfigSynonym",
    "ConfigEntry",
    "Config",
    "AlterConfigOpType",
    "AlterConfigOp",
    "ConsumerGroupState",
    "ConsumerGroupListing",
    "MemberAssignment",
    "MemberDescription",
    "ConsumerGroupDescription",
    "OffsetSpec",
    "ListOffsetsResultInfo",
    "RecordsToDelete",
    "DeletedRecords",
    "ClusterDescription",
    "CreatedTopic",
    "topic_id_string",
]


def topic_id_string(topic_id: uuid.UUID | None) -> str:
    """Kafka's ``Uuid.toString``: URL-safe base64 of the 16 bytes, without padding (22 characters)."""
    raw = (topic_id or uuid.UUID(int=0)).bytes
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


# ------------------------------------------------------------------------------------------------ topics

@dataclass(frozen=True, slots=True)
class NewTopic:
    """A topic to create (Kafka's ``NewTopic``). ``None`` partitions / replication factor = the broker's
    defaults; ``replicas_assignments`` (partition → broker ids) excludes both."""

    name: str
    num_partitions: int | None = None
    replication_factor: int | None = None
    replicas_assignments: Mapping[int, list[int]] | None = None
    configs: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class NewPartitions:
    """The partition count a topic should grow to (Kafka's ``NewPartitions.increaseTo``)."""

    total_count: int
    new_assignments: list[list[int]] | None = None

    @classmethod
    def increase_to(cls, total_count: int, new_assignments: list[list[int]] | None = None) -> NewPartitions:
        return cls(total_count, new_assignments)


@dataclass(frozen=True, slots=True)
class CreatedTopic:
    """What the broker reports about a topic it created (Kafka's ``CreateTopicsResult.TopicMetadataAndConfig``)."""

    name: str
    topic_id: uuid.UUID | None
    num_partitions: int
    replication_factor: int
    configs: tuple[ConfigEntry, ...] = ()


@dataclass(frozen=True, slots=True)
class TopicListing:
    """Kafka's ``TopicListing``."""

    name: str
    topic_id: uuid.UUID | None
    is_internal: bool


@dataclass(frozen=True, slots=True)
class TopicPartitionInfo:
    """Kafka's ``TopicPartitionInfo``: a partition's leader (``None`` without one), replicas and ISR."""

    partition: int
    leader: Node | None
    replicas: tuple[Node, ...]
    isr: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class TopicDescription:
    """Kafka's ``TopicDescription``; ``partitions`` sorted by partition number."""

    name: str
    internal: bool
    partitions: tuple[TopicPartitionInfo, ...]
    topic_id: uuid.UUID | None = None
    authorized_operations: frozenset[int] | None = None


class ElectionType(IntEnum):
    """Kafka's ``ElectionType``: PREFERRED moves leadership back to the first replica; UNCLEAN elects a leader
    for a partition without one, from any live replica (data loss possible)."""

    PREFERRED = 0
    UNCLEAN = 1


# ----------------------------------------------------------------------------------------------- configs

class ConfigResourceType(IntEnum):
    """Kafka's ``ConfigResource.Type`` (wire codes)."""

    UNKNOWN = 0
    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8
    CLIENT_METRICS = 16
    GROUP = 32


@dataclass(frozen=True, slots=True)
class ConfigResource:
    """Kafka's ``ConfigResource``: a topic (by name) or a broker (by id as a string; "" = cluster default)."""

    type: ConfigResourceType
    name: str

    def __str__(self) -> str:
        return f"ConfigResource(type={self.type.name}, name='{self.name}')"


class ConfigSource(IntEnum):
    """Kafka's ``ConfigEntry.ConfigSource`` (wire codes of DescribeConfigs v1+)."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    DYNAMIC_CLIENT_METRICS_CONFIG = 7
    DYNAMIC_GROUP_CONFIG = 8

    @classmethod
    def of(cls, code: int) -> ConfigSource:
        try:
            return cls(code)
        except ValueError:
            return cls.UNKNOWN


@dataclass(frozen=True, slots=True)
class ConfigSynonym:
    """Kafka's ``ConfigEntry.ConfigSynonym``."""

    name: str
    value: str | None
    source: ConfigSource


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """Kafka's ``ConfigEntry``. ``is_default`` is true when the value comes from the built-in default."""

    name: str
    value: str | None
    source: ConfigSource = ConfigSource.UNKNOWN
    is_sensitive: bool = False
    is_read_only: bool = False
    synonyms: tuple[ConfigSynonym, ...] = ()
    documentation: str | None = None

    @property
    def is_default(self) -> bool:
        return self.source == ConfigSource.DEFAULT_CONFIG


@dataclass(frozen=True, slots=True)
class Config:
    """Kafka's ``Config``: the entries of one resource, in the broker's order."""

    entries: tuple[ConfigEntry, ...]

    def get(self, name: str) -> ConfigEntry | None:
        for entry in self.entries:
            if entry.name == name:
                return entry
        return None

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)


class AlterConfigOpType(IntEnum):
    """Kafka's ``AlterConfigOp.OpType`` (wire codes of IncrementalAlterConfigs)."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


@dataclass(frozen=True, slots=True)
class AlterConfigOp:
    """Kafka's ``AlterConfigOp``: one change of one key (``value`` is ignored for DELETE)."""

    name: str
    value: str | None
    op_type: AlterConfigOpType = AlterConfigOpType.SET

    def __post_init__(self) -> None:
        # Checked here: a wrong type found only while the request is encoded fails in the admin client's thread.
        if not isinstance(self.name, str):
            raise TypeError(f"AlterConfigOp name must be a str, not {type(self.name).__name__}")
        if self.value is not None and not isinstance(self.value, str):
            raise TypeError(f"AlterConfigOp value must be a str or None, not {type(self.value).__name__}")
        if not isinstance(self.op_type, AlterConfigOpType):
            raise TypeError(f"AlterConfigOp op_type must be an AlterConfigOpType, not {self.op_type!r}")


# ------------------------------------------------------------------------------------------------ groups

class ConsumerGroupState(Enum):
    """Kafka's ``ConsumerGroupState`` (the strings brokers send)."""

    UNKNOWN = "Unknown"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"

    @classmethod
    def parse(cls, name: str | None) -> ConsumerGroupState:
        for state in cls:
            if name is not None and state.value.lower() == name.lower():
                return state
        return cls.UNKNOWN

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, slots=True)
class ConsumerGroupListing:
    """Kafka's ``ConsumerGroupListing``."""

    group_id: str
    is_simple_consumer_group: bool
    state: ConsumerGroupState | None = None
    type: str | None = None


@dataclass(frozen=True, slots=True)
class MemberAssignment:
    """Kafka's ``MemberAssignment``."""

    topic_partitions: frozenset[TopicPartition] = frozenset()


@dataclass(frozen=True, slots=True)
class MemberDescription:
    """Kafka's ``MemberDescription``."""

    consumer_id: str
    group_instance_id: str | None
    client_id: str
    host: str
    assignment: MemberAssignment = MemberAssignment()


@dataclass(frozen=True, slots=True)
class ConsumerGroupDescription:
    """Kafka's ``ConsumerGroupDescription``. An unknown group is described with state ``DEAD``."""

    group_id: str
    is_simple_consumer_group: bool
    members: tuple[MemberDescription, ...]
    partition_assignor: str
    state: ConsumerGroupState
    coordinator: Node | None
    authorized_operations: frozenset[int] | None = None


# ------------------------------------------------------------------------------------ offsets / records

@dataclass(frozen=True, slots=True)
class OffsetSpec:
    """Kafka's ``OffsetSpec``: ``earliest()``, ``latest()``, ``max_timestamp()`` or ``for_timestamp(ms)``;
    ``timestamp`` is the ListOffsets wire value (-2, -1, -3 or a timestamp)."""

    timestamp: int

    EARLIEST_TIMESTAMP = -2
    LATEST_TIMESTAMP = -1
    MAX_TIMESTAMP = -3

    @classmethod
    def earliest(cls) -> OffsetSpec:
        return cls(-2)

    @classmethod
    def latest(cls) -> OffsetSpec:
        return cls(-1)

    @classmethod
    def max_timestamp(cls) -> OffsetSpec:
        return cls(-3)

    @classmethod
    def for_timestamp(cls, timestamp_ms: int) -> OffsetSpec:
        if timestamp_ms < 0:
            raise ValueError(f"timestamp must be >= 0, got {timestamp_ms}")
        return cls(timestamp_ms)


@dataclass(frozen=True, slots=True)
class ListOffsetsResultInfo:
    """Kafka's ``ListOffsetsResult.ListOffsetsResultInfo`` (offset -1 = no such record)."""

    offset: int
    timestamp: int
    leader_epoch: int | None


@dataclass(frozen=True, slots=True)
class RecordsToDelete:
    """Kafka's ``RecordsToDelete.beforeOffset`` (-1 = up to the high watermark)."""

    before_offset: int

    @classmethod
    def before(cls, offset: int) -> RecordsToDelete:
        return cls(offset)


@dataclass(frozen=True, slots=True)
class DeletedRecords:
    """Kafka's ``DeletedRecords``: the partition's new low watermark (log start offset)."""

    low_watermark: int


@dataclass(frozen=True, slots=True)
class ClusterDescription:
    """What ``describe_cluster`` returns, resolved (Kafka's ``DescribeClusterResult`` futures' values)."""

    cluster_id: str | None
    controller: Node | None
    nodes: tuple[Node, ...]
    authorized_operations: frozenset[int] | None = None


def sorted_nodes(nodes: Iterable[Node]) -> tuple[Node, ...]:
    return tuple(sorted(nodes, key=lambda n: n.node_id))


@dataclass(frozen=True, slots=True, order=True)
class TopicPartitionReplica:
    """Kafka's ``TopicPartitionReplica``: the replica of a partition on one broker."""

    topic: str
    partition: int
    broker_id: int


@dataclass(frozen=True, slots=True)
class ReplicaInfo:
    """A replica in a log directory (Kafka's ``ReplicaInfo``): bytes on disk, how far its log end is behind the
    high watermark, and whether it is a future replica (being moved between directories)."""

    size: int
    offset_lag: int
    is_future: bool = False


@dataclass(frozen=True, slots=True)
class LogDirDescription:
    """One log directory of a broker (Kafka's ``LogDirDescription``): ``error`` is None or the directory's error
    (``KafkaStorageError`` for an offline one); total and usable bytes are None from brokers before
    DescribeLogDirs v4."""

    error: BaseException | None
    replica_infos: dict[TopicPartition, ReplicaInfo]
    total_bytes: int | None = None
    usable_bytes: int | None = None
