"""CreatePartitions (key 37): grow a topic's partition count (never shrink it)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.common.error_codes import ErrorCode
from strom.common.errors import BrokerResponseError, for_code
from strom.protocol.api_keys import ApiKey
from strom.protocol.messages.create_partitions import CreatePartitionsRequest, CreatePartitionsResponse
from strom.server.admin_manager import MAX_PARTITIONS
from strom.server.apis import api
from strom.server.security.request_auth import Op, Res, allowed

if TYPE_CHECKING:
    from strom.server.admin_manager import AdminManager
    from strom.server.metadata_cache import MetadataCache, TopicInfo
    from strom.server.request_context import RequestContext


def _plan(t: CreatePartitionsRequest.CreatePartitionsTopic, info: TopicInfo | None, admin: AdminManager,
          ) -> list[list[int]]:
    if info is None:
        raise for_code(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{t.name}' does not exist.")
    n = info.num_partitions
    if t.count == n:
        raise for_code(ErrorCode.INVALID_PARTITIONS, f"Topic already has {n} partitions.")
    if t.count < n:
        raise for_code(ErrorCode.INVALID_PARTITIONS,
                       f"Topic currently has {n} partitions, which is higher than the requested {t.count}.")
    if t.count > MAX_PARTITIONS:
        raise for_code(ErrorCode.INVALID_PARTITIONS, f"Number of partitions {t.count} is over strom's limit "
                                                     f"{MAX_PARTITIONS}.")
    if t.assignments is None:
        return admin.plan_assignment(t.count - n, info.replication_factor, start_partition=n)
    new = [list(a.broker_ids) for a in t.assignments]
    if len(new) != t.count - n:
        raise for_code(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                       f"Increasing the number of partitions by {t.count - n} but {len(new)} assignments provided.")
    admin.check_assignment(new)
    if new and len(new[0]) != info.replication_factor:
        raise for_code(ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"Inconsistent replication factor between partitions, "
                                                             f"partition 0 has {info.replication_factor}.")
    return new


@api(ApiKey.CREATE_PARTITIONS, 0)
async def handle(ctx: RequestContext, request: CreatePartitionsRequest, *, metadata: MetadataCache,
                 admin: AdminManager, authorizer: Any, quotas: Any) -> CreatePartitionsResponse:
    R = CreatePartitionsResponse.CreatePartitionsTopicResult
    # KIP-599: v3+ can be told THROTTLING_QUOTA_EXCEEDED per topic; older versions are only throttled afterwards
    quota = quotas.controller_mutation_quota(ctx, strict=ctx.api_version >= 3) if quotas is not None else None
    results = []
    names = [t.name for t in request.topics]
    for t in request.topics:
        try:
            if names.count(t.name) > 1:
                raise for_code(ErrorCode.INVALID_REQUEST, "Duplicate topic in request.")
            if authorizer is not None and not allowed(authorizer, ctx, Op.ALTER, (Res.TOPIC, t.name)):
                raise for_code(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "The topic authorization is failed.")
            info = metadata.topic(t.name)
            new = _plan(t, info, admin)
            admin.check_capacity(len(new))
            if not request.validate_only:
                assert info is not None
                if quota is not None:
                    quota.record(len(new))
                await admin.create_partitions(info, new, request.timeout_ms)
        except BrokerResponseError as e:
            results.append(R(name=t.name, error_code=e.errno, error_message=e.message))
            continue
        results.append(R(name=t.name, error_code=ErrorCode.NONE, error_message=None))
    return CreatePartitionsResponse(throttle_time_ms=quota.throttle_time_ms if quota is not None else 0,
                                    results=results)
