"""Metadata (key 3): brokers, topics and partition leaders; creates topics on demand when allowed."""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING

from strom.protocol.api_keys import ApiKey
from strom.protocol.messages.metadata import MetadataRequest, MetadataResponse
from strom.server.apis import api
from strom.server.metadata_cache import TopicInfo, validate_topic_name

if TYPE_CHECKING:
    from strom.server.broker import BrokerServer
    from strom.server.request_context import RequestContext

log = logging.getLogger("strom.server")

UNKNOWN_TOPIC_OR_PARTITION = 3
INVALID_TOPIC_EXCEPTION = 17
UNKNOWN_TOPIC_ID = 100
ZERO_UUID = uuid.UUID(int=0)


def auto_create_topic(broker: BrokerServer, name: str) -> TopicInfo | None:
    """Create ``name`` with the broker defaults when ``auto.create.topics.enable`` is on (Kafka's AutoTopicCreationManager)."""
    assert broker.metadata is not None and broker.replica_manager is not None
    if not broker.config["auto.create.topics.enable"] or validate_topic_name(name) is not None:
        return None
    if name.startswith("__"):
        return None
    info = broker.metadata.create_topic(name, int(broker.config["num.partitions"]))
    broker.replica_manager.ensure_logs(info)
    log.info("auto-created topic %s with %d partition(s)", name, info.num_partitions)
    return info


def topic_metadata(broker: BrokerServer, info: TopicInfo, version: int) -> MetadataResponse.MetadataResponseTopic:
    nid = broker.node_id
    return MetadataResponse.MetadataResponseTopic(
        error_code=0,
        name=info.name,
        topic_id=info.topic_id,
        is_internal=info.is_internal,
        partitions=[
            MetadataResponse.MetadataResponsePartition(
                error_code=0, partition_index=p, leader_id=nid, leader_epoch=0, replica_nodes=[nid], isr_nodes=[nid],
                offline_replicas=[],
            )
            for p in range(info.num_partitions)
        ],
    )


@api(ApiKey.METADATA, 0)
async def handle(ctx: RequestContext, request: MetadataRequest) -> MetadataResponse:
    broker = ctx.broker
    md = broker.metadata
    assert md is not None
    version = ctx.api_version
    topics: list[MetadataResponse.MetadataResponseTopic] = []
    # v0: an empty list means all topics; v1+: null means all, empty means none.
    wanted = request.topics
    if wanted is None or (version == 0 and not wanted):
        topics = [topic_metadata(broker, t, version) for t in md.topics()]
    else:
        allow_auto = request.allow_auto_topic_creation if version >= 4 else True
        for t in wanted:
            name = t.name
            if name is None and version >= 10 and t.topic_id != ZERO_UUID:
                info = md.topic_by_id(t.topic_id)
                if info is None:
                    # The name is nullable in responses from v12 only.
                    topics.append(MetadataResponse.MetadataResponseTopic(
                        error_code=UNKNOWN_TOPIC_ID, name=None if version >= 12 else "", topic_id=t.topic_id))
                    continue
            else:
                err = validate_topic_name(name)
                if err is not None:
                    topics.append(MetadataResponse.MetadataResponseTopic(error_code=INVALID_TOPIC_EXCEPTION,
                                                                         name=name or ""))
                    continue
                info = md.topic(name)
                if info is None and allow_auto:
                    info = auto_create_topic(broker, name)
                if info is None:
                    topics.append(MetadataResponse.MetadataResponseTopic(error_code=UNKNOWN_TOPIC_OR_PARTITION,
                                                                         name=name))
                    continue
            topics.append(topic_metadata(broker, info, version))
    brokers = [
        MetadataResponse.MetadataResponseBroker(node_id=broker.node_id, host=a.host, port=a.port,
                                                rack=broker.config["broker.rack"])
        for a in broker.advertised[:1]
    ]
    return MetadataResponse(
        throttle_time_ms=0, brokers=brokers, cluster_id=md.cluster_id, controller_id=broker.node_id, topics=topics
    )
