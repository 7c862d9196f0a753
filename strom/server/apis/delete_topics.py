"""DeleteTopics (key 20): delete topics by name or id through the admin manager."""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING, Any

from strom.common.error_codes import ErrorCode
from strom.common.errors import BrokerResponseError
from strom.protocol.api_keys import ApiKey
from strom.protocol.messages.delete_topics import DeleteTopicsRequest, DeleteTopicsResponse
from strom.server.apis import api
from strom.server.security.request_auth import Op, Res, allowed

if TYPE_CHECKING:
    from strom.server.admin_manager import AdminManager
    from strom.server.broker_config import BrokerConfig
    from strom.server.metadata_cache import MetadataCache
    from strom.server.request_context import RequestContext

log = logging.getLogger("strom.server")
ZERO_UUID = uuid.UUID(int=0)


@api(ApiKey.DELETE_TOPICS, 1)
async def handle(ctx: RequestContext, request: DeleteTopicsRequest, *, metadata: MetadataCache,
                 admin: AdminManager, config: BrokerConfig, authorizer: Any, quotas: Any) -> DeleteTopicsResponse:
    # KIP-599: v5+ can be told THROTTLING_QUOTA_EXCEEDED per topic; older versions are only throttled afterwards
    quota = quotas.controller_mutation_quota(ctx, strict=ctx.api_version >= 5) if quotas is not None else None
    if ctx.api_version >= 6:
        wanted = [(t.name, t.topic_id) for t in request.topics]
    else:
        wanted = [(n, ZERO_UUID) for n in request.topic_names]
    results = []
    R = DeleteTopicsResponse.DeletableTopicResult
    for name, topic_id in wanted:
        if authorizer is not None:
            refusal = _refusal(authorizer, ctx, name, topic_id, metadata)
            if refusal is not None:
                results.append(refusal)
                continue
        info = metadata.topic(name) if name is not None else metadata.topic_by_id(topic_id)
        if info is None:
            code = ErrorCode.UNKNOWN_TOPIC_ID if name is None else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            results.append(R(name=name, topic_id=topic_id, error_code=code,
                             error_message="This server does not host this topic ID." if name is None else
                             "This server does not host this topic-partition."))
            continue
        if not config["delete.topic.enable"]:
            results.append(R(name=info.name, topic_id=info.topic_id, error_code=ErrorCode.TOPIC_DELETION_DISABLED,
                             error_message="Topic deletion is disabled."))
            continue
        if info.is_internal:
            results.append(R(name=info.name, topic_id=info.topic_id, error_code=ErrorCode.INVALID_TOPIC_EXCEPTION,
                             error_message=f"Cannot delete internal topic {info.name}"))
            continue
        try:
            if quota is not None:
                quota.record(len(info.partitions))
            await admin.delete_topic(info, request.timeout_ms)
        except BrokerResponseError as e:
            results.append(R(name=info.name, topic_id=info.topic_id, error_code=e.errno, error_message=e.message))
            continue
        log.info("deleted topic %s", info.name)
        results.append(R(name=info.name, topic_id=info.topic_id, error_code=ErrorCode.NONE))
    return DeleteTopicsResponse(throttle_time_ms=quota.throttle_time_ms if quota is not None else 0,
                                responses=results)


def _refusal(authorizer: Any, ctx: RequestContext, name: str | None, topic_id: uuid.UUID, metadata: MetadataCache,
             ) -> DeleteTopicsResponse.DeletableTopicResult | None:
    """TOPIC_AUTHORIZATION_FAILED without DELETE on the topic (checked before existence, as Kafka does). A topic
    named by id keeps its name hidden from a principal that may not DESCRIBE it."""
    R = DeleteTopicsResponse.DeletableTopicResult
    denied = ErrorCode.TOPIC_AUTHORIZATION_FAILED
    if name is None:
        info = metadata.topic_by_id(topic_id)
        if info is None:
            return None  # UNKNOWN_TOPIC_ID below: ids are not secret
        if not allowed(authorizer, ctx, Op.DESCRIBE, (Res.TOPIC, info.name)):
            return R(name=None, topic_id=topic_id, error_code=denied, error_message="Authorization failed.")
        name = info.name
    if not allowed(authorizer, ctx, Op.DELETE, (Res.TOPIC, name)):
        return R(name=name, topic_id=topic_id, error_code=denied, error_message="Authorization failed.")
    return None
