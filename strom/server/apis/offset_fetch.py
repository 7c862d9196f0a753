"""OffsetFetch (key 9): committed positions of a group (v0-v7) or of several groups (v8+, KIP-709).

Kafka counterpart: ``KafkaApis.handleOffsetFetchRequest`` → ``GroupCoordinator.handleFetchOffsets``. A null topic
list (v2+) means every partition the group has an offset for. A partition without a committed offset answers
offset -1. v0/v1 have no top-level error, so a group error goes on every partition; v2+ answer a group error
with no topics. ``RequireStable`` (v7+)
needs no waiting: commits are visible only once written.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from strom.common.error_codes import ErrorCode as E
from strom.common.structs import TopicPartition
from strom.protocol.api_keys import ApiKey
from strom.protocol.messages.offset_fetch import OffsetFetchRequest, OffsetFetchResponse
from strom.server.apis import api
from strom.server.coordinator.group_metadata import CommittedOffset
from strom.server.coordinator.request_support import active_coordinator

if TYPE_CHECKING:
    from strom.server.coordinator.group_coordinator import GroupCoordinator
    from strom.server.request_context import RequestContext

R = OffsetFetchResponse


def _fetch(group_coordinator: GroupCoordinator, group_id: str, topics: Sequence[Any] | None, require_stable: bool
           ) -> tuple[int, dict[TopicPartition, CommittedOffset | None]]:
    partitions = None if topics is None else [TopicPartition(t.name, p) for t in topics for p in t.partition_indexes]
    coord = active_coordinator(group_coordinator)
    if coord is None:
        return E.COORDINATOR_NOT_AVAILABLE, {}
    return coord.handle_fetch_offsets(group_id, partitions, require_stable)


def _by_topic(topics: Sequence[Any] | None, offsets: dict[TopicPartition, CommittedOffset | None],
              ) -> list[tuple[str, list[tuple[int, CommittedOffset | None]]]]:
    """Answer in request order, or (all partitions) sorted by topic and partition."""
    if topics is not None:
        return [(t.name, [(p, offsets.get(TopicPartition(t.name, p))) for p in t.partition_indexes]) for t in topics]
    out: dict[str, list[tuple[int, CommittedOffset | None]]] = {}
    for tp in sorted(offsets):
        out.setdefault(tp.topic, []).append((tp.partition, offsets[tp]))
    return list(out.items())


@api(ApiKey.OFFSET_FETCH, 0)
async def handle(ctx: RequestContext, request: OffsetFetchRequest, *,
                 group_coordinator: GroupCoordinator) -> OffsetFetchResponse:
    version = ctx.api_version
    require_stable = request.require_stable if version >= 7 else False
    if version >= 8:
        groups = []
        for g in request.groups:
            error, offsets = _fetch(group_coordinator, g.group_id, g.topics, require_stable)
            groups.append(R.OffsetFetchResponseGroup(group_id=g.group_id, error_code=error, topics=[
                R.OffsetFetchResponseTopics(name=name, partitions=[
                    R.OffsetFetchResponsePartitions(
                        partition_index=p, committed_offset=o.offset if o else -1,
                        committed_leader_epoch=o.leader_epoch if o else -1, metadata=o.metadata if o else "",
                        error_code=E.NONE)
                    for p, o in parts])
                for name, parts in (_by_topic(g.topics, offsets) if not error else [])]))
        return OffsetFetchResponse(throttle_time_ms=0, groups=groups)
    topics = request.topics
    error, offsets = _fetch(group_coordinator, request.group_id, topics, require_stable)
    part_error = error if version < 2 else E.NONE
    if version < 2 and error and topics is not None:
        offsets = dict.fromkeys((TopicPartition(t.name, p) for t in topics for p in t.partition_indexes), None)
    return OffsetFetchResponse(throttle_time_ms=0, error_code=error, topics=[
        R.OffsetFetchResponseTopic(name=name, partitions=[
            R.OffsetFetchResponsePartition(
                partition_index=p, committed_offset=o.offset if o else -1,
                committed_leader_epoch=o.leader_epoch if o else -1, metadata=o.metadata if o else "",
                error_code=part_error)
            for p, o in parts])
        for name, parts in (_by_topic(topics, offsets) if not error or version < 2 else [])])
