"""ApiVersions (key 18): the versions this broker handles, straight from the handler registry."""

from __future__ import annotations

from typing import TYPE_CHECKING

from strom.protocol.api_keys import ApiKey
from strom.protocol.messages.api_versions import ApiVersionsRequest, ApiVersionsResponse
from strom.server.apis import REGISTRY, api

if TYPE_CHECKING:
    from strom.server.broker import BrokerServer
    from strom.server.request_context import RequestContext

UNSUPPORTED_VERSION = 35


def _api_list() -> list[ApiVersionsResponse.ApiVersion]:
    return [
        ApiVersionsResponse.ApiVersion(api_key=s.api_key, min_version=s.min_version, max_version=s.max_version)
        for s in sorted(REGISTRY.values(), key=lambda s: s.api_key)
    ]


def unsupported_version_response(broker: BrokerServer) -> ApiVersionsResponse:
    """The v0 body Kafka sends when the client asked for an ApiVersions version it does not know (KIP-511)."""
    spec = REGISTRY[ApiKey.API_VERSIONS]
    return ApiVersionsResponse(
        error_code=UNSUPPORTED_VERSION,
        api_keys=[ApiVersionsResponse.ApiVersion(api_key=ApiKey.API_VERSIONS, min_version=spec.min_version,
                                                 max_version=spec.max_version)],
    )


@api(ApiKey.API_VERSIONS, 0)
async def handle(ctx: RequestContext, request: ApiVersionsRequest) -> ApiVersionsResponse:
    return ApiVersionsResponse(error_code=0, api_keys=_api_list(), throttle_time_ms=0)
