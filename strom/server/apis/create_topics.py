"""CreateTopics (key 19): validate names, partition counts, replication factor and configs; create the logs."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from strom.common.errors import ConfigError
from strom.protocol.api_keys import ApiKey
from strom.protocol.messages.create_topics import CreateTopicsRequest, CreateTopicsResponse
from strom.server.apis import api
from strom.server.metadata_cache import validate_topic_name
from strom.storage.log_config import LogConfig

if TYPE_CHECKING:
    from strom.server.request_context import RequestContext

log = logging.getLogger("strom.server")

INVALID_TOPIC_EXCEPTION = 17
TOPIC_ALREADY_EXISTS = 36
INVALID_PARTITIONS = 37
INVALID_REPLICATION_FACTOR = 38
INVALID_CONFIG = 40
INVALID_REQUEST = 42
MAX_PARTITIONS = 100_000

Result = CreateTopicsResponse.CreatableTopicResult


def check_replication_factor(rf: int) -> str | None:
    if rf == 0 or rf < -1:
        return "Replication factor must be larger than 0, or -1 to use the default value."
    if rf > 1:
        return (f"Unable to replicate the partition {rf} time(s): The target replication factor of {rf} cannot be "
                "reached because only 1 broker(s) are registered.")
    return None


@api(ApiKey.CREATE_TOPICS, 2)
async def handle(ctx: RequestContext, request: CreateTopicsRequest) -> CreateTopicsResponse:
    broker = ctx.broker
    md, rm = broker.metadata, broker.replica_manager
    assert md is not None and rm is not None
    names = [t.name for t in request.topics]
    results: list[Result] = []
    for t in request.topics:
        name = t.name

        def fail(code: int, msg: str, name: str = name) -> None:
            results.append(Result(name=name, error_code=code, error_message=msg, topic_config_error_code=0))

        if names.count(name) > 1:
            fail(INVALID_REQUEST, f"Create topics request from client `{ctx.client_id}` contains multiple entries "
                                  f"for the following topics: {name}")
            continue
        err = validate_topic_name(name)
        if err is not None:
            fail(INVALID_TOPIC_EXCEPTION, err)
            continue
        if name in md:
            fail(TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
            continue
        if t.assignments:
            if t.num_partitions != -1 or t.replication_factor != -1:
                fail(INVALID_REQUEST, "Both numPartitions or replicationFactor and replicasAssignments were set. "
                                      "Both cannot be used at the same time.")
                continue
            bad = [a for a in t.assignments if list(a.broker_ids) != [broker.node_id]]
            if bad:
                fail(INVALID_REPLICATION_FACTOR, f"Replica assignment for topic {name} names brokers other than "
                                                 f"{broker.node_id}, the only registered broker.")
                continue
            num_partitions = len(t.assignments)
        else:
            num_partitions = t.num_partitions if t.num_partitions != -1 else int(broker.config["num.partitions"])
            if num_partitions <= 0:
                fail(INVALID_PARTITIONS, "Number of partitions was set to an invalid non-positive value.")
                continue
            if num_partitions > MAX_PARTITIONS:
                fail(INVALID_PARTITIONS, f"Number of partitions {num_partitions} is over strom's limit {MAX_PARTITIONS}.")
                continue
            rf_err = check_replication_factor(t.replication_factor)
            if rf_err is not None:
                fail(INVALID_REPLICATION_FACTOR, rf_err)
                continue
        configs: dict[str, str] = {}
        try:
            for c in t.configs:
                if c.value is None:
                    raise ConfigError(f"Null value not supported for topic configs: {c.name}")
                configs[c.name] = c.value
            log_config = LogConfig.from_props(configs, broker.default_log_config)
        except ConfigError as e:
            fail(INVALID_CONFIG, str(e))
            continue
        if request.validate_only:
            info_id = None
        else:
            info = md.create_topic(name, num_partitions, configs)
            rm.ensure_logs(info)
            info_id = info.topic_id
            log.info("created topic %s with %d partition(s)", name, num_partitions)
        result = Result(name=name, error_code=0, error_message=None, num_partitions=num_partitions,
                        replication_factor=1, configs=describe_topic_configs(log_config, configs))
        if info_id is not None:
            result.topic_id = info_id
        results.append(result)
    return CreateTopicsResponse(throttle_time_ms=0, topics=results)


def describe_topic_configs(cfg: LogConfig, overrides: dict[str, str]) -> list[CreateTopicsResponse.CreatableTopicConfigs]:
    out = []
    for name, value, is_default in cfg.describe():
        source = 1 if name in overrides else (5 if is_default else 4)
        out.append(CreateTopicsResponse.CreatableTopicConfigs(
            name=name, value=value, read_only=False, config_source=source, is_sensitive=False))
    return out
