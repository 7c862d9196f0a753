"""ListOffsets (key 2): earliest (-2), latest (-1), max timestamp (-3), or the first offset at/after a timestamp."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.common.error_codes import ErrorCode
from strom.common.errors import BrokerResponseError
from strom.common.structs import TopicPartition
from strom.protocol.api_keys import ApiKey
from strom.protocol.messages.list_offsets import ListOffsetsRequest, ListOffsetsResponse
from strom.server.apis import api
from strom.server.security.request_auth import Op, allowed_topics

if TYPE_CHECKING:
    from strom.server.replica_manager import ReplicaManager
    from strom.server.request_context import RequestContext

LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL = -1, -2, -3, -4

PartitionResponse = ListOffsetsResponse.ListOffsetsPartitionResponse


@api(ApiKey.LIST_OFFSETS, 1, 8)
async def handle(ctx: RequestContext, request: ListOffsetsRequest, *,
                 replica_manager: ReplicaManager, authorizer: Any) -> ListOffsetsResponse:
    topics = []
    described = allowed_topics(authorizer, ctx, Op.DESCRIBE, (t.name for t in request.topics)) \
        if authorizer is not None else None
    for t in request.topics:
        parts = []
        for p in t.partitions:
            if described is not None and t.name not in described:
                parts.append(PartitionResponse(partition_index=p.partition_index,
                                               error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED))
                continue
            try:
                part = replica_manager.leader_partition(TopicPartition(t.name, p.partition_index))
                epoch = p.current_leader_epoch if ctx.api_version >= 4 else -1
                if epoch >= 0 and epoch != part.leader_epoch:
                    code = ErrorCode.FENCED_LEADER_EPOCH if epoch < part.leader_epoch \
                        else ErrorCode.UNKNOWN_LEADER_EPOCH
                    parts.append(PartitionResponse(partition_index=p.partition_index, error_code=code))
                    continue
                lg = part.log
                ts = p.timestamp
                # KIP-207: a new leader's high watermark lags until its followers fetch at the new epoch; a client
                # must not be given that stale HW as the latest offset (it would not see acknowledged records).
                lagging = request.replica_id < 0 and part.leader_epoch_start_offset > lg.high_watermark
                if ts == LATEST:
                    if lagging:
                        parts.append(_not_available(p.partition_index, ctx.api_version))
                        continue
                    # read_committed clients (isolation level 1, v2+) may not see past the last stable offset
                    committed = ctx.api_version >= 2 and request.isolation_level == 1
                    offset, found_ts = (lg.last_stable_offset if committed else lg.high_watermark), -1
                elif ts in (EARLIEST, EARLIEST_LOCAL):
                    offset, found_ts = lg.log_start_offset, -1
                elif ts == MAX_TIMESTAMP or ts >= 0:
                    found = lg.fetch_offset_by_timestamp(ts)
                    if found is None or found[0] >= lg.high_watermark:  # none that a client may read
                        if lagging:  # (it may be there once the HW is known)
                            parts.append(_not_available(p.partition_index, ctx.api_version))
                            continue
                        offset, found_ts = -1, -1
                    else:
                        offset, found_ts = found
                else:
                    parts.append(PartitionResponse(partition_index=p.partition_index,
                                                   error_code=ErrorCode.INVALID_REQUEST))
                    continue
            except BrokerResponseError as e:
                parts.append(PartitionResponse(partition_index=p.partition_index, error_code=e.errno))
                continue
            parts.append(PartitionResponse(partition_index=p.partition_index, error_code=ErrorCode.NONE,
                                           timestamp=found_ts, offset=offset, leader_epoch=part.leader_epoch))
        topics.append(ListOffsetsResponse.ListOffsetsTopicResponse(name=t.name, partitions=parts))
    return ListOffsetsResponse(throttle_time_ms=0, topics=topics)


def _not_available(partition: int, version: int) -> PartitionResponse:
    """OFFSET_NOT_AVAILABLE (retriable; v5+); older clients do not know it and get LEADER_NOT_AVAILABLE, as Kafka
    answers them."""
    code = ErrorCode.OFFSET_NOT_AVAILABLE if version >= 5 else ErrorCode.LEADER_NOT_AVAILABLE
    return PartitionResponse(partition_index=partition, error_code=code)
