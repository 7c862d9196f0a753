"""Requests from this broker to whichever broker is the controller: AlterPartition and ControlledShutdown.

Kafka counterpart: ``BrokerToControllerChannelManager`` + ``AlterPartitionManager``. The controller is found in
the metadata cache (or, when it is this broker, called directly); a NOT_CONTROLLER answer or a broken connection
means the controller moved, so the request is retried against the new one until its deadline. Event loop only.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from strom.common.error_codes import ErrorCode
from strom.common.errors import KafkaConnectionError
from strom.common.structs import TopicPartition
from strom.protocol.api_keys import ApiKey
from strom.protocol.messages.alter_partition import AlterPartitionRequest
from strom.protocol.messages.controlled_shutdown import ControlledShutdownRequest
from strom.server.broker_channel import BrokerChannel
from strom.server.metadata_cache import MetadataCache
from strom.server.partition import LeaderAndIsr
from strom.server.security.inter_broker import InterBrokerSecurity

__all__ = ["ControllerChannel"]

log = logging.getLogger("strom.server")


class ControllerChannel:
    def __init__(self, node_id: int, metadata: MetadataCache, listener: str, controller: Any,
                 *, timeout_s: float = 30.0, security: InterBrokerSecurity | None = None) -> None:
        self.node_id = node_id
        self.security = security
        self.metadata = metadata
        self.listener = listener
        self.controller = controller  # this broker's KafkaController (used directly when it is active)
        self.timeout_s = timeout_s
        self.broker_epoch = -1
        self._channel: BrokerChannel | None = None

    async def _send(self, api_key: int, version: int, body: Any, deadline: float) -> Any:
        loop = asyncio.get_running_loop()
        backoff = 0.05
        while True:
            cid = self.metadata.controller_id()
            b = self.metadata.broker(cid) if cid >= 0 else None
            ep = (b.endpoint(self.listener) or b.endpoint()) if b is not None else None
            if ep is not None:
                if self._channel is None:
                    self._channel = BrokerChannel(ep[0], ep[1], f"strom-broker-{self.node_id}-to-controller",
                                                  security=self.security)
                else:
                    self._channel.retarget(ep[0], ep[1])
                try:
                    resp = await self._channel.request(api_key, version, body,
                                                       timeout_s=max(0.1, deadline - loop.time()))
                    if getattr(resp, "error_code", ErrorCode.NONE) != ErrorCode.NOT_CONTROLLER:
                        return resp
                except KafkaConnectionError as e:
                    log.debug("controller request failed: %s", e)
            if loop.time() + backoff > deadline:
                raise KafkaConnectionError("no controller answered in time")
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 1.0)

    async def alter_partition(self, tp: TopicPartition, proposed: LeaderAndIsr) -> LeaderAndIsr | None:
        """Propose an ISR; the state the controller committed, or None when it refused (a newer state exists)."""
        if self.controller is not None and self.controller.active:
            results = await self.controller.call(
                "alter_partition", (self.node_id, [(tp, proposed.leader_epoch, proposed.isr, proposed.partition_epoch)]))
            code, st = results[tp]
            return None if code or st is None else LeaderAndIsr(st.leader, st.leader_epoch, list(st.isr),
                                                                st.zk_version)
        req = AlterPartitionRequest(broker_id=self.node_id, broker_epoch=self.broker_epoch, topics=[
            AlterPartitionRequest.TopicData(topic_name=tp.topic, partitions=[AlterPartitionRequest.PartitionData(
                partition_index=tp.partition, leader_epoch=proposed.leader_epoch, new_isr=list(proposed.isr),
                leader_recovery_state=0, partition_epoch=proposed.partition_epoch)])])
        resp = await self._send(ApiKey.ALTER_PARTITION, 1, req, asyncio.get_running_loop().time() + self.timeout_s)
        for t in resp.topics:
            for p in t.partitions:
                if p.error_code == ErrorCode.NONE:
                    return LeaderAndIsr(p.leader_id, p.leader_epoch, list(p.isr), p.partition_epoch)
                log.info("%s: AlterPartition refused with error %d", tp, p.error_code)
        return None

    async def controlled_shutdown(self, retries: int, backoff_ms: int) -> bool:
        """Ask the controller to move leadership away; True once no partition is left on this broker."""
        loop = asyncio.get_running_loop()
        for attempt in range(retries + 1):
            try:
                if self.controller is not None and self.controller.active:
                    code, remaining = await self.controller.call("controlled_shutdown", self.node_id)
                else:
                    resp = await self._send(ApiKey.CONTROLLED_SHUTDOWN, 3,
                                            ControlledShutdownRequest(broker_id=self.node_id,
                                                                      broker_epoch=self.broker_epoch),
                                            loop.time() + self.timeout_s)
                    code, remaining = resp.error_code, resp.remaining_partitions
                if code == ErrorCode.NONE and not remaining:
                    return True
                log.info("controlled shutdown attempt %d: error %d, %d partition(s) remaining", attempt + 1, code,
                         len(remaining))
            except KafkaConnectionError as e:
                log.info("controlled shutdown attempt %d failed: %s", attempt + 1, e)
            await asyncio.sleep(backoff_ms / 1000)
        return False

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
