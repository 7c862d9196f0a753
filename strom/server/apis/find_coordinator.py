"""FindCoordinator (key 10): every group and transactional id is coordinated by this broker.

Kafka counterpart: ``KafkaApis.handleFindCoordinatorRequest`` (v0-v3 one key, v4+ batched ``CoordinatorKeys``,
KIP-699). Key type 0 is a group (the ``__consumer_offsets`` topic is created on first use), 1 a transactional id;
other key types (2 = share groups) get INVALID_REQUEST.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from strom.common.error_codes import ErrorCode as E
from strom.common.errors import KafkaError
from strom.protocol.api_keys import ApiKey
from strom.protocol.messages.find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse
from strom.server.apis import api
from strom.server.coordinator.request_support import group_coordinator

if TYPE_CHECKING:
    from strom.server.request_context import RequestContext

log = logging.getLogger("strom.server")

GROUP, TRANSACTION = 0, 1


def _lookup(ctx: RequestContext, key_type: int) -> tuple[int, str | None]:
    if key_type == GROUP:
        coord = group_coordinator(ctx)
        if coord is None:
            return E.COORDINATOR_NOT_AVAILABLE, "The coordinator is not available."
        try:
            coord.ensure_offsets_topic()
        except (OSError, KafkaError) as e:
            log.error("cannot create __consumer_offsets: %s", e)
            return E.COORDINATOR_NOT_AVAILABLE, "The coordinator is not available."
        return E.NONE, None
    if key_type == TRANSACTION:
        return E.NONE, None
    return E.INVALID_REQUEST, f"Unsupported key type {key_type}"


@api(ApiKey.FIND_COORDINATOR, 0)
async def handle(ctx: RequestContext, request: FindCoordinatorRequest) -> FindCoordinatorResponse:
    version = ctx.api_version
    key_type = request.key_type if version >= 1 else GROUP
    node = ctx.broker.advertised[0]
    node_id = ctx.broker.node_id
    error, message = _lookup(ctx, key_type)
    ok = error == E.NONE
    if version < 4:
        return FindCoordinatorResponse(throttle_time_ms=0, error_code=error, error_message=message if not ok else None,
                                       node_id=node_id if ok else -1, host=node.host if ok else "",
                                       port=node.port if ok else -1)
    return FindCoordinatorResponse(throttle_time_ms=0, coordinators=[
        FindCoordinatorResponse.Coordinator(key=key, node_id=node_id if ok else -1, host=node.host if ok else "",
                                            port=node.port if ok else -1, error_code=error,
                                            error_message=None if ok else message)
        for key in request.coordinator_keys
    ])
