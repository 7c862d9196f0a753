"""JoinGroup (key 11): park the member until the group's rebalance completes, then answer with the generation.

Kafka counterpart: ``KafkaApis.handleJoinGroupRequest`` → ``GroupCoordinator.handleJoinGroup``. v0 has no
rebalance timeout (the session timeout is used), v4+ gets MEMBER_ID_REQUIRED on the first join (KIP-394), v5+
carries ``group.instance.id`` (KIP-345), v7+ may return a null protocol name, v9 ``SkipAssignment``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.common.error_codes import ErrorCode as E
from strom.protocol.api_keys import ApiKey
from strom.protocol.messages.join_group import JoinGroupRequest, JoinGroupResponse
from strom.server.apis import api
from strom.server.coordinator.group_metadata import JoinResult
from strom.server.coordinator.request_support import active_coordinator
from strom.server.security.request_auth import Op, Res, allowed

if TYPE_CHECKING:
    from strom.server.coordinator.group_coordinator import GroupCoordinator
    from strom.server.request_context import RequestContext


@api(ApiKey.JOIN_GROUP, 0)
async def handle(ctx: RequestContext, request: JoinGroupRequest, *,
                 group_coordinator: GroupCoordinator, authorizer: Any) -> JoinGroupResponse:
    version = ctx.api_version
    coord = active_coordinator(group_coordinator)
    if authorizer is not None and not allowed(authorizer, ctx, Op.READ, (Res.GROUP, request.group_id)):
        result = JoinResult(E.GROUP_AUTHORIZATION_FAILED, "")
    elif coord is None:
        result = JoinResult(E.COORDINATOR_NOT_AVAILABLE, request.member_id)
    else:
        result = await coord.join_group(
            request.group_id, request.member_id, request.group_instance_id if version >= 5 else None,
            require_known_member_id=version >= 4, support_skip_assignment=version >= 9,
            client_id=ctx.client_id or "", client_host=ctx.client_host,
            rebalance_timeout_ms=request.session_timeout_ms if version == 0 else request.rebalance_timeout_ms,
            session_timeout_ms=request.session_timeout_ms, protocol_type=request.protocol_type,
            protocols=[(p.name, bytes(p.metadata)) for p in request.protocols],
        )
    return JoinGroupResponse(
        throttle_time_ms=0, error_code=result.error, generation_id=result.generation_id,
        protocol_type=result.protocol_type,
        protocol_name=result.protocol_name if version >= 7 else (result.protocol_name or ""),
        leader=result.leader_id, skip_assignment=result.skip_assignment, member_id=result.member_id,
        members=[JoinGroupResponse.JoinGroupResponseMember(member_id=m, group_instance_id=i, metadata=md)
                 for m, i, md in result.members],
    )
