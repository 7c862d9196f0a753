"""LeaveGroup (key 13): remove members now instead of waiting for their session timeout.

Kafka counterpart: ``KafkaApis.handleLeaveGroupRequest`` → ``GroupCoordinator.handleLeaveGroup``. v0-v2 name one
member; v3+ a batch of members, possibly by ``group.instance.id`` alone (KIP-345 admin removal). For v0-v2 the
only member's error becomes the top-level error.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.common.error_codes import ErrorCode as E
from strom.protocol.api_keys import ApiKey
from strom.protocol.messages.leave_group import LeaveGroupRequest, LeaveGroupResponse
from strom.server.apis import api
from strom.server.coordinator.request_support import active_coordinator
from strom.server.security.request_auth import Op, Res, allowed

if TYPE_CHECKING:
    from strom.server.coordinator.group_coordinator import GroupCoordinator
    from strom.server.request_context import RequestContext


@api(ApiKey.LEAVE_GROUP, 0)
async def handle(ctx: RequestContext, request: LeaveGroupRequest, *,
                 group_coordinator: GroupCoordinator, authorizer: Any) -> LeaveGroupResponse:
    version = ctx.api_version
    if version >= 3:
        members = [(m.member_id, m.group_instance_id) for m in request.members]
    else:
        members = [(request.member_id, None)]
    coord = active_coordinator(group_coordinator)
    if authorizer is not None and not allowed(authorizer, ctx, Op.READ, (Res.GROUP, request.group_id)):
        top, errors = E.GROUP_AUTHORIZATION_FAILED, []
    elif coord is None:
        top, errors = E.COORDINATOR_NOT_AVAILABLE, []
    else:
        top, errors = coord.handle_leave_group(request.group_id, members)
    if version < 3:
        return LeaveGroupResponse(throttle_time_ms=0, error_code=top or (errors[0] if errors else E.NONE))
    return LeaveGroupResponse(throttle_time_ms=0, error_code=top, members=[
        LeaveGroupResponse.MemberResponse(member_id=m, group_instance_id=i, error_code=err)
        for (m, i), err in zip(members, errors, strict=True)
    ] if errors else [])
