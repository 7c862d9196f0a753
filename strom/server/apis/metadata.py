"""Metadata (key 3): brokers, the controller, topics and partition leaders; creates topics on demand when allowed.

With an authorizer (Kafka's ``handleTopicMetadataRequest``): "all topics" lists only those the principal may
DESCRIBE; an asked-for topic it may not describe answers TOPIC_AUTHORIZATION_FAILED whether it exists or not
(no existence leak); creating one on demand needs CREATE on the cluster or on the topic.
"""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING, Any

from strom.common.error_codes import ErrorCode
from strom.common.errors import BrokerResponseError
from strom.protocol.api_keys import ApiKey
from strom.protocol.messages.metadata import MetadataRequest, MetadataResponse
from strom.server.admin_manager import log_not_created
from strom.server.apis import api
from strom.server.metadata_cache import TopicInfo, validate_topic_name
from strom.server.security.request_auth import Op, Res, allowed, allowed_cluster, allowed_topics, operations

if TYPE_CHECKING:
    from strom.server.admin_manager import AdminManager
    from strom.server.metadata_cache import MetadataCache
    from strom.server.request_context import RequestContext

log = logging.getLogger("strom.server")

ZERO_UUID = uuid.UUID(int=0)
OMITTED = -(2**31)  # "authorized operations not requested"
# AclOperation codes (Kafka's AclOperation): READ 3, WRITE 4, CREATE 5, DELETE 6, ALTER 7, DESCRIBE 8,
# CLUSTER_ACTION 9, DESCRIBE_CONFIGS 10, ALTER_CONFIGS 11, IDEMPOTENT_WRITE 12. Without an authorizer every
# operation a resource supports is allowed, and that is what Kafka reports.
TOPIC_OPERATIONS = sum(1 << op for op in (3, 4, 5, 6, 7, 8, 10, 11))
CLUSTER_OPERATIONS = sum(1 << op for op in (5, 7, 8, 9, 10, 11, 12))
GROUP_OPERATIONS = sum(1 << op for op in (3, 6, 8))
# A broker just (re)started knows no topic until the controller's first UpdateMetadata, a second or so after it
# listens. A Metadata request in that window waits for it (this long at most: below every client's request
# timeout) instead of being told that the cluster's topics do not exist, as a KRaft broker serves only once it has
# caught up with the metadata log.
FIRST_UPDATE_WAIT_S = 10.0


def topic_metadata(info: TopicInfo, metadata: MetadataCache, include_ops: bool, ops: int = TOPIC_OPERATIONS,
                   ) -> MetadataResponse.MetadataResponseTopic:
    alive = {b.node_id for b in metadata.alive_brokers()}
    parts = []
    for p, st in enumerate(info.partitions):
        offline = [r for r in st.replicas if r not in alive or r in st.offline_replicas]  # (or its log dir failed)
        parts.append(MetadataResponse.MetadataResponsePartition(
            error_code=ErrorCode.LEADER_NOT_AVAILABLE if st.leader < 0 else ErrorCode.NONE,
            partition_index=p, leader_id=st.leader, leader_epoch=st.leader_epoch, replica_nodes=list(st.replicas),
            isr_nodes=list(st.isr), offline_replicas=offline))
    return MetadataResponse.MetadataResponseTopic(
        error_code=ErrorCode.NONE, name=info.name, topic_id=info.topic_id, is_internal=info.is_internal, partitions=parts,
        topic_authorized_operations=ops if include_ops else OMITTED)


@api(ApiKey.METADATA, 0)
async def handle(ctx: RequestContext, request: MetadataRequest, *, metadata: MetadataCache,
                 admin: AdminManager, authorizer: Any) -> MetadataResponse:
    await metadata.wait_until_initialized(FIRST_UPDATE_WAIT_S)
    version = ctx.api_version
    include_ops = version >= 8 and request.include_topic_authorized_operations
    topics: list[MetadataResponse.MetadataResponseTopic] = []
    # v0: an empty list means all topics; v1+: null means all, empty means none.
    wanted = request.topics
    if authorizer is not None:
        topics = await _authorized_topics(ctx, request, metadata, admin, authorizer, include_ops)
    elif wanted is None or (version == 0 and not wanted):
        topics = [topic_metadata(t, metadata, include_ops) for t in metadata.topics()]
    else:
        allow_auto = request.allow_auto_topic_creation if version >= 4 else True
        for t in wanted:
            name = t.name
            if name is None and version >= 10 and t.topic_id != ZERO_UUID:
                info = metadata.topic_by_id(t.topic_id)
                if info is None:
                    # The name is nullable in responses from v12 only.
                    topics.append(MetadataResponse.MetadataResponseTopic(
                        error_code=ErrorCode.UNKNOWN_TOPIC_ID, name=None if version >= 12 else "",
                        topic_id=t.topic_id))
                    continue
            else:
                err = validate_topic_name(name)
                if err is not None:
                    topics.append(MetadataResponse.MetadataResponseTopic(error_code=ErrorCode.INVALID_TOPIC_EXCEPTION,
                                                                         name=name or ""))
                    continue
                info = metadata.topic(name)
                code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                if info is None and allow_auto:
                    try:
                        info = await admin.auto_create_topic(name)
                    except BrokerResponseError as e:
                        log_not_created(name, e)
                        code = e.errno
                if info is None:
                    topics.append(MetadataResponse.MetadataResponseTopic(error_code=code, name=name))
                    continue
            topics.append(topic_metadata(info, metadata, include_ops))
    brokers = []
    for b in metadata.alive_brokers():
        ep = b.endpoint(ctx.listener_name) or b.endpoint()
        if ep is not None:
            brokers.append(MetadataResponse.MetadataResponseBroker(node_id=b.node_id, host=ep[0], port=ep[1],
                                                                   rack=b.rack))
    include_cluster_ops = 8 <= version <= 10 and request.include_cluster_authorized_operations
    cluster_ops = OMITTED
    if include_cluster_ops:
        cluster_ops = CLUSTER_OPERATIONS if authorizer is None else cluster_operations(authorizer, ctx)
    return MetadataResponse(
        throttle_time_ms=0, brokers=brokers, cluster_id=metadata.cluster_id, controller_id=metadata.controller_id(),
        topics=topics, cluster_authorized_operations=cluster_ops)


def cluster_operations(authorizer: Any, ctx: RequestContext) -> int:
    """Kafka reports the cluster's operations only to a principal that may DESCRIBE the cluster (else 0)."""
    cluster = (Res.CLUSTER, "kafka-cluster")
    return operations(authorizer, ctx, cluster) if allowed(authorizer, ctx, Op.DESCRIBE, cluster) else 0


async def _authorized_topics(ctx: RequestContext, request: MetadataRequest, metadata: MetadataCache,
                             admin: AdminManager, authorizer: Any, include_ops: bool,
                             ) -> list[MetadataResponse.MetadataResponseTopic]:
    """The topics part of the answer when an authorizer is set (kept apart so the default path stays as it is)."""
    version = ctx.api_version
    T = MetadataResponse.MetadataResponseTopic
    denied = ErrorCode.TOPIC_AUTHORIZATION_FAILED

    def describe(info: TopicInfo) -> T:
        ops = operations(authorizer, ctx, (Res.TOPIC, info.name)) if include_ops else OMITTED
        return topic_metadata(info, metadata, include_ops, ops)

    wanted = request.topics
    if wanted is None or (version == 0 and not wanted):
        infos = metadata.topics()
        visible = allowed_topics(authorizer, ctx, Op.DESCRIBE, (t.name for t in infos))
        return [describe(t) for t in infos if t.name in visible]
    allow_auto = request.allow_auto_topic_creation if version >= 4 else True
    may_create_any = None  # CREATE on the cluster, asked only once a topic would be created
    out: list[T] = []
    for t in wanted:
        name = t.name
        if name is None and version >= 10 and t.topic_id != ZERO_UUID:
            info = metadata.topic_by_id(t.topic_id)
            if info is None:
                out.append(T(error_code=ErrorCode.UNKNOWN_TOPIC_ID, name=None if version >= 12 else "",
                             topic_id=t.topic_id))
            elif not allowed(authorizer, ctx, Op.DESCRIBE, (Res.TOPIC, info.name)):
                out.append(T(error_code=denied, name=None if version >= 12 else "", topic_id=t.topic_id))
            else:
                out.append(describe(info))
            continue
        if validate_topic_name(name) is not None:
            out.append(T(error_code=ErrorCode.INVALID_TOPIC_EXCEPTION, name=name or ""))
            continue
        if not allowed(authorizer, ctx, Op.DESCRIBE, (Res.TOPIC, name)):
            out.append(T(error_code=denied, name=name))
            continue
        info = metadata.topic(name)
        code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        if info is None and allow_auto and admin.auto_create_enable:
            if may_create_any is None:
                may_create_any = allowed_cluster(authorizer, ctx, Op.CREATE)
            if not may_create_any and not allowed(authorizer, ctx, Op.CREATE, (Res.TOPIC, name)):
                out.append(T(error_code=denied, name=name))
                continue
            try:
                info = await admin.auto_create_topic(name)
            except BrokerResponseError as e:
                log_not_created(name, e)
                code = e.errno
        if info is None:
            out.append(T(error_code=code, name=name))
            continue
        out.append(describe(info))
    return out
