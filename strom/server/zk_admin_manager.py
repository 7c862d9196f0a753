"""Topic administration in a cluster: writes go to ZooKeeper, the controller turns them into leaders and replicas.

Kafka counterpart: ``ZkAdminManager`` + ``AdminZkClient`` + the ``DelayedCreatePartitions`` purgatory: the
topic's configs are written first (``/config/topics/<t>``), then its replica assignment (``/brokers/topics/<t>``);
the controller notices, elects leaders and tells every broker; the request is answered once this broker's
metadata shows every new partition with a leader (or REQUEST_TIMED_OUT after the request's timeout, as Kafka
answers; the topic is still created). Deletion marks ``/admin/delete_topics/<t>`` and waits for the controller
to finish. Event loop only; ZooKeeper calls run in worker threads.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable

from strom.common.error_codes import ErrorCode
from strom.common.errors import for_code
from strom.server.admin_manager import AdminManager
from strom.server.metadata_cache import TopicInfo
from strom.server.zk.errors import ZkNodeExistsError, ZkVersionConflictError, ZooKeeperClientError
from strom.server.zk.kafka_zk_client import KafkaZkClient
from strom.server.zk.znodes import ReplicaAssignment
from strom.server.zk_metadata_cache import ZkMetadataCache
from strom.storage.log_config import LogConfig

__all__ = ["ZkAdminManager"]

log = logging.getLogger("strom.server")


class ZkAdminManager(AdminManager):
    def __init__(self, metadata: ZkMetadataCache, zk: KafkaZkClient, default_log_config: LogConfig,
                 on_local_config_change: Callable[[str, dict[str, str]], None], **kw: object) -> None:
        super().__init__(metadata, default_log_config, **kw)  # type: ignore[arg-type]
        self.zk_metadata = metadata
        self.zk = zk
        self._on_local_config_change = on_local_config_change

    async def _zk(self, fn: Callable[..., object], *args: object) -> object:
        try:
            return await asyncio.get_running_loop().run_in_executor(None, fn, *args)
        except ZkNodeExistsError:
            raise
        except ZooKeeperClientError as e:
            raise for_code(ErrorCode.UNKNOWN_SERVER_ERROR, f"ZooKeeper: {e}") from None

    async def create_topic(self, name: str, assignment: list[list[int]], configs: dict[str, str],
                           timeout_ms: int) -> TopicInfo:
        topic_id = uuid.uuid4()
        await self._zk(self.zk.set_topic_config, name, configs, False)
        try:
            await self._zk(self.zk.create_topic_assignment, name, topic_id,
                           {p: ReplicaAssignment(tuple(r)) for p, r in enumerate(assignment)})
        except ZkNodeExistsError:
            raise for_code(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.") from None
        self.zk_metadata.set_topic_configs(name, configs)
        info = await self._await(lambda: self._ready(name, len(assignment)), timeout_ms,
                                 f"Topic {name} was created but its leaders were not elected within {timeout_ms} ms")
        assert info is not None
        return info

    async def create_internal_topic(self, name: str, num_partitions: int, replication_factor: int,
                                    configs: dict[str, str]) -> TopicInfo | None:
        return await self.auto_create_topic(name, configs, num_partitions, replication_factor)

    async def create_partitions(self, info: TopicInfo, new_assignment: list[list[int]], timeout_ms: int) -> None:
        current = await self._zk(self.zk.get_topic_assignment, info.name)
        if current is None:
            raise for_code(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{info.name}' does not exist.")
        partitions = dict(current.partitions)  # type: ignore[attr-defined]
        start = len(partitions)
        for i, replicas in enumerate(new_assignment):
            partitions[start + i] = ReplicaAssignment(tuple(replicas))
        try:
            await self._zk(self.zk.set_topic_assignment, info.name, current.topic_id,  # type: ignore[attr-defined]
                           partitions, current.zk_version)  # type: ignore[attr-defined]
        except ZkVersionConflictError:
            raise for_code(ErrorCode.REASSIGNMENT_IN_PROGRESS,
                           f"The partitions of {info.name} changed concurrently; try again.") from None
        total = len(partitions)
        await self._await(lambda: self._ready(info.name, total), timeout_ms,
                          f"Partitions of {info.name} were added but not all have leaders after {timeout_ms} ms")

    async def delete_topic(self, info: TopicInfo, timeout_ms: int) -> None:
        await self._zk(self.zk.create_delete_topic_path, info.name)
        await self._await(lambda: None if self.metadata.topic(info.name) is not None else info, timeout_ms,
                          f"Topic {info.name} is marked for deletion; the controller has not finished within "
                          f"{timeout_ms} ms")

    async def set_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        await self._zk(self.zk.set_topic_config, name, configs, True)
        self._on_local_config_change(name, configs)

    def _ready(self, name: str, partitions: int) -> TopicInfo | None:
        info = self.metadata.topic(name)
        if info is None or info.num_partitions < partitions or any(st.leader < 0 for st in info.partitions):
            return None
        return info

    async def _await(self, check: Callable[[], TopicInfo | None], timeout_ms: int, message: str) -> TopicInfo | None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(timeout_ms, 0) / 1000
        while True:
            result = check()
            if result is not None:
                return result
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise for_code(ErrorCode.REQUEST_TIMED_OUT, message)
            await self.zk_metadata.wait_for_update(remaining)
