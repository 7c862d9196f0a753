"""OffsetFetch (key 9): committed positions of a group (v0-v7) or of several groups (v8+, KIP-709).

Kafka counterpart: ``KafkaApis.handleOffsetFetchRequest`` → ``GroupCoordinator.handleFetchOffsets``. A null topic
list (v2+) means every partition the group has an offset for. A partition without a committed offset answers
offset -1. v0/v1 have no top-level error, so a group error goes on every partition; v2+ answer a group error
with no topics. ``RequireStable`` (v7+)
needs no waiting: commits are visible only once written. With an authorizer: DESCRIBE on the group
(GROUP_AUTHORIZATION_FAILED), DESCRIBE on each topic: an asked-for partition of a topic the principal may not
describe answers TOPIC_AUTHORIZATION_FAILED, "all partitions" leaves such topics out.
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
from strom.server.security.request_auth import Op, Res, allowed, allowed_topics

if TYPE_CHECKING:
    from strom.server.coordinator.group_coordinator import GroupCoordinator
    from strom.server.request_context import RequestContext

R = OffsetFetchResponse


def _fetch(group_coordinator: GroupCoordinator, group_id: str, topics: Sequence[Any] | None, require_stable: bool,
           authorizer: Any = None, ctx: RequestContext | None = None,
           ) -> tuple[int, dict[TopicPartition, CommittedOffset | None], set[str]]:
    """The group's error, its offsets, and the asked-for topics the principal may not describe."""
    hidden: set[str] = set()
    if authorizer is not None:
        assert ctx is not None
        if not allowed(authorizer, ctx, Op.DESCRIBE, (Res.GROUP, group_id)):
            return E.GROUP_AUTHORIZATION_FAILED, {}, hidden
        if topics is not None:
            names = [t.name for t in topics]
            hidden = set(names) - allowed_topics(authorizer, ctx, Op.DESCRIBE, names)
    partitions = None if topics is None else [TopicPartition(t.name, p) for t in topics if t.name not in hidden
                                              for p in t.partition_indexes]
    coord = active_coordinator(group_coordinator)
    if coord is None:
        return E.COORDINATOR_NOT_AVAILABLE, {}, hidden
    error, offsets = coord.handle_fetch_offsets(group_id, partitions, require_stable) \
        if partitions is None or partitions or not hidden else (E.NONE, {})
    if authorizer is not None and topics is None:  # all partitions: leave out the topics it may not describe
        assert ctx is not None
        visible = allowed_topics(authorizer, ctx, Op.DESCRIBE, {tp.topic for tp in offsets})
        offsets = {tp: o for tp, o in offsets.items() if tp.topic in visible}
    return error, offsets, hidden


def _by_topic(topics: Sequence[Any] | None, offsets: dict[TopicPartition, CommittedOffset | None],
              hidden: set[str], part_error: int = E.NONE,
              ) -> list[tuple[str, list[tuple[int, CommittedOffset | None, int]]]]:
    """Answer in request order, or (all partitions) sorted by topic and partition; each partition with its error."""
    if topics is not None:
        return [(t.name, [(p, offsets.get(TopicPartition(t.name, p)),
                           E.TOPIC_AUTHORIZATION_FAILED if t.name in hidden else part_error)
                          for p in t.partition_indexes]) for t in topics]
    out: dict[str, list[tuple[int, CommittedOffset | None, int]]] = {}
    for tp in sorted(offsets):
        out.setdefault(tp.topic, []).append((tp.partition, offsets[tp], part_error))
    return list(out.items())


@api(ApiKey.OFFSET_FETCH, 0)
async def handle(ctx: RequestContext, request: OffsetFetchRequest, *,
                 group_coordinator: GroupCoordinator, authorizer: Any) -> OffsetFetchResponse:
    version = ctx.api_version
    require_stable = request.require_stable if version >= 7 else False
    if version >= 8:
        groups = []
        for g in request.groups:
            error, offsets, hidden = _fetch(group_coordinator, g.group_id, g.topics, require_stable, authorizer, ctx)
            groups.append(R.OffsetFetchResponseGroup(group_id=g.group_id, error_code=error, topics=[
                R.OffsetFetchResponseTopics(name=name, partitions=[
                    R.OffsetFetchResponsePartitions(
                        partition_index=p, committed_offset=o.offset if o else -1,
                        committed_leader_epoch=o.leader_epoch if o else -1, metadata=o.metadata if o else "",
                        error_code=pe)
                    for p, o, pe in parts])
                for name, parts in (_by_topic(g.topics, offsets, hidden) if not error else [])]))
        return OffsetFetchResponse(throttle_time_ms=0, groups=groups)
    topics = request.topics
    error, offsets, hidden = _fetch(group_coordinator, request.group_id, topics, require_stable, authorizer, ctx)
    part_error = error if version < 2 else E.NONE
    if version < 2 and error and topics is not None:
        offsets = dict.fromkeys((TopicPartition(t.name, p) for t in topics for p in t.partition_indexes), None)
    return OffsetFetchResponse(throttle_time_ms=0, error_code=error, topics=[
        R.OffsetFetchResponseTopic(name=name, partitions=[
            R.OffsetFetchResponsePartition(
                partition_index=p, committed_offset=o.offset if o else -1,
                committed_leader_epoch=o.leader_epoch if o else -1, metadata=o.metadata if o else "",
                error_code=pe)
            for p, o, pe in parts])
        for name, parts in (_by_topic(topics, offsets, hidden, part_error) if not error or version < 2 else [])])
