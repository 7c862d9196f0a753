"""OffsetDelete (key 47): delete a group's committed offsets for partitions it no longer consumes (KIP-496).

Kafka counterpart: ``KafkaApis.handleOffsetDeleteRequest`` → ``GroupCoordinator.handleDeleteOffsets``. An empty
group may drop any offset; a consumer group only those of topics it is not subscribed to
(GROUP_SUBSCRIBED_TO_TOPIC otherwise); other non-empty groups get NON_EMPTY_GROUP. With an authorizer: DELETE on
the group (GROUP_AUTHORIZATION_FAILED), READ on each topic (TOPIC_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.common.error_codes import ErrorCode
from strom.common.structs import TopicPartition
from strom.protocol.api_keys import ApiKey
from strom.protocol.messages.offset_delete import OffsetDeleteRequest, OffsetDeleteResponse
from strom.server.apis import api
from strom.server.coordinator.request_support import active_coordinator
from strom.server.security.request_auth import Op, Res, allowed, allowed_topics

if TYPE_CHECKING:
    from strom.server.coordinator.group_coordinator import GroupCoordinator
    from strom.server.metadata_cache import MetadataCache
    from strom.server.request_context import RequestContext

R = OffsetDeleteResponse


@api(ApiKey.OFFSET_DELETE, 0)
async def handle(ctx: RequestContext, request: OffsetDeleteRequest, *, group_coordinator: GroupCoordinator,
                 metadata: MetadataCache, authorizer: Any) -> OffsetDeleteResponse:
    coord = active_coordinator(group_coordinator)
    partition_errors: dict[TopicPartition, int] = {}
    wanted: list[TopicPartition] = []
    readable = None
    if authorizer is not None:
        if not allowed(authorizer, ctx, Op.DELETE, (Res.GROUP, request.group_id)):
            return OffsetDeleteResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, throttle_time_ms=0,
                                        topics=[])
        readable = allowed_topics(authorizer, ctx, Op.READ, (t.name for t in request.topics))
    for t in request.topics:
        info = metadata.topic(t.name)
        for p in t.partitions:
            tp = TopicPartition(t.name, p.partition_index)
            if readable is not None and t.name not in readable:
                partition_errors[tp] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif info is None or not 0 <= p.partition_index < info.num_partitions:
                partition_errors[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                wanted.append(tp)
    if coord is None:
        return OffsetDeleteResponse(error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, throttle_time_ms=0, topics=[])
    group_error, errors = coord.handle_delete_offsets(request.group_id, wanted)
    if group_error:
        return OffsetDeleteResponse(error_code=group_error, throttle_time_ms=0, topics=[])
    partition_errors.update(errors)
    return OffsetDeleteResponse(error_code=ErrorCode.NONE, throttle_time_ms=0, topics=[
        R.OffsetDeleteResponseTopic(name=t.name, partitions=[
            R.OffsetDeleteResponsePartition(
                partition_index=p.partition_index,
                error_code=partition_errors.get(TopicPartition(t.name, p.partition_index), ErrorCode.NONE))
            for p in t.partitions])
        for t in request.topics])
