"""DescribeCluster (key 60): the one broker, which is also the controller."""

from __future__ import annotations

from typing import TYPE_CHECKING

from strom.protocol.api_keys import ApiKey
from strom.protocol.messages.describe_cluster import DescribeClusterRequest, DescribeClusterResponse
from strom.server.apis import api

if TYPE_CHECKING:
    from strom.server.request_context import RequestContext

UNSUPPORTED_ENDPOINT_TYPE = 119


@api(ApiKey.DESCRIBE_CLUSTER, 0)
async def handle(ctx: RequestContext, request: DescribeClusterRequest) -> DescribeClusterResponse:
    broker = ctx.broker
    assert broker.metadata is not None
    if ctx.api_version >= 1 and request.endpoint_type not in (1, 2):
        return DescribeClusterResponse(error_code=UNSUPPORTED_ENDPOINT_TYPE, error_message="Unsupported endpoint type",
                                       cluster_id=broker.metadata.cluster_id)
    a = broker.advertised[0]
    return DescribeClusterResponse(
        throttle_time_ms=0, error_code=0, error_message=None, endpoint_type=request.endpoint_type,
        cluster_id=broker.metadata.cluster_id, controller_id=broker.node_id,
        brokers=[DescribeClusterResponse.DescribeClusterBroker(broker_id=broker.node_id, host=a.host, port=a.port,
                                                               rack=broker.config["broker.rack"])],
    )
