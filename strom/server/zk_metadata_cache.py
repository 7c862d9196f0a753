"""The cluster as the controller last described it to this broker (ZooKeeper mode).

Kafka counterpart: ``ZkMetadataCache``: filled by the controller's UpdateMetadata requests (live brokers with their
endpoints and racks, every partition's leader, epoch, ISR and replicas) and fenced on the controller epoch. Topic
configs come from ZooKeeper (``/config/topics/<t>``), read when a topic first appears and on config change
notifications. Event loop only.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any

from strom.common.error_codes import ErrorCode
from strom.common.structs import TopicPartition
from strom.protocol.messages.update_metadata import UpdateMetadataRequest
from strom.server.metadata_cache import BrokerInfo, MetadataCache, PartitionState, TopicInfo

__all__ = ["ZkMetadataCache"]

log = logging.getLogger("strom.server")

LEADER_DURING_DELETE = -2


class ZkMetadataCache(MetadataCache):
    def __init__(self, node_id: int, cluster_id: str, zk: Any = None, local: BrokerInfo | None = None) -> None:
        self.node_id = node_id
        self.local = local
        self.zk = zk
        self.cluster_id = cluster_id
        self._controller_id = -1
        self._controller_epoch = -1
        self.broker_epoch = -1  # of this broker's registration in ZooKeeper (its czxid); -1 until registered
        self._registered = asyncio.Event()
        self._brokers: dict[int, BrokerInfo] = {}
        self._topics: dict[str, TopicInfo] = {}
        self._by_id: dict[uuid.UUID, TopicInfo] = {}
        self._states: dict[TopicPartition, PartitionState] = {}
        self.topic_configs: dict[str, dict[str, str]] = {}
        self._topic_ids: dict[str, uuid.UUID] = {}
        self._update_waiters: list[asyncio.Future[None]] = []
        self.initialized = False  # the controller's first UpdateMetadata has been applied
        self._told_uninitialized = False

    # -- MetadataCache ----------------------------------------------------------------------------------------
    def controller_id(self) -> int:
        return self._controller_id

    def set_controller_id(self, controller_id: int) -> None:
        self._controller_id = controller_id

    def alive_brokers(self) -> list[BrokerInfo]:
        if not self._brokers and self.local is not None:
            # Before the controller's first UpdateMetadata, clients still learn of this broker (not of nothing).
            return [self.local]
        return [self._brokers[b] for b in sorted(self._brokers)]

    def broker(self, node_id: int) -> BrokerInfo | None:
        b = self._brokers.get(node_id)
        if b is None and self.local is not None and node_id == self.node_id and not self._brokers:
            return self.local
        return b

    def topic(self, name: str) -> TopicInfo | None:
        return self._topics.get(name)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        return self._by_id.get(topic_id)

    def topics(self) -> list[TopicInfo]:
        return [self._topics[t] for t in sorted(self._topics)]

    # -- updates ----------------------------------------------------------------------------------------------
    def set_broker_epoch(self, epoch: int) -> None:
        """This broker registered in ZooKeeper (again) with ``epoch``. Event loop only."""
        self.broker_epoch = epoch
        self._registered.set()

    async def controller_request_error(self, broker_epoch: int, registration_wait_s: float = 30.0) -> int | None:
        """KIP-380: STALE_BROKER_EPOCH for a request meant for an earlier registration of this broker -- a
        controller that has not seen the broker restart yet sends what it had queued for the process that died,
        to the same address. Applied, such a LeaderAndIsr made a restarted broker leader, and transaction
        coordinator, at the leader epoch its predecessor held while the controller was moving that leadership
        elsewhere. A request arriving before this broker has registered waits for the registration (Kafka serves
        no request before it), and is refused if that does not come in ``registration_wait_s``. A newer epoch
        passes (the controller can learn it before the broker does); -1 is unknown."""
        if self.broker_epoch < 0:
            try:
                await asyncio.wait_for(self._registered.wait(), registration_wait_s)
            except TimeoutError:
                return ErrorCode.STALE_BROKER_EPOCH
        if 0 <= broker_epoch < self.broker_epoch:
            return ErrorCode.STALE_BROKER_EPOCH
        return None

    async def load_topic_configs(self, topics: set[str]) -> None:
        missing = [t for t in topics if t not in self.topic_configs]
        if not missing or self.zk is None:
            return
        loop = asyncio.get_running_loop()
        for t in missing:
            configs = await loop.run_in_executor(None, self.zk.get_topic_config, t)
            self.set_topic_configs(t, configs)

    def apply_update_metadata(self, req: UpdateMetadataRequest) -> tuple[bool, list[TopicPartition]]:
        """Apply an UpdateMetadata request; returns (accepted, partitions deleted by it)."""
        if req.controller_epoch < self._controller_epoch:
            return False, []
        self._controller_epoch = req.controller_epoch
        self._controller_id = req.controller_id
        self.initialized = True
        brokers = {}
        for b in req.live_brokers:
            brokers[b.id] = BrokerInfo(b.id, {ep.listener: (ep.host, ep.port) for ep in b.endpoints}, b.rack)
        self._brokers = brokers
        deleted: list[TopicPartition] = []
        touched: set[str] = set()
        for ts in req.topic_states:
            for ps in ts.partition_states:
                tp = TopicPartition(ts.topic_name, ps.partition_index)
                if ps.leader == LEADER_DURING_DELETE:
                    if self._states.pop(tp, None) is not None:
                        deleted.append(tp)
                else:
                    self._states[tp] = PartitionState(ps.leader, ps.leader_epoch, list(ps.isr), list(ps.replicas),
                                                      list(ps.offline_replicas))
                touched.add(ts.topic_name)
            if ts.topic_id != uuid.UUID(int=0):
                self._topic_ids[ts.topic_name] = ts.topic_id
        for topic in touched:
            self._rebuild(topic)
        waiters, self._update_waiters = self._update_waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)
        return True, deleted

    async def wait_for_update(self, timeout_s: float) -> None:
        """Return after the next UpdateMetadata (or the timeout)."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._update_waiters.append(fut)
        try:
            await asyncio.wait_for(fut, timeout_s)
        except TimeoutError:
            pass

    async def wait_until_initialized(self, timeout_s: float) -> bool:
        deadline = asyncio.get_running_loop().time() + timeout_s
        while not self.initialized:
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                if not self._told_uninitialized:
                    self._told_uninitialized = True
                    log.warning("broker %d has had no UpdateMetadata from the controller yet: Metadata is answered "
                                "with what this broker knows (itself, no topic)", self.node_id)
                return False
            await self.wait_for_update(remaining)
        return True

    def _rebuild(self, topic: str) -> None:
        parts = sorted((tp.partition, st) for tp, st in self._states.items() if tp.topic == topic)
        old = self._topics.pop(topic, None)
        if old is not None:
            self._by_id.pop(old.topic_id, None)
        if not parts:
            self.topic_configs.pop(topic, None)
            self._topic_ids.pop(topic, None)
            return
        # Partitions are numbered 0..n-1; a gap would be a controller bug, keep what is known in order.
        states = [st for _p, st in parts]
        info = TopicInfo(topic, self._topic_ids.get(topic, uuid.UUID(int=0)), states,
                         self.topic_configs.get(topic, {}))  # not setdefault: load_topic_configs must still load
        self._topics[topic] = info
        self._by_id[info.topic_id] = info

    def set_topic_configs(self, topic: str, configs: dict[str, str]) -> None:
        self.topic_configs[topic] = dict(configs)
        info = self._topics.get(topic)
        if info is not None:
            info.configs = self.topic_configs[topic]
