"""Topic administration: create, grow and delete topics, change their configs, auto-create on first use.

Kafka counterpart: ``ZkAdminManager`` + ``AutoTopicCreationManager`` + ``AdminUtils.assignReplicasToBrokers``.
Handlers validate the request (names, counts, factors against the live brokers) and call one
:class:`AdminManager`; the standalone broker applies the change to its own registry and logs, the cluster
broker writes it to ZooKeeper and waits until the controller has made it visible. Event loop only.
"""

from __future__ import annotations

import asyncio
import logging
import random
from abc import ABC, abstractmethod

from strom.common.error_codes import ErrorCode
from strom.common.errors import BrokerResponseError, ConfigError, for_code
from strom.common.structs import TopicPartition
from strom.server.metadata_cache import (
    BrokerInfo,
    MetadataCache,
    StandaloneMetadata,
    TopicInfo,
    validate_topic_name,
)
from strom.server.replica_manager import ReplicaManager
from strom.storage.log_config import LogConfig

__all__ = ["AdminManager", "StandaloneAdminManager", "assign_replicas", "log_not_created", "MAX_PARTITIONS"]

log = logging.getLogger("strom.server")


def log_not_created(topic: str, e: Exception) -> None:
    """Log why a topic was not created on demand (Metadata, FindCoordinator): LEADER_NOT_AVAILABLE (it exists and
    this broker's metadata will show it shortly: a broker that has just started; the client asks again) at debug
    level, anything else as a warning."""
    quiet = isinstance(e, BrokerResponseError) and e.errno == ErrorCode.LEADER_NOT_AVAILABLE
    log.log(logging.DEBUG if quiet else logging.WARNING, "cannot create topic %s: %s", topic, e)

MAX_PARTITIONS = 100_000


def assign_replicas(brokers: list[BrokerInfo], num_partitions: int, replication_factor: int,
                    start_partition: int = 0, *, seed: int | None = None) -> list[list[int]]:
    """Kafka's ``AdminUtils.assignReplicasToBrokers``: spread leaders round-robin from a random start, followers
    shifted so no two partitions share the same replica list; rack-aware when every broker has a rack."""
    if replication_factor <= 0:
        raise for_code(ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0.")
    if replication_factor > len(brokers):
        raise for_code(ErrorCode.INVALID_REPLICATION_FACTOR,
                       f"Replication factor: {replication_factor} larger than available brokers: {len(brokers)}.")
    rnd = random.Random(seed)
    ids = sorted(b.node_id for b in brokers)
    racks = {b.node_id: b.rack for b in brokers}
    if all(racks.values()) and len(set(racks.values())) > 1:
        ids = _rack_alternated(ids, racks)
    n = len(ids)
    start_index = rnd.randrange(n)
    shift = rnd.randrange(n)
    out: list[list[int]] = []
    for i in range(num_partitions):
        p = start_partition + i
        if p > 0 and p % n == 0:
            shift += 1
        first = (p + start_index) % n
        replicas = [ids[first]]
        for j in range(replication_factor - 1):
            replicas.append(ids[(first + 1 + (shift + j) % (n - 1)) % n] if n > 1 else ids[first])
        if len(set(replicas)) != len(replicas):  # only when n == 1 and rf > 1, which the check above refuses
            raise for_code(ErrorCode.INVALID_REPLICATION_FACTOR, "cannot place distinct replicas")
        out.append(replicas)
    if all(racks.values()) and len(set(racks.values())) > 1:
        out = [_rack_spread(r, ids, racks, replication_factor) for r in out]
    return out


def _rack_alternated(ids: list[int], racks: dict[int, str | None]) -> list[int]:
    """Brokers ordered so consecutive ones sit on different racks (Kafka's getRackAlternatedBrokerList)."""
    by_rack: dict[str | None, list[int]] = {}
    for b in ids:
        by_rack.setdefault(racks[b], []).append(b)
    order = sorted(by_rack)
    out: list[int] = []
    while len(out) < len(ids):
        for r in order:
            if by_rack[r]:
                out.append(by_rack[r].pop(0))
    return out


def _rack_spread(replicas: list[int], ids: list[int], racks: dict[int, str | None], rf: int) -> list[int]:
    """Prefer replicas on distinct racks while racks remain, keeping the leader first."""
    chosen = [replicas[0]]
    used = {racks[replicas[0]]}
    start = ids.index(replicas[0])
    all_racks = set(racks.values())
    for k in range(1, len(ids)):
        if len(chosen) == rf:
            break
        b = ids[(start + k) % len(ids)]
        if b in chosen:
            continue
        if racks[b] not in used or used >= all_racks:
            chosen.append(b)
            used.add(racks[b])
    for b in ids:
        if len(chosen) == rf:
            break
        if b not in chosen:
            chosen.append(b)
    return chosen


class AdminManager(ABC):
    """Topic changes as the controller makes them; every method raises BrokerResponseError with Kafka's code."""

    def __init__(self, metadata: MetadataCache, default_log_config: LogConfig, *, num_partitions: int,
                 default_replication_factor: int, auto_create_enable: bool) -> None:
        self.metadata = metadata
        self.default_log_config = default_log_config
        self.num_partitions = num_partitions
        self.default_replication_factor = default_replication_factor
        self.auto_create_enable = auto_create_enable

    def validate_configs(self, configs: dict[str, str]) -> LogConfig:
        try:
            return LogConfig.from_props(configs, self.default_log_config)
        except ConfigError as e:
            raise for_code(ErrorCode.INVALID_CONFIG, str(e)) from None

    def plan_assignment(self, num_partitions: int, replication_factor: int,
                        start_partition: int = 0) -> list[list[int]]:
        brokers = self.metadata.alive_brokers()
        if replication_factor > len(brokers):
            raise for_code(
                ErrorCode.INVALID_REPLICATION_FACTOR,
                f"Unable to replicate the partition {replication_factor} time(s): The target replication factor of "
                f"{replication_factor} cannot be reached because only {len(brokers)} broker(s) are registered.")
        return assign_replicas(brokers, num_partitions, replication_factor, start_partition)

    def check_capacity(self, new_partitions: int) -> None:
        """Refuse partitions this broker could not host (file descriptors, memory) before anything is written.
        In a cluster the replicas land on other brokers too, so only the standalone broker checks."""
        return None

    def check_assignment(self, assignment: list[list[int]]) -> None:
        alive = {b.node_id for b in self.metadata.alive_brokers()}
        for i, replicas in enumerate(assignment):
            if not replicas or len(set(replicas)) != len(replicas):
                raise for_code(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                               f"Duplicate or empty replica list {replicas} for partition {i}.")
            dead = [b for b in replicas if b not in alive]
            if dead:
                raise for_code(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                               f"Replica assignment {replicas} names broker(s) {dead} that are not registered.")
        if len({len(r) for r in assignment}) > 1:
            raise for_code(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                           "All partitions should have the same number of replicas.")

    @abstractmethod
    async def create_topic(self, name: str, assignment: list[list[int]], configs: dict[str, str],
                           timeout_ms: int) -> TopicInfo:
        """Create ``name`` with one replica list per partition (first = preferred leader)."""

    @abstractmethod
    async def create_partitions(self, info: TopicInfo, new_assignment: list[list[int]], timeout_ms: int) -> None:
        """Append partitions with these replica lists."""

    @abstractmethod
    async def delete_topic(self, info: TopicInfo, timeout_ms: int) -> None: ...

    @abstractmethod
    async def set_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        """Replace ``name``'s complete override set."""

    @abstractmethod
    async def create_internal_topic(self, name: str, num_partitions: int, replication_factor: int,
                                    configs: dict[str, str]) -> TopicInfo | None:
        """Create an internal topic (``__consumer_offsets``) on first use; None when it cannot exist yet."""

    async def auto_create_topic(self, name: str, internal_configs: dict[str, str] | None = None,
                                num_partitions: int | None = None, replication_factor: int | None = None,
                                ) -> TopicInfo | None:
        """Create ``name`` with the broker defaults when allowed (Kafka's AutoTopicCreationManager).

        Returns None when auto-creation is off or the name is not legal; raises BrokerResponseError when it
        cannot be done now (e.g. too few live brokers: INVALID_REPLICATION_FACTOR), LEADER_NOT_AVAILABLE when
        the topic exists but this broker has no metadata for it yet (as Kafka's ``AutoTopicCreationManager``
        answers TOPIC_ALREADY_EXISTS: a broker that has just started, before the controller's first
        UpdateMetadata). UNKNOWN_TOPIC_OR_PARTITION there would tell clients the topic is gone: librdkafka then
        drops its partition count to 0 and fails every record queued for it.
        """
        existing = self.metadata.topic(name)
        if existing is not None:
            return existing
        if internal_configs is None:
            if not self.auto_create_enable or validate_topic_name(name) is not None or name.startswith("__"):
                return None
        rf = replication_factor if replication_factor is not None else self.default_replication_factor
        n = num_partitions if num_partitions is not None else self.num_partitions
        assignment = self.plan_assignment(n, rf)
        try:
            info = await self.create_topic(name, assignment, dict(internal_configs or {}), 30_000)
        except BrokerResponseError as e:
            if e.errno == ErrorCode.TOPIC_ALREADY_EXISTS:
                info = self.metadata.topic(name)
                if info is None:
                    raise for_code(ErrorCode.LEADER_NOT_AVAILABLE,
                                   f"Topic '{name}' exists; this broker has no metadata for it yet.") from None
                return info
            raise
        log.info("auto-created topic %s with %d partition(s), replication factor %d", name, n, rf)
        return info


class StandaloneAdminManager(AdminManager):
    """The single broker is its own controller: changes go to ``topics.json`` and the local logs."""

    def __init__(self, metadata: StandaloneMetadata, replica_manager: ReplicaManager, default_log_config: LogConfig,
                 **kw: object) -> None:
        super().__init__(metadata, default_log_config, **kw)  # type: ignore[arg-type]
        self.standalone = metadata
        self.replica_manager = replica_manager
        self._lock = asyncio.Lock()

    def check_capacity(self, new_partitions: int) -> None:
        problem = self.replica_manager.log_manager.check_capacity(new_partitions)
        if problem is not None:
            raise for_code(ErrorCode.INVALID_PARTITIONS, problem)

    async def create_topic(self, name: str, assignment: list[list[int]], configs: dict[str, str],
                           timeout_ms: int) -> TopicInfo:

        async with self._lock:
            if name in self.standalone:
                raise for_code(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
            # The logs first, the registry entry last: a topic is visible only once every partition can take
            # records, and a registry entry always has its logs (the broker can start from it).
            tps = [TopicPartition(name, p) for p in range(len(assignment))]
            await self._open_logs(tps, LogConfig.from_props(configs, self.default_log_config))
            try:
                info = self._persist(lambda: self.standalone.create_topic(name, len(assignment), configs))
            except BrokerResponseError:
                self.replica_manager.log_manager_delete(tps)
                raise
            self.replica_manager.lead_locally(info)
            return info

    async def create_internal_topic(self, name: str, num_partitions: int, replication_factor: int,
                                    configs: dict[str, str]) -> TopicInfo | None:
        # The standalone broker is the whole cluster: one replica is all there can be (docs/divergences.md).
        return await self.auto_create_topic(name, configs, num_partitions, 1)

    async def create_partitions(self, info: TopicInfo, new_assignment: list[list[int]], timeout_ms: int) -> None:

        async with self._lock:
            old, new = info.num_partitions, info.num_partitions + len(new_assignment)
            tps = [TopicPartition(info.name, p) for p in range(old, new)]
            await self._open_logs(tps, self.replica_manager.log_config(info.name))
            try:
                self._persist(lambda: self.standalone.set_partitions(info.name, new))
            except BrokerResponseError:
                self.replica_manager.log_manager_delete(tps)
                raise
            self.replica_manager.lead_locally(info)

    async def delete_topic(self, info: TopicInfo, timeout_ms: int) -> None:

        async with self._lock:
            # Logs first: on a full disk the deletion is what frees the space the registry write needs.
            self.replica_manager.delete_partitions(TopicPartition(info.name, p) for p in range(info.num_partitions))
            self._persist(lambda: self.standalone.delete_topic(info.name))

    async def set_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        self._persist(lambda: self.standalone.set_configs(name, configs))
        self.replica_manager.topic_config_changed(name)

    @staticmethod
    def _persist(fn):  # type: ignore[no-untyped-def]
        try:
            return fn()
        except OSError as e:
            log.error("cannot write the topic registry: %s", e)
            raise for_code(ErrorCode.KAFKA_STORAGE_ERROR, f"Cannot write the topic registry: {e}") from None

    async def _open_logs(self, tps: list[TopicPartition], cfg: LogConfig) -> None:
        # Opening thousands of logs takes seconds: do the file work in a thread so requests keep flowing.
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(None, self.replica_manager.log_manager.get_or_create_logs, tps, cfg)
        except OSError as e:
            log.error("cannot create the logs of %s: %s", tps[0].topic if tps else "?", e)
            self.replica_manager.log_manager_delete(tps)
            raise for_code(ErrorCode.KAFKA_STORAGE_ERROR, f"Cannot create the logs of {tps[0].topic}: {e}") from None
