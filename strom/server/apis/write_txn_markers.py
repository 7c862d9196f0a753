"""WriteTxnMarkers (key 27): a transaction coordinator asks this broker, as partition leader, to write markers.

Kafka counterpart: ``KafkaApis.handleWriteTxnMarkersRequest``: each marker is appended as a control batch by the
coordinator origin with acks=-1; markers landing in ``__consumer_offsets`` complete the group coordinator's
pending transactional offsets. Partitions this broker does not lead get NOT_LEADER_OR_FOLLOWER (the coordinator
looks the leader up again and retries). With an authorizer: CLUSTER_ACTION on the cluster (brokers only).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.common.error_codes import ErrorCode
from strom.common.structs import TopicPartition
from strom.protocol.api_keys import ApiKey
from strom.protocol.messages.write_txn_markers import WriteTxnMarkersRequest, WriteTxnMarkersResponse
from strom.server.apis import api
from strom.server.coordinator.txn_markers import write_markers_locally
from strom.server.security.request_auth import Op, allowed_cluster

if TYPE_CHECKING:
    from strom.common.time import Time
    from strom.server.coordinator.group_coordinator import GroupCoordinator
    from strom.server.replica_manager import ReplicaManager
    from strom.server.request_context import RequestContext

R = WriteTxnMarkersResponse


@api(ApiKey.WRITE_TXN_MARKERS, 0)
async def handle(ctx: RequestContext, request: WriteTxnMarkersRequest, *, replica_manager: ReplicaManager,
                 group_coordinator: GroupCoordinator, time: Time, authorizer: Any) -> WriteTxnMarkersResponse:
    permitted = allowed_cluster(authorizer, ctx, Op.CLUSTER_ACTION)
    out = []
    for m in request.markers:
        tps = [TopicPartition(t.name, p) for t in m.topics for p in t.partition_indexes]
        if not permitted:
            codes = dict.fromkeys(tps, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
        else:
            codes = await write_markers_locally(replica_manager, group_coordinator, time, m.producer_id,
                                                m.producer_epoch, bool(m.transaction_result), m.coordinator_epoch,
                                                tps)
        out.append(R.WritableTxnMarkerResult(producer_id=m.producer_id, topics=[
            R.WritableTxnMarkerTopicResult(name=t.name, partitions=[
                R.WritableTxnMarkerPartitionResult(partition_index=p, error_code=codes[TopicPartition(t.name, p)])
                for p in t.partition_indexes]) for t in m.topics]))
    return R(markers=out)
