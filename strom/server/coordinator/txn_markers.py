"""Writing transaction markers (COMMIT / ABORT control batches) to the partitions of a transaction.

Kafka counterpart: ``TransactionMarkerChannelManager`` (coordinator side: group the partitions by leader and send
each leader one WriteTxnMarkers request) and ``KafkaApis.handleWriteTxnMarkersRequest`` (leader side: append the
control batch with acks=-1 as the coordinator, then tell the group coordinator about markers that land in
``__consumer_offsets`` so transactional offsets become visible or are dropped).

A partition this broker leads is written here directly; the others go to their leader's inter-broker listener.
A partition whose topic this broker's metadata no longer knows counts as done (deleted: Kafka drops it too); every
error but a fenced producer or coordinator epoch is retried, UNKNOWN_TOPIC_OR_PARTITION included (a restarted
leader answers it until it has its LeaderAndIsr). Event loop only.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from strom.common.error_codes import ErrorCode as E
from strom.common.errors import KafkaError, error_class
from strom.common.structs import TopicPartition
from strom.protocol.api_keys import ApiKey
from strom.protocol.messages.write_txn_markers import WriteTxnMarkersRequest
from strom.record.control import ControlRecordType, build_control_batch
from strom.server.broker_channel import BrokerChannels
from strom.server.coordinator.offset_config import GROUP_METADATA_TOPIC_NAME
from strom.storage.log_validator import AppendOrigin

if TYPE_CHECKING:
    from strom.common.time import Time
    from strom.server.coordinator.group_coordinator import GroupCoordinator
    from strom.server.metadata_cache import MetadataCache
    from strom.server.replica_manager import ReplicaManager
    from strom.server.security.inter_broker import InterBrokerSecurity

__all__ = ["TxnMarkerWriter", "write_markers_locally"]

log = logging.getLogger("strom.coordinator")

WRITE_TXN_MARKERS_VERSION = 1


async def write_markers_locally(replica_manager: ReplicaManager, group_coordinator: GroupCoordinator | None,
                                time: Time, producer_id: int, producer_epoch: int, commit: bool,
                                coordinator_epoch: int, partitions: Iterable[TopicPartition],
                                timeout_ms: int = 30_000) -> dict[TopicPartition, int]:
    """Append the marker to each partition (this broker must lead it); an error code per partition."""
    kind = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
    now = time.milliseconds()
    entries: dict[TopicPartition, memoryview | bytes] = {
        tp: build_control_batch(kind, coordinator_epoch, producer_id, producer_epoch, now) for tp in partitions}
    results = await replica_manager.append_records(entries, -1, timeout_ms, origin=AppendOrigin.COORDINATOR)
    out: dict[TopicPartition, int] = {}
    for tp, r in results.items():
        out[tp] = r.error_code
        if r.error_code == E.NONE and tp.topic == GROUP_METADATA_TOPIC_NAME and group_coordinator is not None:
            group_coordinator.txn_offsets.complete(producer_id, tp.partition, commit)
        elif r.error_code:
            log.info("marker for producer %d to %s failed: error %d (%s)", producer_id, tp, r.error_code,
                     r.error_message)
    return out


class TxnMarkerWriter:
    """Writes the markers of one transaction wherever its partitions are led."""

    def __init__(self, node_id: int, metadata: MetadataCache, replica_manager: ReplicaManager,
                 group_coordinator: GroupCoordinator | None, time: Time, listener: str | None,
                 timeout_ms: int = 30_000, security: InterBrokerSecurity | None = None) -> None:
        self.node_id = node_id
        self.metadata = metadata
        self.replica_manager = replica_manager
        self.group_coordinator = group_coordinator
        self.time = time
        self.timeout_ms = timeout_ms
        self._channels = BrokerChannels(metadata, listener, f"txn-markers-{node_id}", timeout_s=timeout_ms / 1000,
                                        security=security)

    async def write(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                    partitions: Iterable[TopicPartition]) -> set[TopicPartition]:
        """Write the markers; returns the partitions that still need one (no leader, leader unreachable...)."""
        by_leader: dict[int, list[TopicPartition]] = {}
        pending: set[TopicPartition] = set()
        for tp in partitions:
            info = self.metadata.topic(tp.topic)
            if info is None or tp.partition >= info.num_partitions:
                continue  # deleted meanwhile: nothing to mark
            st = self.metadata.partition_state(tp)
            if st is None or st.leader < 0:
                pending.add(tp)
                continue
            by_leader.setdefault(st.leader, []).append(tp)
        for leader, tps in by_leader.items():
            if leader == self.node_id:
                codes = await write_markers_locally(self.replica_manager, self.group_coordinator, self.time,
                                                    producer_id, producer_epoch, commit, coordinator_epoch, tps,
                                                    self.timeout_ms)
            else:
                codes = await self._send(leader, producer_id, producer_epoch, commit, coordinator_epoch, tps)
            for tp, code in codes.items():
                if code in (E.INVALID_PRODUCER_EPOCH, E.PRODUCER_FENCED, E.TRANSACTION_COORDINATOR_FENCED):
                    # The partition saw a newer epoch of this producer, or a marker of a newer coordinator: this
                    # marker is stale, retrying cannot help (Kafka's coordinator drops it too).
                    log.warning("dropping the stale marker of producer %d epoch %d (coordinator epoch %d) for %s: "
                                "%s", producer_id, producer_epoch, coordinator_epoch, tp, error_class(code).name)
                elif code != E.NONE:
                    # UNKNOWN_TOPIC_OR_PARTITION too: a leader just restarted answers it until the controller's
                    # LeaderAndIsr reaches it. A deleted topic is recognised above, from this broker's metadata.
                    if leader != self.node_id:  # write_markers_locally logged it
                        log.info("marker of producer %d for %s failed at broker %d: %s; retrying", producer_id,
                                 tp, leader, error_class(code).name)
                    pending.add(tp)
        return pending

    async def _send(self, leader: int, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                    tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        ch = self._channels.get(leader)
        if ch is None:
            return dict.fromkeys(tps, E.BROKER_NOT_AVAILABLE)
        topics: dict[str, list[int]] = {}
        for tp in tps:
            topics.setdefault(tp.topic, []).append(tp.partition)
        req = WriteTxnMarkersRequest(markers=[WriteTxnMarkersRequest.WritableTxnMarker(
            producer_id=producer_id, producer_epoch=producer_epoch, transaction_result=commit,
            coordinator_epoch=coordinator_epoch,
            topics=[WriteTxnMarkersRequest.WritableTxnMarkerTopic(name=t, partition_indexes=ps)
                    for t, ps in topics.items()])])
        try:
            resp = await ch.request(ApiKey.WRITE_TXN_MARKERS, WRITE_TXN_MARKERS_VERSION, req)
        except KafkaError as e:
            log.info("WriteTxnMarkers to broker %d failed: %s", leader, e)
            return dict.fromkeys(tps, E.BROKER_NOT_AVAILABLE)
        out = dict.fromkeys(tps, E.UNKNOWN_SERVER_ERROR)
        for m in resp.markers:
            for t in m.topics:
                for p in t.partitions:
                    out[TopicPartition(t.name, p.partition_index)] = p.error_code
        return out

    def close(self) -> None:
        self._channels.close()
