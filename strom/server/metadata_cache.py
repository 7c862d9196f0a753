"""What a broker knows of the cluster: brokers, the controller, topics, partition leaders/ISR and topic configs.

Kafka counterpart: ``MetadataCache`` (``ZkMetadataCache`` in ZooKeeper mode, filled by the controller's
UpdateMetadata requests). One interface, two implementations: :class:`StandaloneMetadata` (one broker that is its
own controller, topics kept in ``topics.json``) and ``ZkMetadataCache`` (cluster mode). Request handlers read
only this interface and never ask which mode they are in. Event loop only.
"""

from __future__ import annotations

import base64
import json
import re
import uuid
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from strom.common.error_codes import ErrorCode
from strom.common.structs import TopicPartition
from strom.storage.fs import atomic_write

__all__ = [
    "BrokerInfo", "PartitionState", "TopicInfo", "MetadataCache", "StandaloneMetadata", "validate_topic_name",
    "INTERNAL_TOPICS", "MAX_TOPIC_NAME_LENGTH", "new_cluster_id",
]

MAX_TOPIC_NAME_LENGTH = 249
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
_LEGAL = re.compile(r"^[a-zA-Z0-9._-]+$")


def validate_topic_name(name: str | None) -> str | None:
    """Return an error message when ``name`` is not a legal Kafka topic name, else None (Kafka's ``Topic.validate``)."""
    if name is None or name == "":
        return "Topic name is illegal, it can't be empty"
    if name in (".", ".."):
        return "Topic name cannot be \".\" or \"..\""
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        return f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME_LENGTH} characters, topic name: {name}"
    if not _LEGAL.match(name):
        return (
            f"Topic name \"{name}\" is illegal, it contains a character other than ASCII alphanumerics, '.', '_' and '-'"
        )
    return None


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    """A live broker: its id, rack and advertised endpoints by listener name (``{"PLAINTEXT": (host, port)}``)."""

    node_id: int
    endpoints: dict[str, tuple[str, int]]
    rack: str | None = None

    def endpoint(self, listener: str | None = None) -> tuple[str, int] | None:
        if listener is not None and listener in self.endpoints:
            return self.endpoints[listener]
        return next(iter(self.endpoints.values()), None) if listener is None else None


@dataclass(slots=True)
class PartitionState:
    """One partition's leadership as the controller last published it (Kafka's UpdateMetadataPartitionState)."""

    leader: int
    leader_epoch: int
    isr: list[int]
    replicas: list[int]
    offline_replicas: list[int] = field(default_factory=list)
    adding_replicas: list[int] = field(default_factory=list)
    removing_replicas: list[int] = field(default_factory=list)


@dataclass(slots=True)
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    partitions: list[PartitionState]
    configs: dict[str, str] = field(default_factory=dict)

    @property
    def num_partitions(self) -> int:
        return len(self.partitions)

    @property
    def replication_factor(self) -> int:
        return len(self.partitions[0].replicas) if self.partitions else 0

    @property
    def is_internal(self) -> bool:
        return self.name in INTERNAL_TOPICS


class MetadataCache(ABC):
    """The read side every request handler uses."""

    cluster_id: str

    @abstractmethod
    def controller_id(self) -> int:
        """The active controller's broker id, -1 when there is none."""

    @abstractmethod
    def alive_brokers(self) -> list[BrokerInfo]:
        """Registered (live) brokers, ordered by id."""

    def broker(self, node_id: int) -> BrokerInfo | None:
        return next((b for b in self.alive_brokers() if b.node_id == node_id), None)

    @abstractmethod
    def topic(self, name: str) -> TopicInfo | None: ...

    @abstractmethod
    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None: ...

    @abstractmethod
    def topics(self) -> list[TopicInfo]:
        """Every topic, ordered by name."""

    def __contains__(self, name: str) -> bool:
        return self.topic(name) is not None

    def partition_state(self, tp: TopicPartition) -> PartitionState | None:
        info = self.topic(tp.topic)
        if info is None or not 0 <= tp.partition < info.num_partitions:
            return None
        return info.partitions[tp.partition]

    # -- what the controller sends (cluster mode) --------------------------------------------------------------
    async def controller_request_error(self, broker_epoch: int) -> int | None:
        """Why a controller's LeaderAndIsr / UpdateMetadata / StopReplica carrying ``broker_epoch`` (the epoch of
        this broker's registration the controller knew) is refused, None when it is not. A standalone broker has
        no controller: STALE_CONTROLLER_EPOCH."""
        return ErrorCode.STALE_CONTROLLER_EPOCH

    def apply_update_metadata(self, request: Any) -> tuple[bool, list[TopicPartition]]:
        """Apply UpdateMetadata: (accepted, partitions it deleted)."""
        return False, []

    async def wait_until_initialized(self, timeout_s: float) -> bool:
        """Until this cache holds the cluster's metadata (in a cluster: the controller's first UpdateMetadata
        has arrived), at most ``timeout_s`` seconds; whether it does. A standalone broker's always does."""
        return True

    async def load_topic_configs(self, topics: set[str]) -> None:
        """Make sure the configs of ``topics`` are known before their logs are opened."""
        return None

    def replica_offline(self, tp: TopicPartition) -> None:
        """This broker's replica of ``tp`` is in a failed log dir. In a cluster the controller publishes that
        (UpdateMetadata's offline replicas); a standalone broker's metadata says it itself."""
        return None


class StandaloneMetadata(MetadataCache):
    """One broker leading every partition: the topic registry persisted in ``topics.json`` (first log dir).

    The standalone broker is its own controller, so this class also takes the controller's writes (create,
    delete, grow topics, set configs, producer id blocks); each change is written durably before it is visible.
    """

    FILE_NAME = "topics.json"

    def __init__(self, data_dir: str | Path, node_id: int, endpoints: dict[str, tuple[str, int]],
                 rack: str | None = None) -> None:
        self._path = Path(data_dir) / self.FILE_NAME
        self.node_id = node_id
        self._self = BrokerInfo(node_id, dict(endpoints), rack)
        self._by_name: dict[str, TopicInfo] = {}
        self._by_id: dict[uuid.UUID, TopicInfo] = {}
        self.cluster_id = ""
        self.producer_id_block_end = 0
        self._load()

    def set_endpoints(self, endpoints: dict[str, tuple[str, int]]) -> None:
        """The listeners as bound (port 0 resolved)."""
        self._self = BrokerInfo(self.node_id, dict(endpoints), self._self.rack)

    # -- persistence -------------------------------------------------------------------------------------------
    def _load(self) -> None:
        if not self._path.exists():
            self.cluster_id = new_cluster_id()
            self._save()
            return
        doc = json.loads(self._path.read_text(encoding="utf-8"))
        self.cluster_id = doc.get("cluster_id") or new_cluster_id()
        self.producer_id_block_end = int(doc.get("producer_id_block_end", 0))
        for t in doc.get("topics", []):
            info = TopicInfo(t["name"], uuid.UUID(t["topic_id"]), self._states(int(t["num_partitions"])),
                             dict(t.get("configs", {})))
            self._by_name[info.name] = info
            self._by_id[info.topic_id] = info

    def _states(self, n: int) -> list[PartitionState]:
        me = self.node_id
        return [PartitionState(me, 0, [me], [me]) for _ in range(n)]

    def replica_offline(self, tp: TopicPartition) -> None:
        """No leader (Metadata: LEADER_NOT_AVAILABLE) and this broker listed offline, as Kafka lists a partition
        whose only replica is in a failed log dir; until the broker restarts."""
        info = self.topic(tp.topic)
        if info is not None and 0 <= tp.partition < info.num_partitions:
            st = info.partitions[tp.partition]
            info.partitions[tp.partition] = PartitionState(-1, st.leader_epoch, list(st.isr), list(st.replicas),
                                                           [self.node_id])

    def _save(self) -> None:
        doc = {
            "version": 1,
            "cluster_id": self.cluster_id,
            "producer_id_block_end": self.producer_id_block_end,
            "topics": [
                {"name": t.name, "topic_id": str(t.topic_id), "num_partitions": t.num_partitions, "configs": t.configs}
                for t in sorted(self._by_name.values(), key=lambda t: t.name)
            ],
        }
        self._path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(str(self._path), json.dumps(doc, indent=1, sort_keys=True).encode())

    # -- MetadataCache ----------------------------------------------------------------------------------------
    def controller_id(self) -> int:
        return self.node_id

    def alive_brokers(self) -> list[BrokerInfo]:
        return [self._self]

    def topic(self, name: str) -> TopicInfo | None:
        return self._by_name.get(name)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        return self._by_id.get(topic_id)

    def topics(self) -> list[TopicInfo]:
        return sorted(self._by_name.values(), key=lambda t: t.name)

    # -- the controller's writes ------------------------------------------------------------------------------
    def create_topic(self, name: str, num_partitions: int, configs: dict[str, str] | None = None) -> TopicInfo:
        info = TopicInfo(name, uuid.uuid4(), self._states(num_partitions), dict(configs or {}))
        self._by_name[name] = info
        self._by_id[info.topic_id] = info
        try:
            self._save()
        except OSError:
            self._by_name.pop(name, None)
            self._by_id.pop(info.topic_id, None)
            raise
        return info

    def delete_topic(self, name: str) -> TopicInfo | None:
        info = self._by_name.pop(name, None)
        if info is not None:
            self._by_id.pop(info.topic_id, None)
            try:
                self._save()
            except OSError:
                self._by_name[name] = info
                self._by_id[info.topic_id] = info
                raise
        return info

    def set_partitions(self, name: str, num_partitions: int) -> None:
        info = self._by_name[name]
        old = info.partitions
        info.partitions = old + self._states(num_partitions - len(old))
        try:
            self._save()
        except OSError:
            info.partitions = old
            raise

    def set_configs(self, name: str, configs: dict[str, str]) -> None:
        info = self._by_name[name]
        old = info.configs
        info.configs = dict(configs)
        try:
            self._save()
        except OSError:
            info.configs = old
            raise

    def allocate_producer_id_block(self, size: int) -> int:
        """Reserve ``size`` producer ids durably; returns the first (Kafka's ProducerIdManager blocks)."""
        start = self.producer_id_block_end
        self.producer_id_block_end = start + size
        try:
            self._save()
        except OSError:
            self.producer_id_block_end = start
            raise
        return start


def new_cluster_id() -> str:
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
