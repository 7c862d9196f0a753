"""GetTelemetrySubscriptions (key 71) and PushTelemetry (key 72): client metrics, KIP-714
(:mod:`strom.server.client_metrics_manager`). Advertised only when something receives the metrics; a request for
them otherwise is answered UNSUPPORTED_VERSION, as Kafka's broker does without a telemetry reporter."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from strom.common.error_codes import ErrorCode
from strom.protocol.api_keys import ApiKey
from strom.protocol.messages.get_telemetry_subscriptions import (
    GetTelemetrySubscriptionsRequest,
    GetTelemetrySubscriptionsResponse,
)
from strom.protocol.messages.push_telemetry import PushTelemetryRequest, PushTelemetryResponse
from strom.server.apis import api

if TYPE_CHECKING:
    from strom.server.client_metrics_manager import ClientMetricsManager
    from strom.server.request_context import RequestContext

log = logging.getLogger("strom.server")


def _source(ctx: RequestContext) -> tuple[str, str]:
    host, _, port = ctx.connection.peer.rpartition(":")
    return (host, port) if host else (ctx.connection.peer, "")


@api(ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, 0)
async def get_telemetry_subscriptions(ctx: RequestContext, request: GetTelemetrySubscriptionsRequest, *,
                                      client_metrics: ClientMetricsManager | None,
                                      ) -> GetTelemetrySubscriptionsResponse:
    if client_metrics is None or not client_metrics.enabled:
        return GetTelemetrySubscriptionsResponse(error_code=ErrorCode.UNSUPPORTED_VERSION)
    conn = ctx.connection
    r = client_metrics.get_subscriptions(request.client_instance_id, ctx.client_id or "", conn.client_software_name,
                                         conn.client_software_version, *_source(ctx))
    if r.error_code:
        log.debug("GetTelemetrySubscriptions of %s: %s", r.client_instance_id, r.error_message)
        return GetTelemetrySubscriptionsResponse(error_code=r.error_code)
    return GetTelemetrySubscriptionsResponse(
        error_code=ErrorCode.NONE, client_instance_id=r.client_instance_id, subscription_id=r.subscription_id,
        accepted_compression_types=list(r.accepted_compression_types), push_interval_ms=r.push_interval_ms,
        telemetry_max_bytes=r.telemetry_max_bytes, delta_temporality=r.delta_temporality,
        requested_metrics=list(r.requested_metrics))


@api(ApiKey.PUSH_TELEMETRY, 0)
async def push_telemetry(ctx: RequestContext, request: PushTelemetryRequest, *,
                         client_metrics: ClientMetricsManager | None) -> PushTelemetryResponse:
    if client_metrics is None or not client_metrics.enabled:
        return PushTelemetryResponse(error_code=ErrorCode.UNSUPPORTED_VERSION)
    conn = ctx.connection
    code, message = client_metrics.push(request.client_instance_id, request.subscription_id, request.terminating,
                                        request.compression_type, request.metrics, ctx.client_id or "",
                                        conn.client_software_name, conn.client_software_version, *_source(ctx))
    if code:
        log.debug("PushTelemetry of %s: %s", request.client_instance_id, message)
    return PushTelemetryResponse(error_code=code)
