"""ApiVersions (key 18): the versions this broker handles, straight from the handler registry."""

from __future__ import annotations

from typing import TYPE_CHECKING

from strom.common.error_codes import ErrorCode
from strom.protocol.api_keys import ApiKey
from strom.protocol.messages.api_versions import ApiVersionsRequest, ApiVersionsResponse
from strom.server.apis import ApiSpec, api

if TYPE_CHECKING:
    from strom.server.client_metrics_manager import ClientMetricsManager
    from strom.server.request_context import RequestContext

_TELEMETRY_APIS = (ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, ApiKey.PUSH_TELEMETRY)


def unsupported_version_response(spec: ApiSpec) -> ApiVersionsResponse:
    """The v0 body Kafka sends when the client asked for an ApiVersions version it does not know (KIP-511)."""
    return ApiVersionsResponse(
        error_code=ErrorCode.UNSUPPORTED_VERSION,
        api_keys=[ApiVersionsResponse.ApiVersion(api_key=ApiKey.API_VERSIONS, min_version=spec.min_version,
                                                 max_version=spec.max_version)],
    )


@api(ApiKey.API_VERSIONS, 0)
async def handle(ctx: RequestContext, request: ApiVersionsRequest, *, supported_apis: dict[int, ApiSpec],
                 client_metrics: ClientMetricsManager | None) -> ApiVersionsResponse:
    if ctx.api_version >= 3:
        ctx.connection.client_software_name = request.client_software_name or ""
        ctx.connection.client_software_version = request.client_software_version or ""
    # The telemetry APIs only when something receives the metrics (Kafka's rule: a ClientTelemetry reporter).
    hidden = () if client_metrics is not None and client_metrics.enabled else _TELEMETRY_APIS
    return ApiVersionsResponse(error_code=ErrorCode.NONE, throttle_time_ms=0, api_keys=[
        ApiVersionsResponse.ApiVersion(api_key=s.api_key, min_version=s.min_version, max_version=s.max_version)
        for s in sorted(supported_apis.values(), key=lambda s: s.api_key) if s.api_key not in hidden
    ])
