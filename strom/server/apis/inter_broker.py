"""The cluster's own APIs: controller → broker (LeaderAndIsr 4, StopReplica 5, UpdateMetadata 6), broker →
controller (ControlledShutdown 7, AlterPartition 56), follower → leader (OffsetForLeaderEpoch 23), and the admin
ElectLeaders (43) the controller answers.

Kafka counterpart: the matching ``KafkaApis.handle*`` methods. Requests from a controller with an older epoch are
refused with STALE_CONTROLLER_EPOCH, controller requests meant for an earlier registration of this broker (or
arriving before it registered) with STALE_BROKER_EPOCH (KIP-380); controller APIs sent to a broker that is not the controller get
NOT_CONTROLLER. A standalone broker has no controller peer: it refuses the controller → broker requests.
With an authorizer, the cluster's own APIs need CLUSTER_ACTION on the cluster (CLUSTER_AUTHORIZATION_FAILED),
OffsetForLeaderEpoch CLUSTER_ACTION or DESCRIBE on each topic (consumers use it too, KIP-320), ElectLeaders
ALTER on the cluster.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from strom.common.error_codes import ErrorCode
from strom.common.errors import BrokerResponseError, error_class
from strom.common.structs import TopicPartition
from strom.protocol.api_keys import ApiKey
from strom.protocol.messages.alter_partition import AlterPartitionRequest, AlterPartitionResponse
from strom.protocol.messages.alter_partition_reassignments import (
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
)
from strom.protocol.messages.controlled_shutdown import ControlledShutdownRequest, ControlledShutdownResponse
from strom.protocol.messages.elect_leaders import ElectLeadersRequest, ElectLeadersResponse
from strom.protocol.messages.leader_and_isr import LeaderAndIsrRequest, LeaderAndIsrResponse
from strom.protocol.messages.list_partition_reassignments import (
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
)
from strom.protocol.messages.offset_for_leader_epoch import (
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
)
from strom.protocol.messages.stop_replica import StopReplicaRequest, StopReplicaResponse
from strom.protocol.messages.update_metadata import UpdateMetadataRequest, UpdateMetadataResponse
from strom.server.apis import api
from strom.server.partition import LeaderAndIsr
from strom.server.security.request_auth import Op, allowed_cluster, allowed_topics

if TYPE_CHECKING:
    from strom.server.metadata_cache import MetadataCache
    from strom.server.replica_manager import ReplicaManager
    from strom.server.request_context import RequestContext

log = logging.getLogger("strom.server")
DENIED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED


def _cluster_action_denied(authorizer: Any, ctx: RequestContext) -> bool:
    return authorizer is not None and not allowed_cluster(authorizer, ctx, Op.CLUSTER_ACTION)


@api(ApiKey.LEADER_AND_ISR, 4, 5)
async def leader_and_isr(ctx: RequestContext, request: LeaderAndIsrRequest, *, metadata: MetadataCache,
                         replica_manager: ReplicaManager, authorizer: Any) -> LeaderAndIsrResponse:
    states: list[tuple[TopicPartition, LeaderAndIsr]] = []
    for ts in request.topic_states:
        for ps in ts.partition_states:
            states.append((TopicPartition(ts.topic_name, ps.partition_index),
                           LeaderAndIsr(ps.leader, ps.leader_epoch, list(ps.isr), ps.partition_epoch,
                                        list(ps.replicas), ps.controller_epoch, ps.is_new)))
    if _cluster_action_denied(authorizer, ctx):
        errors, code = dict.fromkeys((tp for tp, _ in states), DENIED), DENIED
    elif (refused := await metadata.controller_request_error(request.broker_epoch)) is not None:
        errors, code = dict.fromkeys((tp for tp, _ in states), refused), refused
        log.info("refusing LeaderAndIsr of controller %d for broker epoch %d: %s", request.controller_id,
                 request.broker_epoch, error_class(refused).name)
    else:
        await metadata.load_topic_configs({tp.topic for tp, _ in states})
        errors = replica_manager.become_leader_or_follower(request.controller_epoch, states)
        code = ErrorCode.STALE_CONTROLLER_EPOCH if errors and all(
            e == ErrorCode.STALE_CONTROLLER_EPOCH for e in errors.values()) and request.controller_epoch < \
            replica_manager.controller_epoch else ErrorCode.NONE
    if ctx.api_version >= 5:
        ids = {ts.topic_name: ts.topic_id for ts in request.topic_states}
        by_topic: dict[str, list[LeaderAndIsrResponse.LeaderAndIsrPartitionError]] = {}
        for tp, e in errors.items():
            by_topic.setdefault(tp.topic, []).append(
                LeaderAndIsrResponse.LeaderAndIsrPartitionError(partition_index=tp.partition, error_code=e))
        return LeaderAndIsrResponse(error_code=code, topics=[
            LeaderAndIsrResponse.LeaderAndIsrTopicError(topic_id=ids[t], partition_errors=ps)
            for t, ps in by_topic.items()])
    return LeaderAndIsrResponse(error_code=code, partition_errors=[
        LeaderAndIsrResponse.LeaderAndIsrPartitionError(topic_name=tp.topic, partition_index=tp.partition,
                                                        error_code=e) for tp, e in errors.items()])


@api(ApiKey.UPDATE_METADATA, 6, 7)
async def update_metadata(ctx: RequestContext, request: UpdateMetadataRequest, *, metadata: MetadataCache,
                          replica_manager: ReplicaManager, authorizer: Any) -> UpdateMetadataResponse:
    if _cluster_action_denied(authorizer, ctx):
        return UpdateMetadataResponse(error_code=DENIED)
    if (refused := await metadata.controller_request_error(request.broker_epoch)) is not None:
        return UpdateMetadataResponse(error_code=refused)
    ok, deleted = metadata.apply_update_metadata(request)
    if not ok:
        return UpdateMetadataResponse(error_code=ErrorCode.STALE_CONTROLLER_EPOCH)
    await metadata.load_topic_configs({ts.topic_name for ts in request.topic_states} - {tp.topic for tp in deleted})
    replica_manager.metadata_updated(deleted)
    return UpdateMetadataResponse(error_code=ErrorCode.NONE)


@api(ApiKey.STOP_REPLICA, 3)
async def stop_replica(ctx: RequestContext, request: StopReplicaRequest, *, metadata: MetadataCache,
                       replica_manager: ReplicaManager, authorizer: Any) -> StopReplicaResponse:
    tps = [(TopicPartition(ts.topic_name, ps.partition_index), ps.delete_partition)
           for ts in request.topic_states for ps in ts.partition_states]
    if _cluster_action_denied(authorizer, ctx):
        return StopReplicaResponse(error_code=DENIED, partition_errors=[
            StopReplicaResponse.StopReplicaPartitionError(topic_name=tp.topic, partition_index=tp.partition,
                                                          error_code=DENIED) for tp, _ in tps])
    if (refused := await metadata.controller_request_error(request.broker_epoch)) is not None:
        errors = dict.fromkeys((tp for tp, _ in tps), refused)
    else:
        errors = replica_manager.stop_replicas(request.controller_epoch, tps)
    return StopReplicaResponse(error_code=ErrorCode.NONE, partition_errors=[
        StopReplicaResponse.StopReplicaPartitionError(topic_name=tp.topic, partition_index=tp.partition, error_code=e)
        for tp, e in errors.items()])


@api(ApiKey.OFFSET_FOR_LEADER_EPOCH, 2)
async def offset_for_leader_epoch(ctx: RequestContext, request: OffsetForLeaderEpochRequest, *,
                                  replica_manager: ReplicaManager, authorizer: Any) -> OffsetForLeaderEpochResponse:
    R = OffsetForLeaderEpochResponse
    topics = []
    described = None
    if authorizer is not None and not allowed_cluster(authorizer, ctx, Op.CLUSTER_ACTION):
        described = allowed_topics(authorizer, ctx, Op.DESCRIBE, (t.topic for t in request.topics))
    for t in request.topics:
        parts = []
        for p in t.partitions:
            if described is not None and t.topic not in described:
                parts.append(R.EpochEndOffset(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, partition=p.partition,
                                              leader_epoch=-1, end_offset=-1))
                continue
            tp = TopicPartition(t.topic, p.partition)
            try:
                part = replica_manager.leader_partition(tp)
                if p.current_leader_epoch >= 0 and p.current_leader_epoch != part.leader_epoch:
                    code = ErrorCode.FENCED_LEADER_EPOCH if p.current_leader_epoch < part.leader_epoch \
                        else ErrorCode.UNKNOWN_LEADER_EPOCH
                    parts.append(R.EpochEndOffset(error_code=code, partition=p.partition, leader_epoch=-1,
                                                  end_offset=-1))
                    continue
                epoch, end = part.log.leader_epoch_cache.end_offset_for(p.leader_epoch, part.log_end_offset)
            except BrokerResponseError as e:
                parts.append(R.EpochEndOffset(error_code=e.errno, partition=p.partition, leader_epoch=-1,
                                              end_offset=-1))
                continue
            parts.append(R.EpochEndOffset(error_code=ErrorCode.NONE, partition=p.partition, leader_epoch=epoch,
                                          end_offset=end))
        topics.append(R.OffsetForLeaderTopicResult(topic=t.topic, partitions=parts))
    return OffsetForLeaderEpochResponse(throttle_time_ms=0, topics=topics)


@api(ApiKey.CONTROLLED_SHUTDOWN, 1, 3)
async def controlled_shutdown(ctx: RequestContext, request: ControlledShutdownRequest, *,
                              controller: object, authorizer: Any) -> ControlledShutdownResponse:
    if _cluster_action_denied(authorizer, ctx):
        return ControlledShutdownResponse(error_code=DENIED, remaining_partitions=[])
    if controller is None or not getattr(controller, "active", False):
        return ControlledShutdownResponse(error_code=ErrorCode.NOT_CONTROLLER, remaining_partitions=[])
    code, remaining = await controller.call("controlled_shutdown", request.broker_id)  # type: ignore[attr-defined]
    return ControlledShutdownResponse(error_code=code, remaining_partitions=[
        ControlledShutdownResponse.RemainingPartition(topic_name=tp.topic, partition_index=tp.partition)
        for tp in remaining])


@api(ApiKey.ALTER_PARTITION, 0, 1)
async def alter_partition(ctx: RequestContext, request: AlterPartitionRequest, *,
                          controller: object, authorizer: Any) -> AlterPartitionResponse:
    R = AlterPartitionResponse
    if _cluster_action_denied(authorizer, ctx):
        return AlterPartitionResponse(throttle_time_ms=0, error_code=DENIED, topics=[])
    if controller is None or not getattr(controller, "active", False):
        return AlterPartitionResponse(throttle_time_ms=0, error_code=ErrorCode.NOT_CONTROLLER, topics=[])
    items = [(TopicPartition(t.topic_name, p.partition_index), p.leader_epoch, list(p.new_isr), p.partition_epoch)
             for t in request.topics for p in t.partitions]
    results = await controller.call("alter_partition", (request.broker_id, items))  # type: ignore[attr-defined]
    by_topic: dict[str, list[AlterPartitionResponse.PartitionData]] = {}
    for tp, (code, st) in results.items():
        by_topic.setdefault(tp.topic, []).append(R.PartitionData(
            partition_index=tp.partition, error_code=code, leader_id=st.leader if st else -1,
            leader_epoch=st.leader_epoch if st else -1, isr=list(st.isr) if st else [],
            partition_epoch=st.zk_version if st else -1))
    return AlterPartitionResponse(throttle_time_ms=0, error_code=ErrorCode.NONE, topics=[
        R.TopicData(topic_name=t, partitions=ps) for t, ps in by_topic.items()])


@api(ApiKey.ELECT_LEADERS, 0)
async def elect_leaders(ctx: RequestContext, request: ElectLeadersRequest, *, controller: object,
                        metadata: MetadataCache, authorizer: Any) -> ElectLeadersResponse:
    R = ElectLeadersResponse
    wanted = None if request.topic_partitions is None else [
        TopicPartition(t.topic, p) for t in request.topic_partitions for p in t.partitions]
    election_type = request.election_type if ctx.api_version >= 1 else 0
    top = ErrorCode.NONE
    if authorizer is not None and not allowed_cluster(authorizer, ctx, Op.ALTER):
        top = DENIED
        results: dict[TopicPartition, tuple[int, str | None]] = {tp: (DENIED, None) for tp in wanted or ()}
    elif controller is None:
        # A standalone broker: each partition's one replica already leads.
        tps = wanted if wanted is not None else [TopicPartition(t.name, p) for t in metadata.topics()
                                                 for p in range(t.num_partitions)]
        results = {tp: (ErrorCode.ELECTION_NOT_NEEDED, "Leader election not needed for topic partition.")
                   if metadata.partition_state(tp) is not None else
                   (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist.") for tp in tps}
    elif not getattr(controller, "active", False):
        return ElectLeadersResponse(throttle_time_ms=0, error_code=ErrorCode.NOT_CONTROLLER,
                                    replica_election_results=[])
    else:
        raw = await controller.call("elect_leaders", (election_type, wanted))  # type: ignore[attr-defined]
        results = {tp: (r.error_code, r.message) for tp, r in raw.items()}
    by_topic: dict[str, list[ElectLeadersResponse.PartitionResult]] = {}
    for tp, (code, msg) in sorted(results.items()):
        by_topic.setdefault(tp.topic, []).append(R.PartitionResult(partition_id=tp.partition, error_code=code,
                                                                   error_message=msg))
    return ElectLeadersResponse(throttle_time_ms=0, error_code=top, replica_election_results=[
        R.ReplicaElectionResult(topic=t, partition_result=ps) for t, ps in by_topic.items()])


@api(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0)
async def alter_partition_reassignments(ctx: RequestContext, request: AlterPartitionReassignmentsRequest, *,
                                        controller: object, authorizer: Any) -> AlterPartitionReassignmentsResponse:
    R = AlterPartitionReassignmentsResponse
    if authorizer is not None and not allowed_cluster(authorizer, ctx, Op.ALTER):
        return R(throttle_time_ms=0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                 error_message="Cluster authorization failed.", responses=[])
    if controller is None or not getattr(controller, "active", False):
        message = "This broker is not the controller." if controller is not None else \
            "A standalone broker has one replica per partition: there is nothing to reassign."
        code = ErrorCode.NOT_CONTROLLER if controller is not None else ErrorCode.INVALID_REQUEST
        return R(throttle_time_ms=0, error_code=code, error_message=message, responses=[])
    wanted = {TopicPartition(t.name, p.partition_index): (list(p.replicas) if p.replicas is not None else None)
              for t in request.topics for p in t.partitions}
    results = await controller.call("alter_reassignments", wanted)  # type: ignore[attr-defined]
    by_topic: dict[str, list[AlterPartitionReassignmentsResponse.ReassignablePartitionResponse]] = {}
    for tp, (code, msg) in results.items():
        by_topic.setdefault(tp.topic, []).append(R.ReassignablePartitionResponse(
            partition_index=tp.partition, error_code=code, error_message=msg))
    return R(throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None, responses=[
        R.ReassignableTopicResponse(name=t, partitions=ps) for t, ps in by_topic.items()])


@api(ApiKey.LIST_PARTITION_REASSIGNMENTS, 0)
async def list_partition_reassignments(ctx: RequestContext, request: ListPartitionReassignmentsRequest, *,
                                       controller: object, authorizer: Any) -> ListPartitionReassignmentsResponse:
    R = ListPartitionReassignmentsResponse
    if authorizer is not None and not allowed_cluster(authorizer, ctx, Op.DESCRIBE):
        return R(throttle_time_ms=0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                 error_message="Cluster authorization failed.", topics=[])
    if controller is None:
        return R(throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None, topics=[])
    if not getattr(controller, "active", False):
        return R(throttle_time_ms=0, error_code=ErrorCode.NOT_CONTROLLER, error_message=None, topics=[])
    wanted = None if request.topics is None else [TopicPartition(t.name, p) for t in request.topics
                                                  for p in t.partition_indexes]
    ongoing = await controller.call("list_reassignments", wanted)  # type: ignore[attr-defined]
    by_topic: dict[str, list[ListPartitionReassignmentsResponse.OngoingPartitionReassignment]] = {}
    for tp, (replicas, adding, removing) in sorted(ongoing.items()):
        by_topic.setdefault(tp.topic, []).append(R.OngoingPartitionReassignment(
            partition_index=tp.partition, replicas=replicas, adding_replicas=adding, removing_replicas=removing))
    return R(throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None, topics=[
        R.OngoingTopicReassignment(name=t, partitions=ps) for t, ps in by_topic.items()])
