"""DeleteRecords (key 21): advance a partition's log start offset (-1 means up to the high watermark)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from strom.common.errors import BrokerResponseError
from strom.common.structs import TopicPartition
from strom.protocol.api_keys import ApiKey
from strom.protocol.messages.delete_records import DeleteRecordsRequest, DeleteRecordsResponse
from strom.server.apis import api

if TYPE_CHECKING:
    from strom.server.request_context import RequestContext

OFFSET_OUT_OF_RANGE = 1
UNKNOWN_TOPIC_OR_PARTITION = 3


@api(ApiKey.DELETE_RECORDS, 0)
async def handle(ctx: RequestContext, request: DeleteRecordsRequest) -> DeleteRecordsResponse:
    rm = ctx.broker.replica_manager
    assert rm is not None
    topics = []
    for t in request.topics:
        parts = []
        for p in t.partitions:
            P = DeleteRecordsResponse.DeleteRecordsPartitionResult
            lg = rm.get_log(TopicPartition(t.name, p.partition_index))
            if lg is None:
                parts.append(P(partition_index=p.partition_index, low_watermark=-1,
                               error_code=UNKNOWN_TOPIC_OR_PARTITION))
                continue
            offset = lg.high_watermark if p.offset == -1 else p.offset
            if offset < 0 or offset > lg.high_watermark:
                parts.append(P(partition_index=p.partition_index, low_watermark=-1, error_code=OFFSET_OUT_OF_RANGE))
                continue
            try:
                if offset > lg.log_start_offset:
                    lg.delete_records_before(offset)
            except BrokerResponseError as e:
                parts.append(P(partition_index=p.partition_index, low_watermark=-1, error_code=e.errno))
                continue
            parts.append(P(partition_index=p.partition_index, low_watermark=lg.log_start_offset, error_code=0))
        topics.append(DeleteRecordsResponse.DeleteRecordsTopicResult(name=t.name, partitions=parts))
    return DeleteRecordsResponse(throttle_time_ms=0, topics=topics)
