"""CreatePartitions (key 37): grow a topic's partition count (never shrink it)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from strom.protocol.api_keys import ApiKey
from strom.protocol.messages.create_partitions import CreatePartitionsRequest, CreatePartitionsResponse
from strom.server.apis import api
from strom.server.apis.create_topics import MAX_PARTITIONS

if TYPE_CHECKING:
    from strom.server.request_context import RequestContext

UNKNOWN_TOPIC_OR_PARTITION = 3
INVALID_PARTITIONS = 37
INVALID_REPLICA_ASSIGNMENT = 39
INVALID_REQUEST = 42


@api(ApiKey.CREATE_PARTITIONS, 0)
async def handle(ctx: RequestContext, request: CreatePartitionsRequest) -> CreatePartitionsResponse:
    broker = ctx.broker
    md, rm = broker.metadata, broker.replica_manager
    assert md is not None and rm is not None
    R = CreatePartitionsResponse.CreatePartitionsTopicResult
    results = []
    names = [t.name for t in request.topics]
    for t in request.topics:
        info = md.topic(t.name)
        if names.count(t.name) > 1:
            results.append(R(name=t.name, error_code=INVALID_REQUEST, error_message="Duplicate topic in request."))
        elif info is None:
            results.append(R(name=t.name, error_code=UNKNOWN_TOPIC_OR_PARTITION,
                             error_message=f"The topic '{t.name}' does not exist."))
        elif t.count == info.num_partitions:
            results.append(R(name=t.name, error_code=INVALID_PARTITIONS,
                             error_message=f"Topic already has {info.num_partitions} partitions."))
        elif t.count < info.num_partitions:
            results.append(R(name=t.name, error_code=INVALID_PARTITIONS,
                             error_message=f"Topic currently has {info.num_partitions} partitions, which is higher "
                                           f"than the requested {t.count}."))
        elif t.count > MAX_PARTITIONS:
            results.append(R(name=t.name, error_code=INVALID_PARTITIONS,
                             error_message=f"Number of partitions {t.count} is over strom's limit {MAX_PARTITIONS}."))
        elif t.assignments is not None and (
            len(t.assignments) != t.count - info.num_partitions
            or any(list(a.broker_ids) != [broker.node_id] for a in t.assignments)
        ):
            results.append(R(name=t.name, error_code=INVALID_REPLICA_ASSIGNMENT,
                             error_message=f"Replica assignment must name only broker {broker.node_id}, one entry "
                                           "per new partition."))
        else:
            if not request.validate_only:
                md.set_partitions(t.name, t.count)
                rm.ensure_logs(info)
            results.append(R(name=t.name, error_code=0, error_message=None))
    return CreatePartitionsResponse(throttle_time_ms=0, results=results)
