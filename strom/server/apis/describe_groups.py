"""DescribeGroups (key 15): state, protocol and members of groups; metadata and assignments when Stable.

Kafka counterpart: ``KafkaApis.handleDescribeGroupsRequest`` → ``GroupCoordinator.handleDescribeGroup``. An unknown
group is described as Dead with no error (v0-v5). With an authorizer, a group the principal may not DESCRIBE
answers GROUP_AUTHORIZATION_FAILED and nothing else; ``IncludeAuthorizedOperations`` (v3+) reports the group
operations the authorizer allows (all of them without one).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.common.error_codes import ErrorCode as E
from strom.protocol.api_keys import ApiKey
from strom.protocol.messages.describe_groups import DescribeGroupsRequest, DescribeGroupsResponse
from strom.server.apis import api
from strom.server.coordinator.group_admin import GroupSummary
from strom.server.coordinator.request_support import active_coordinator
from strom.server.security.request_auth import Op, Res, allowed, operations

if TYPE_CHECKING:
    from strom.server.coordinator.group_coordinator import GroupCoordinator
    from strom.server.request_context import RequestContext

R = DescribeGroupsResponse
# AclOperation codes of the group resource: READ (3), DELETE (6), DESCRIBE (8).
GROUP_OPERATIONS = (1 << 3) | (1 << 6) | (1 << 8)
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)


@api(ApiKey.DESCRIBE_GROUPS, 0)
async def handle(ctx: RequestContext, request: DescribeGroupsRequest, *,
                 group_coordinator: GroupCoordinator, authorizer: Any) -> DescribeGroupsResponse:
    coord = active_coordinator(group_coordinator)
    denied: set[str] = set()
    if authorizer is not None:
        denied = {g for g in request.groups if not allowed(authorizer, ctx, Op.DESCRIBE, (Res.GROUP, g))}
    wanted = [g for g in request.groups if g not in denied]
    if coord is None:
        found = [GroupSummary(g, E.COORDINATOR_NOT_AVAILABLE, "") for g in wanted]
    else:
        found = coord.handle_describe_groups(wanted) if wanted else []
    by_id = {s.group_id: s for s in found}
    summaries = found if not denied else [GroupSummary(g, E.GROUP_AUTHORIZATION_FAILED, "") if g in denied
                                          else by_id[g] for g in request.groups]
    with_ops = ctx.api_version >= 3 and request.include_authorized_operations

    def ops(group_id: str) -> int:
        if not with_ops or group_id in denied:
            return AUTHORIZED_OPERATIONS_OMITTED
        return GROUP_OPERATIONS if authorizer is None else operations(authorizer, ctx, (Res.GROUP, group_id))

    return DescribeGroupsResponse(throttle_time_ms=0, groups=[
        R.DescribedGroup(
            error_code=s.error, group_id=s.group_id, group_state=s.state, protocol_type=s.protocol_type,
            protocol_data=s.protocol, authorized_operations=ops(s.group_id), members=[
                R.DescribedGroupMember(member_id=m.member_id, group_instance_id=m.group_instance_id,
                                       client_id=m.client_id, client_host=m.client_host, member_metadata=m.metadata,
                                       member_assignment=m.assignment)
                for m in s.members
            ])
        for s in summaries
    ])
