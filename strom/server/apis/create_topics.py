"""CreateTopics (key 19): validate names, partition counts, replication factors, assignments and configs, then
create through the admin manager (Kafka's ``ZkAdminManager.createTopics``)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from strom.common.error_codes import ErrorCode
from strom.common.errors import BrokerResponseError, for_code
from strom.protocol.api_keys import ApiKey
from strom.protocol.messages.create_topics import CreateTopicsRequest, CreateTopicsResponse
from strom.server.admin_manager import MAX_PARTITIONS
from strom.server.apis import api
from strom.server.metadata_cache import validate_topic_name
from strom.server.security.request_auth import Op, allowed_cluster, allowed_topics
from strom.storage.log_config import LogConfig

if TYPE_CHECKING:
    from strom.server.admin_manager import AdminManager
    from strom.server.broker_config import BrokerConfig
    from strom.server.dynamic_broker_config import DynamicBrokerConfig
    from strom.server.metadata_cache import MetadataCache
    from strom.server.request_context import RequestContext

log = logging.getLogger("strom.server")

Result = CreateTopicsResponse.CreatableTopicResult


def _plan(t: CreateTopicsRequest.CreatableTopic, admin: AdminManager, config: BrokerConfig,
          ) -> tuple[list[list[int]], dict[str, str]]:
    """The replica lists and configs of one topic to create; raises BrokerResponseError with Kafka's code."""
    if t.assignments:
        if t.num_partitions != -1 or t.replication_factor != -1:
            raise for_code(ErrorCode.INVALID_REQUEST, "Both numPartitions or replicationFactor and replicasAssignments "
                                                      "were set. Both cannot be used at the same time.")
        by_index = {a.partition_index: list(a.broker_ids) for a in t.assignments}
        if sorted(by_index) != list(range(len(by_index))):
            raise for_code(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                           "Partitions should be a consecutive 0-based integer sequence.")
        assignment = [by_index[i] for i in range(len(by_index))]
        admin.check_assignment(assignment)
    else:
        n = t.num_partitions if t.num_partitions != -1 else int(config["num.partitions"])
        if n <= 0:
            raise for_code(ErrorCode.INVALID_PARTITIONS, "Number of partitions was set to an invalid non-positive value.")
        if n > MAX_PARTITIONS:
            raise for_code(ErrorCode.INVALID_PARTITIONS, f"Number of partitions {n} is over strom's limit {MAX_PARTITIONS}.")
        rf = t.replication_factor if t.replication_factor != -1 else int(config["default.replication.factor"])
        if rf <= 0:
            raise for_code(ErrorCode.INVALID_REPLICATION_FACTOR,
                           "Replication factor must be larger than 0, or -1 to use the default value.")
        assignment = admin.plan_assignment(n, rf)
    configs: dict[str, str] = {}
    for c in t.configs:
        if c.value is None:
            raise for_code(ErrorCode.INVALID_CONFIG, f"Null value not supported for topic configs: {c.name}")
        configs[c.name] = c.value
    admin.validate_configs(configs)
    return assignment, configs


@api(ApiKey.CREATE_TOPICS, 2)
async def handle(ctx: RequestContext, request: CreateTopicsRequest, *, metadata: MetadataCache,
                 admin: AdminManager, config: BrokerConfig, dynamic_config: DynamicBrokerConfig,
                 authorizer: Any, quotas: Any) -> CreateTopicsResponse:
    names = [t.name for t in request.topics]
    # KIP-599: v6+ can be told THROTTLING_QUOTA_EXCEEDED per topic; older versions are only throttled afterwards
    quota = quotas.controller_mutation_quota(ctx, strict=ctx.api_version >= 6) if quotas is not None else None
    results: list[Result] = []
    creatable = describable = None  # with an authorizer: CREATE on the cluster or the topic; DESCRIBE_CONFIGS
    if authorizer is not None:
        creatable = set(names) if allowed_cluster(authorizer, ctx, Op.CREATE) else \
            allowed_topics(authorizer, ctx, Op.CREATE, names)
        describable = allowed_topics(authorizer, ctx, Op.DESCRIBE_CONFIGS, names)
    for t in request.topics:
        name = t.name
        try:
            if names.count(name) > 1:
                raise for_code(ErrorCode.INVALID_REQUEST, f"Create topics request from client `{ctx.client_id}` "
                                                          f"contains multiple entries for the following topics: {name}")
            if creatable is not None and name not in creatable:
                raise for_code(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed.")
            err = validate_topic_name(name)
            if err is not None:
                raise for_code(ErrorCode.INVALID_TOPIC_EXCEPTION, err)
            if name in metadata:
                raise for_code(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
            assignment, configs = _plan(t, admin, config)
            admin.check_capacity(len(assignment))
            topic_id = None
            if not request.validate_only:
                if quota is not None:
                    quota.record(len(assignment))
                info = await admin.create_topic(name, assignment, configs, request.timeout_ms)
                topic_id = info.topic_id
                log.info("created topic %s with %d partition(s), replication factor %d", name, len(assignment),
                         len(assignment[0]))
        except BrokerResponseError as e:
            results.append(Result(name=name, error_code=e.errno, error_message=e.message, topic_config_error_code=ErrorCode.NONE))
            continue
        cfg = LogConfig.from_props(configs, dynamic_config.log_config)
        result = Result(name=name, error_code=ErrorCode.NONE, error_message=None, num_partitions=len(assignment),
                        replication_factor=len(assignment[0]), configs=describe_topic_configs(cfg, configs))
        if describable is not None and name not in describable:  # created, but its configs stay hidden
            result.configs = []
            result.topic_config_error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        if topic_id is not None:
            result.topic_id = topic_id
        results.append(result)
    return CreateTopicsResponse(throttle_time_ms=quota.throttle_time_ms if quota is not None else 0, topics=results)


def describe_topic_configs(cfg: LogConfig, overrides: dict[str, str]) -> list[CreateTopicsResponse.CreatableTopicConfigs]:
    out = []
    for name, value, is_default in cfg.describe():
        source = 1 if name in overrides else (5 if is_default else 4)
        out.append(CreateTopicsResponse.CreatableTopicConfigs(
            name=name, value=value, read_only=False, config_source=source, is_sensitive=False))
    return out
