"""OffsetCommit (key 8): store consumer positions in ``__consumer_offsets``.

Kafka counterpart: ``KafkaApis.handleOffsetCommitRequest`` → ``GroupCoordinator.handleCommitOffsets``.
v0 has no generation/member (a simple commit, like generation -1); v1 may carry a per-partition commit timestamp;
v2-v4 a retention time (kept as the offset's expire timestamp); v6+ the leader epoch; v7+ ``group.instance.id``.
Partitions of unknown topics get UNKNOWN_TOPIC_OR_PARTITION and are not stored. With an authorizer: READ on the
group (else GROUP_AUTHORIZATION_FAILED on every partition), then READ on each topic (TOPIC_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.common.error_codes import ErrorCode as E
from strom.common.structs import TopicPartition
from strom.protocol.api_keys import ApiKey
from strom.protocol.messages.offset_commit import OffsetCommitRequest, OffsetCommitResponse
from strom.server.apis import api
from strom.server.coordinator.group_metadata import CommittedOffset
from strom.server.coordinator.request_support import active_coordinator
from strom.server.security.request_auth import Op, Res, allowed, allowed_topics

if TYPE_CHECKING:
    from strom.common.time import Time
    from strom.server.coordinator.group_coordinator import GroupCoordinator
    from strom.server.metadata_cache import MetadataCache
    from strom.server.request_context import RequestContext


@api(ApiKey.OFFSET_COMMIT, 0)
async def handle(ctx: RequestContext, request: OffsetCommitRequest, *,
                 group_coordinator: GroupCoordinator, metadata: MetadataCache, time: Time,
                 authorizer: Any) -> OffsetCommitResponse:
    version = ctx.api_version
    md = metadata
    now = time.milliseconds()
    retention = request.retention_time_ms if 2 <= version <= 4 else -1
    errors: dict[TopicPartition, int] = {}
    offsets: dict[TopicPartition, CommittedOffset] = {}
    readable = None
    if authorizer is not None:
        if not allowed(authorizer, ctx, Op.READ, (Res.GROUP, request.group_id)):
            readable = set()
            denied = E.GROUP_AUTHORIZATION_FAILED
        else:
            readable = allowed_topics(authorizer, ctx, Op.READ, (t.name for t in request.topics))
            denied = E.TOPIC_AUTHORIZATION_FAILED
    for t in request.topics:
        info = md.topic(t.name)
        for p in t.partitions:
            tp = TopicPartition(t.name, p.partition_index)
            if readable is not None and t.name not in readable:
                errors[tp] = denied
                continue
            if info is None or not 0 <= p.partition_index < info.num_partitions:
                errors[tp] = E.UNKNOWN_TOPIC_OR_PARTITION
                continue
            ts = p.commit_timestamp if version == 1 and p.commit_timestamp != -1 else now
            offsets[tp] = CommittedOffset(
                offset=p.committed_offset, leader_epoch=p.committed_leader_epoch if version >= 6 else -1,
                metadata=p.committed_metadata or "", commit_timestamp=ts,
                expire_timestamp=ts + retention if retention != -1 else None,
            )
    coord = active_coordinator(group_coordinator)
    if offsets:
        if coord is None:
            errors.update(dict.fromkeys(offsets, E.COORDINATOR_NOT_AVAILABLE))
        else:
            errors.update(coord.handle_commit_offsets(
                request.group_id, request.member_id if version >= 1 else "",
                request.group_instance_id if version >= 7 else None,
                request.generation_id_or_member_epoch if version >= 1 else -1, offsets,
            ))
            ok = [tp for tp in offsets if errors.get(tp) == E.NONE]
            if ok:
                durable = await coord.wait_for_durability(request.group_id)
                if durable != E.NONE:
                    errors.update(dict.fromkeys(ok, durable))
    return OffsetCommitResponse(throttle_time_ms=0, topics=[
        OffsetCommitResponse.OffsetCommitResponseTopic(name=t.name, partitions=[
            OffsetCommitResponse.OffsetCommitResponsePartition(
                partition_index=p.partition_index, error_code=errors[TopicPartition(t.name, p.partition_index)])
            for p in t.partitions
        ])
        for t in request.topics
    ])
