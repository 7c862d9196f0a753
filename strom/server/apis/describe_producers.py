"""DescribeProducers (key 61): the producers a partition leader remembers, with their open transactions.

Kafka counterpart: ``ReplicaManager.activeProducerState`` (``kafka-transactions --describe-producers`` and
``--find-hanging`` use it). Partitions this broker does not lead get NOT_LEADER_OR_FOLLOWER. With an authorizer:
READ on each topic (else TOPIC_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.common.error_codes import ErrorCode
from strom.common.errors import BrokerResponseError
from strom.common.structs import TopicPartition
from strom.protocol.api_keys import ApiKey
from strom.protocol.messages.describe_producers import DescribeProducersRequest, DescribeProducersResponse
from strom.server.apis import api
from strom.server.security.request_auth import Op, allowed_topics

if TYPE_CHECKING:
    from strom.server.replica_manager import ReplicaManager
    from strom.server.request_context import RequestContext

R = DescribeProducersResponse


@api(ApiKey.DESCRIBE_PRODUCERS, 0)
async def handle(ctx: RequestContext, request: DescribeProducersRequest, *,
                 replica_manager: ReplicaManager, authorizer: Any) -> DescribeProducersResponse:
    readable = allowed_topics(authorizer, ctx, Op.READ, (t.name for t in request.topics))
    topics = []
    for t in request.topics:
        parts = []
        for idx in t.partition_indexes:
            if t.name not in readable:
                parts.append(R.PartitionResponse(partition_index=idx, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                                 error_message=None, active_producers=[]))
                continue
            try:
                p = replica_manager.leader_partition(TopicPartition(t.name, idx))
            except BrokerResponseError as e:
                parts.append(R.PartitionResponse(partition_index=idx, error_code=e.errno, error_message=e.message,
                                                 active_producers=[]))
                continue
            parts.append(R.PartitionResponse(partition_index=idx, error_code=0, error_message=None, active_producers=[
                R.ProducerState(producer_id=pid, producer_epoch=epoch, last_sequence=seq, last_timestamp=ts,
                                coordinator_epoch=coordinator_epoch, current_txn_start_offset=first)
                for pid, epoch, seq, ts, coordinator_epoch, first in p.log.active_producers()]))
        topics.append(R.TopicResponse(name=t.name, partitions=parts))
    return R(throttle_time_ms=0, topics=topics)
