"""DeleteGroups (key 42): delete empty groups and their committed offsets (tombstones in __consumer_offsets).

Kafka counterpart: ``KafkaApis.handleDeleteGroupsRequest`` → ``GroupCoordinator.handleDeleteGroups``: a group with
members gets NON_EMPTY_GROUP, an unknown one GROUP_ID_NOT_FOUND; without DELETE on a group (when an authorizer is
set), GROUP_AUTHORIZATION_FAILED and the group is left alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.common.error_codes import ErrorCode as E
from strom.protocol.api_keys import ApiKey
from strom.protocol.messages.delete_groups import DeleteGroupsRequest, DeleteGroupsResponse
from strom.server.apis import api
from strom.server.coordinator.request_support import active_coordinator
from strom.server.security.request_auth import Op, Res, allowed

if TYPE_CHECKING:
    from strom.server.coordinator.group_coordinator import GroupCoordinator
    from strom.server.request_context import RequestContext


@api(ApiKey.DELETE_GROUPS, 0)
async def handle(ctx: RequestContext, request: DeleteGroupsRequest, *,
                 group_coordinator: GroupCoordinator, authorizer: Any) -> DeleteGroupsResponse:
    coord = active_coordinator(group_coordinator)
    names = list(request.groups_names)
    results: dict[str, int] = {}
    if authorizer is not None:
        results = {g: E.GROUP_AUTHORIZATION_FAILED for g in names
                   if not allowed(authorizer, ctx, Op.DELETE, (Res.GROUP, g))}
        names = [g for g in names if g not in results]
    if coord is None:
        results.update(dict.fromkeys(names, E.COORDINATOR_NOT_AVAILABLE))
    elif names:
        results.update(coord.handle_delete_groups(names))
    return DeleteGroupsResponse(throttle_time_ms=0, results=[
        DeleteGroupsResponse.DeletableGroupResult(group_id=g, error_code=results[g]) for g in dict.fromkeys(
            request.groups_names)
    ])
