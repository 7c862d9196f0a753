"""AlterReplicaLogDirs (34): move replicas between this broker's log dirs (KIP-113; see
``strom.server.replica_alter_log_dirs``). Needs ALTER on the cluster, as in Kafka."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.common.error_codes import ErrorCode
from strom.common.structs import TopicPartition
from strom.protocol.api_keys import ApiKey
from strom.protocol.messages.alter_replica_log_dirs import (
    AlterReplicaLogDirsRequest,
    AlterReplicaLogDirsResponse,
)
from strom.server.apis import api
from strom.server.security.request_auth import Op, allowed_cluster

if TYPE_CHECKING:
    from strom.server.replica_manager import ReplicaManager
    from strom.server.request_context import RequestContext

R = AlterReplicaLogDirsResponse


@api(ApiKey.ALTER_REPLICA_LOG_DIRS, 0)
async def handle(ctx: RequestContext, request: AlterReplicaLogDirsRequest, *, replica_manager: ReplicaManager,
                 authorizer: Any) -> AlterReplicaLogDirsResponse:
    refused = not allowed_cluster(authorizer, ctx, Op.ALTER)
    results: dict[str, list[R.AlterReplicaLogDirPartitionResult]] = {}
    for d in request.dirs:
        for t in d.topics:
            for p in t.partitions:
                if refused:
                    code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
                elif replica_manager.metadata.topic(t.name) is None:
                    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                else:
                    code = await replica_manager.alter_log_dirs.alter(TopicPartition(t.name, p), d.path)
                results.setdefault(t.name, []).append(R.AlterReplicaLogDirPartitionResult(partition_index=p,
                                                                                          error_code=code))
    return R(throttle_time_ms=0, results=[R.AlterReplicaLogDirTopicResult(topic_name=t, partitions=ps)
                                          for t, ps in results.items()])
