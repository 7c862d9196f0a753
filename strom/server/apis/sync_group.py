"""SyncGroup (key 14): the leader hands in the assignment; every member gets its own share.

Kafka counterpart: ``KafkaApis.handleSyncGroupRequest`` → ``GroupCoordinator.handleSyncGroup``. v3+ carries
``group.instance.id``; v5+ the protocol type and name, checked against the group's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.common.error_codes import ErrorCode as E
from strom.protocol.api_keys import ApiKey
from strom.protocol.messages.sync_group import SyncGroupRequest, SyncGroupResponse
from strom.server.apis import api
from strom.server.coordinator.group_metadata import SyncResult
from strom.server.coordinator.request_support import active_coordinator
from strom.server.security.request_auth import Op, Res, allowed

if TYPE_CHECKING:
    from strom.server.coordinator.group_coordinator import GroupCoordinator
    from strom.server.request_context import RequestContext


@api(ApiKey.SYNC_GROUP, 0)
async def handle(ctx: RequestContext, request: SyncGroupRequest, *,
                 group_coordinator: GroupCoordinator, authorizer: Any) -> SyncGroupResponse:
    version = ctx.api_version
    coord = active_coordinator(group_coordinator)
    if authorizer is not None and not allowed(authorizer, ctx, Op.READ, (Res.GROUP, request.group_id)):
        result = SyncResult(E.GROUP_AUTHORIZATION_FAILED)
    elif coord is None:
        result = SyncResult(E.COORDINATOR_NOT_AVAILABLE)
    else:
        result = await coord.sync_group(
            request.group_id, request.generation_id, request.member_id,
            request.protocol_type if version >= 5 else None, request.protocol_name if version >= 5 else None,
            request.group_instance_id if version >= 3 else None,
            {a.member_id: bytes(a.assignment) for a in request.assignments},
        )
    return SyncGroupResponse(throttle_time_ms=0, error_code=result.error, protocol_type=result.protocol_type,
                             protocol_name=result.protocol_name, assignment=result.assignment)
