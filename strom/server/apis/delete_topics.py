"""DeleteTopics (key 20): remove the topic from the registry and delete its logs."""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING

from strom.protocol.api_keys import ApiKey
from strom.protocol.messages.delete_topics import DeleteTopicsRequest, DeleteTopicsResponse
from strom.server.apis import api

if TYPE_CHECKING:
    from strom.server.request_context import RequestContext

log = logging.getLogger("strom.server")
UNKNOWN_TOPIC_OR_PARTITION = 3
INVALID_TOPIC_EXCEPTION = 17
TOPIC_DELETION_DISABLED = 73
UNKNOWN_TOPIC_ID = 100
ZERO_UUID = uuid.UUID(int=0)


@api(ApiKey.DELETE_TOPICS, 1)
async def handle(ctx: RequestContext, request: DeleteTopicsRequest) -> DeleteTopicsResponse:
    broker = ctx.broker
    md, rm = broker.metadata, broker.replica_manager
    assert md is not None and rm is not None
    if ctx.api_version >= 6:
        wanted = [(t.name, t.topic_id) for t in request.topics]
    else:
        wanted = [(n, ZERO_UUID) for n in request.topic_names]
    results = []
    for name, topic_id in wanted:
        info = md.topic(name) if name is not None else md.topic_by_id(topic_id)
        R = DeleteTopicsResponse.DeletableTopicResult
        if info is None:
            code = UNKNOWN_TOPIC_ID if name is None else UNKNOWN_TOPIC_OR_PARTITION
            results.append(R(name=name, topic_id=topic_id, error_code=code,
                             error_message="This server does not host this topic ID." if name is None else
                             "This server does not host this topic-partition."))
            continue
        if not broker.config["delete.topic.enable"]:
            results.append(R(name=info.name, topic_id=info.topic_id, error_code=TOPIC_DELETION_DISABLED,
                             error_message="Topic deletion is disabled."))
            continue
        if info.is_internal:
            results.append(R(name=info.name, topic_id=info.topic_id, error_code=INVALID_TOPIC_EXCEPTION,
                             error_message=f"Cannot delete internal topic {info.name}"))
            continue
        md.delete_topic(info.name)
        rm.delete_topic(info)
        log.info("deleted topic %s", info.name)
        results.append(R(name=info.name, topic_id=info.topic_id, error_code=0))
    return DeleteTopicsResponse(throttle_time_ms=0, responses=results)
