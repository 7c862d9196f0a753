"""Heartbeat (key 12): keep a member alive; REBALANCE_IN_PROGRESS tells it to rejoin.

Kafka counterpart: ``KafkaApis.handleHeartbeatRequest`` → ``GroupCoordinator.handleHeartbeat``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.common.error_codes import ErrorCode as E
from strom.protocol.api_keys import ApiKey
from strom.protocol.messages.heartbeat import HeartbeatRequest, HeartbeatResponse
from strom.server.apis import api
from strom.server.coordinator.request_support import active_coordinator
from strom.server.security.request_auth import Op, Res, allowed

if TYPE_CHECKING:
    from strom.server.coordinator.group_coordinator import GroupCoordinator
    from strom.server.request_context import RequestContext


@api(ApiKey.HEARTBEAT, 0)
async def handle(ctx: RequestContext, request: HeartbeatRequest, *,
                 group_coordinator: GroupCoordinator, authorizer: Any) -> HeartbeatResponse:
    coord = active_coordinator(group_coordinator)
    if authorizer is not None and not allowed(authorizer, ctx, Op.READ, (Res.GROUP, request.group_id)):
        error = E.GROUP_AUTHORIZATION_FAILED
    elif coord is None:
        error = E.COORDINATOR_NOT_AVAILABLE
    else:
        error = coord.handle_heartbeat(request.group_id, request.member_id,
                                       request.group_instance_id if ctx.api_version >= 3 else None,
                                       request.generation_id)
    return HeartbeatResponse(throttle_time_ms=0, error_code=error)
