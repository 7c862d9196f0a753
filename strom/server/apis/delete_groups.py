"""DeleteGroups (key 42): delete empty groups and their committed offsets (tombstones in __consumer_offsets).

Kafka counterpart: ``KafkaApis.handleDeleteGroupsRequest`` → ``GroupCoordinator.handleDeleteGroups``: a group with
members gets NON_EMPTY_GROUP, an unknown one GROUP_ID_NOT_FOUND.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from strom.common.error_codes import ErrorCode as E
from strom.protocol.api_keys import ApiKey
from strom.protocol.messages.delete_groups import DeleteGroupsRequest, DeleteGroupsResponse
from strom.server.apis import api
from strom.server.coordinator.request_support import active_coordinator

if TYPE_CHECKING:
    from strom.server.coordinator.group_coordinator import GroupCoordinator
    from strom.server.request_context import RequestContext


@api(ApiKey.DELETE_GROUPS, 0)
async def handle(ctx: RequestContext, request: DeleteGroupsRequest, *,
                 group_coordinator: GroupCoordinator) -> DeleteGroupsResponse:
    coord = active_coordinator(group_coordinator)
    if coord is None:
        results = dict.fromkeys(request.groups_names, E.COORDINATOR_NOT_AVAILABLE)
    else:
        results = coord.handle_delete_groups(request.groups_names)
    return DeleteGroupsResponse(throttle_time_ms=0, results=[
        DeleteGroupsResponse.DeletableGroupResult(group_id=g, error_code=results[g]) for g in dict.fromkeys(
            request.groups_names)
    ])
