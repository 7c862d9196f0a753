"""Produce (key 0): validate and append each partition's batches; acks 0 gets no response.

Kafka counterpart: ``KafkaApis.handleProduceRequest`` → ``ReplicaManager.appendRecords``. With one broker every
acks value is satisfied once the local append (and the flush policy's fsync) is done.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from strom.common.structs import TopicPartition
from strom.protocol.api_keys import ApiKey
from strom.protocol.messages.produce import ProduceRequest, ProduceResponse
from strom.server.apis import api
from strom.server.apis.metadata import auto_create_topic
from strom.server.metadata_cache import validate_topic_name

if TYPE_CHECKING:
    from strom.server.request_context import RequestContext

UNKNOWN_TOPIC_OR_PARTITION = 3
CORRUPT_MESSAGE = 2
INVALID_TOPIC_EXCEPTION = 17
INVALID_REQUIRED_ACKS = 21

PartitionResponse = ProduceResponse.PartitionProduceResponse


@api(ApiKey.PRODUCE, 3)
async def handle(ctx: RequestContext, request: ProduceRequest) -> ProduceResponse | None:
    broker = ctx.broker
    md = broker.metadata
    rm = broker.replica_manager
    assert md is not None and rm is not None
    acks = request.acks
    responses: list[ProduceResponse.TopicProduceResponse] = []
    for td in request.topic_data:
        name = td.name
        parts: list[PartitionResponse] = []
        if acks not in (-1, 0, 1):
            parts = [PartitionResponse(index=pd.index, error_code=INVALID_REQUIRED_ACKS, base_offset=-1)
                     for pd in td.partition_data]
        elif validate_topic_name(name) is not None:
            parts = [PartitionResponse(index=pd.index, error_code=INVALID_TOPIC_EXCEPTION, base_offset=-1)
                     for pd in td.partition_data]
        else:
            info = md.topic(name) or auto_create_topic(broker, name)
            for pd in td.partition_data:
                if info is None or not 0 <= pd.index < info.num_partitions:
                    parts.append(PartitionResponse(index=pd.index, error_code=UNKNOWN_TOPIC_OR_PARTITION, base_offset=-1))
                    continue
                if pd.records is None or len(pd.records) == 0:
                    parts.append(PartitionResponse(index=pd.index, error_code=CORRUPT_MESSAGE, base_offset=-1,
                                                   error_message="Produce request carried no record batch"))
                    continue
                code, append_info, message = rm.append(TopicPartition(name, pd.index), pd.records)
                if code:
                    parts.append(PartitionResponse(index=pd.index, error_code=code, base_offset=-1,
                                                   error_message=message))
                else:
                    assert append_info is not None
                    parts.append(PartitionResponse(
                        index=pd.index, error_code=0, base_offset=append_info.first_offset,  # type: ignore[attr-defined]
                        log_append_time_ms=append_info.log_append_time,  # type: ignore[attr-defined]
                        log_start_offset=append_info.log_start_offset,  # type: ignore[attr-defined]
                    ))
        responses.append(ProduceResponse.TopicProduceResponse(name=name, partition_responses=parts))
    if acks == 0:
        return None
    return ProduceResponse(responses=responses, throttle_time_ms=0)
