"""DescribeCluster (key 60): the live brokers and the active controller."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.common.error_codes import ErrorCode
from strom.protocol.api_keys import ApiKey
from strom.protocol.messages.describe_cluster import DescribeClusterRequest, DescribeClusterResponse
from strom.server.apis import api
from strom.server.apis.metadata import CLUSTER_OPERATIONS, OMITTED, cluster_operations

if TYPE_CHECKING:
    from strom.server.metadata_cache import MetadataCache
    from strom.server.request_context import RequestContext

BROKERS_ENDPOINT, CONTROLLERS_ENDPOINT = 1, 2


@api(ApiKey.DESCRIBE_CLUSTER, 0)
async def handle(ctx: RequestContext, request: DescribeClusterRequest, *,
                 metadata: MetadataCache, authorizer: Any) -> DescribeClusterResponse:
    if ctx.api_version >= 1 and request.endpoint_type not in (BROKERS_ENDPOINT, CONTROLLERS_ENDPOINT):
        return DescribeClusterResponse(error_code=ErrorCode.UNSUPPORTED_ENDPOINT_TYPE,
                                       error_message="Unsupported endpoint type", cluster_id=metadata.cluster_id)
    brokers = []
    for b in metadata.alive_brokers():
        ep = b.endpoint(ctx.listener_name) or b.endpoint()
        if ep is not None:
            brokers.append(DescribeClusterResponse.DescribeClusterBroker(broker_id=b.node_id, host=ep[0], port=ep[1],
                                                                         rack=b.rack))
    ops = OMITTED
    if request.include_cluster_authorized_operations:
        ops = CLUSTER_OPERATIONS if authorizer is None else cluster_operations(authorizer, ctx)
    return DescribeClusterResponse(
        throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None, endpoint_type=request.endpoint_type,
        cluster_id=metadata.cluster_id, controller_id=metadata.controller_id(), brokers=brokers,
        cluster_authorized_operations=ops)
