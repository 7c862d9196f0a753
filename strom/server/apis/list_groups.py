"""ListGroups (key 16): the groups this broker coordinates, filtered by state (v4+) and type (v5+).

Kafka counterpart: ``KafkaApis.handleListGroupsRequest`` → ``GroupCoordinator.handleListGroups``. Every group
here is a classic group. With an authorizer, DESCRIBE on the cluster lists every group, else only the groups the
principal may DESCRIBE.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.common.error_codes import ErrorCode as E
from strom.protocol.api_keys import ApiKey
from strom.protocol.messages.list_groups import ListGroupsRequest, ListGroupsResponse
from strom.server.apis import api
from strom.server.coordinator.request_support import active_coordinator
from strom.server.security.request_auth import Op, Res, allowed, allowed_cluster

if TYPE_CHECKING:
    from strom.server.coordinator.group_coordinator import GroupCoordinator
    from strom.server.request_context import RequestContext


@api(ApiKey.LIST_GROUPS, 0)
async def handle(ctx: RequestContext, request: ListGroupsRequest, *,
                 group_coordinator: GroupCoordinator, authorizer: Any) -> ListGroupsResponse:
    version = ctx.api_version
    coord = active_coordinator(group_coordinator)
    if coord is None:
        return ListGroupsResponse(throttle_time_ms=0, error_code=E.COORDINATOR_NOT_AVAILABLE, groups=[])
    error, groups = coord.handle_list_groups(request.states_filter if version >= 4 else (),
                                             request.types_filter if version >= 5 else ())
    if authorizer is not None and not allowed_cluster(authorizer, ctx, Op.DESCRIBE):
        groups = [g for g in groups if allowed(authorizer, ctx, Op.DESCRIBE, (Res.GROUP, g.group_id))]
    return ListGroupsResponse(throttle_time_ms=0, error_code=error, groups=[
        ListGroupsResponse.ListedGroup(group_id=g.group_id, protocol_type=g.protocol_type, group_state=g.state,
                                       group_type=g.group_type)
        for g in groups
    ])
