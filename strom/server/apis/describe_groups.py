"""DescribeGroups (key 15): state, protocol and members of groups; metadata and assignments when Stable.

Kafka counterpart: ``KafkaApis.handleDescribeGroupsRequest`` → ``GroupCoordinator.handleDescribeGroup``. An unknown
group is described as Dead with no error (v0-v5). With ``IncludeAuthorizedOperations`` (v3+) every group
operation is reported as allowed: strom has no authorizer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from strom.common.error_codes import ErrorCode as E
from strom.protocol.api_keys import ApiKey
from strom.protocol.messages.describe_groups import DescribeGroupsRequest, DescribeGroupsResponse
from strom.server.apis import api
from strom.server.coordinator.group_admin import GroupSummary
from strom.server.coordinator.request_support import active_coordinator

if TYPE_CHECKING:
    from strom.server.coordinator.group_coordinator import GroupCoordinator
    from strom.server.request_context import RequestContext

R = DescribeGroupsResponse
# AclOperation codes of the group resource: READ (3), DELETE (6), DESCRIBE (8).
GROUP_OPERATIONS = (1 << 3) | (1 << 6) | (1 << 8)
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)


@api(ApiKey.DESCRIBE_GROUPS, 0)
async def handle(ctx: RequestContext, request: DescribeGroupsRequest, *,
                 group_coordinator: GroupCoordinator) -> DescribeGroupsResponse:
    coord = active_coordinator(group_coordinator)
    if coord is None:
        summaries = [GroupSummary(g, E.COORDINATOR_NOT_AVAILABLE, "") for g in request.groups]
    else:
        summaries = coord.handle_describe_groups(request.groups)
    ops = GROUP_OPERATIONS if ctx.api_version >= 3 and request.include_authorized_operations \
        else AUTHORIZED_OPERATIONS_OMITTED
    return DescribeGroupsResponse(throttle_time_ms=0, groups=[
        R.DescribedGroup(
            error_code=s.error, group_id=s.group_id, group_state=s.state, protocol_type=s.protocol_type,
            protocol_data=s.protocol, authorized_operations=ops, members=[
                R.DescribedGroupMember(member_id=m.member_id, group_instance_id=m.group_instance_id,
                                       client_id=m.client_id, client_host=m.client_host, member_metadata=m.metadata,
                                       member_assignment=m.assignment)
                for m in s.members
            ])
        for s in summaries
    ])
