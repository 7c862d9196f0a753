"""DeleteRecords (key 21): advance a partition's log start offset (-1 means up to the high watermark)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.common.error_codes import ErrorCode
from strom.common.errors import BrokerResponseError
from strom.common.structs import TopicPartition
from strom.protocol.api_keys import ApiKey
from strom.protocol.messages.delete_records import DeleteRecordsRequest, DeleteRecordsResponse
from strom.server.apis import api
from strom.server.security.request_auth import Op, allowed_topics

if TYPE_CHECKING:
    from strom.server.replica_manager import ReplicaManager
    from strom.server.request_context import RequestContext


@api(ApiKey.DELETE_RECORDS, 0)
async def handle(ctx: RequestContext, request: DeleteRecordsRequest, *,
                 replica_manager: ReplicaManager, authorizer: Any) -> DeleteRecordsResponse:
    P = DeleteRecordsResponse.DeleteRecordsPartitionResult
    topics = []
    deletable = allowed_topics(authorizer, ctx, Op.DELETE, (t.name for t in request.topics)) \
        if authorizer is not None else None
    for t in request.topics:
        parts = []
        for p in t.partitions:
            if deletable is not None and t.name not in deletable:
                parts.append(P(partition_index=p.partition_index, low_watermark=-1,
                               error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED))
                continue
            try:
                lg = replica_manager.leader_partition(TopicPartition(t.name, p.partition_index)).log
                offset = lg.high_watermark if p.offset == -1 else p.offset
                if offset < 0 or offset > lg.high_watermark:
                    parts.append(P(partition_index=p.partition_index, low_watermark=-1,
                                   error_code=ErrorCode.OFFSET_OUT_OF_RANGE))
                    continue
                if offset > lg.log_start_offset:
                    lg.delete_records_before(offset)
            except BrokerResponseError as e:
                parts.append(P(partition_index=p.partition_index, low_watermark=-1, error_code=e.errno))
                continue
            parts.append(P(partition_index=p.partition_index, low_watermark=lg.log_start_offset,
                           error_code=ErrorCode.NONE))
        topics.append(DeleteRecordsResponse.DeleteRecordsTopicResult(name=t.name, partitions=parts))
    return DeleteRecordsResponse(throttle_time_ms=0, topics=topics)
