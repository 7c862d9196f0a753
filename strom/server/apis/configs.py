"""DescribeConfigs (32), AlterConfigs (33) and IncrementalAlterConfigs (44) for topics and the broker.

Topic overrides live in the topic registry; a change re-applies the topic's ``LogConfig`` to its open logs.
Broker configs are server.properties with the dynamic broker configs over it (``DynamicBrokerConfig``): a
BROKER resource named by this broker's id is its per-broker level, the one named ``""`` the cluster-wide
default; keys that cannot change at runtime are refused as Kafka refuses them (INVALID_REQUEST). A
BROKER_LOGGER resource (this broker's id) lists and sets log levels (``strom.server.broker_loggers``). With an
authorizer, a topic needs DESCRIBE_CONFIGS / ALTER_CONFIGS on it (TOPIC_AUTHORIZATION_FAILED), the broker and its
loggers the same on the cluster (CLUSTER_AUTHORIZATION_FAILED), checked before anything else about the resource.
A CLIENT_METRICS resource is a client-metrics subscription (KIP-714, :mod:`strom.server.client_metrics_manager`):
cluster-wide, stored in the data dir or ZooKeeper, the same cluster permissions.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from strom.common.error_codes import ErrorCode
from strom.common.errors import BrokerResponseError, ConfigError
from strom.protocol.api_keys import ApiKey
from strom.protocol.messages.alter_configs import AlterConfigsRequest, AlterConfigsResponse
from strom.protocol.messages.describe_configs import DescribeConfigsRequest, DescribeConfigsResponse
from strom.protocol.messages.incremental_alter_configs import (
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from strom.server import broker_loggers
from strom.server.apis import api
from strom.server.dynamic_broker_config import (
    DEFAULT_ENTITY,
    DYNAMIC_DEFAULT_BROKER_CONFIG,
    DynamicBrokerConfig,
    is_dynamic,
    is_sensitive,
    listener_ssl_config,
    synonyms_of,
)
from strom.server.security.request_auth import CLUSTER, Op, Res, allowed
from strom.storage.log_config import (
    BROKER_SYNONYMS,
    LOG_CONFIG_KEYS,
    SOURCE_BROKER,
    SOURCE_TOPIC,
    TOPIC_KEY_OF,
    LogConfig,
)

if TYPE_CHECKING:
    from strom.server.admin_manager import AdminManager
    from strom.server.client_metrics_manager import ClientMetricsManager
    from strom.server.metadata_cache import MetadataCache
    from strom.server.request_context import RequestContext

log = logging.getLogger("strom.server")

# ConfigResource types and DescribeConfigs enums (Kafka's ConfigResource.Type, ConfigSource, ConfigType).
TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS = 2, 4, 8, 16
UNKNOWN_TOPIC_OR_PARTITION = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
INVALID_CONFIG = ErrorCode.INVALID_CONFIG
INVALID_REQUEST = ErrorCode.INVALID_REQUEST
DYNAMIC_TOPIC_CONFIG, DYNAMIC_BROKER_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 1, 2, 4, 5
DYNAMIC_BROKER_LOGGER_CONFIG = 6
DYNAMIC_CLIENT_METRICS_CONFIG = 7
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
_CONFIG_TYPES = {"boolean": 1, "string": 2, "int": 3, "short": 4, "long": 5, "double": 6, "list": 7, "class": 8,
                 "password": 9}


# Broker keys whose Kafka type the value cannot tell (a LONG whose value fits an INT, a DOUBLE).
_BROKER_TYPES = {"log.cleaner.backoff.ms": "long", "log.cleaner.dedupe.buffer.size": "long",
                 "log.cleaner.io.max.bytes.per.second": "double", "log.cleaner.io.buffer.load.factor": "double",
                 "leader.replication.throttled.rate": "long", "follower.replication.throttled.rate": "long",
                 "replica.alter.log.dirs.io.max.bytes.per.second": "long",
                 "log.roll.hours": "int", "log.roll.jitter.hours": "int", "log.retention.hours": "int",
                 "log.retention.minutes": "int"}


def _config_type(name: str, value: str | None) -> int:
    """Kafka's ConfigType of a topic or broker key (a broker key of a topic config has the topic key's type)."""
    kind = _BROKER_TYPES.get(name)
    if kind is not None:
        return _CONFIG_TYPES[kind]
    key = LOG_CONFIG_KEYS.get(name) or LOG_CONFIG_KEYS.get(TOPIC_KEY_OF.get(name, ""))
    if key is not None:
        return _CONFIG_TYPES.get(key.type, 0)
    if value in ("true", "false"):
        return _CONFIG_TYPES["boolean"]
    try:
        n = int(value or "")
        return _CONFIG_TYPES["int"] if -(2**31) <= n < 2**31 else _CONFIG_TYPES["long"]
    except ValueError:
        return _CONFIG_TYPES["string"]


def _documentation(name: str) -> str | None:
    key = LOG_CONFIG_KEYS.get(name)
    if key is not None:
        return key.doc
    topic_key = next((t for t, brokers in BROKER_SYNONYMS.items() if name in brokers), None)
    return LOG_CONFIG_KEYS[topic_key].doc if topic_key in LOG_CONFIG_KEYS else None


def _topic_rows(dynamic_config: DynamicBrokerConfig, overrides: dict[str, str]) -> list[tuple[str, str | None, int]]:
    cfg = LogConfig.from_props(overrides, dynamic_config.log_config)
    rows = []
    for name, value, _d in cfg.describe():
        source = cfg.source(name)
        if source == SOURCE_BROKER:  # which level of broker config it came from (a dynamic one, or the file)
            levels = dynamic_config.levels(BROKER_SYNONYMS[name][0])
            code = levels[0][2] if levels else STATIC_BROKER_CONFIG
        else:
            code = DYNAMIC_TOPIC_CONFIG if source == SOURCE_TOPIC else DEFAULT_CONFIG
        rows.append((name, value, code))
    return rows


def _topic_synonyms(dynamic_config: DynamicBrokerConfig, name: str, value: str | None, source: int,
                    ) -> list[DescribeConfigsResponse.DescribeConfigsSynonym]:
    """Where a topic config's value could come from, highest precedence first (Kafka's synonyms list)."""
    S = DescribeConfigsResponse.DescribeConfigsSynonym
    out = []
    if source == DYNAMIC_TOPIC_CONFIG:
        out.append(S(name=name, value=value, source=DYNAMIC_TOPIC_CONFIG))
    broker_keys = BROKER_SYNONYMS.get(name, ())
    if broker_keys:
        out.extend(S(name=n, value=v, source=src) for n, v, src in dynamic_config.levels(broker_keys[0]))
    # Kafka names the default after the broker key it would come from (DEFAULT_CONFIG:log.retention.hours=168).
    out.append(S(name=broker_keys[0] if broker_keys else name, value=LogConfig().value_str(name),
                 source=DEFAULT_CONFIG))
    return out


def _broker_rows(dynamic_config: DynamicBrokerConfig, name: str) -> list[tuple[str, str | None, int]]:
    """This broker's configs (its id) or the dynamic cluster defaults (``""``: only those, as Kafka does)."""
    if name == DEFAULT_ENTITY:
        return [(n, v, DYNAMIC_DEFAULT_BROKER_CONFIG) for n, v in sorted(dynamic_config.default_configs.items())]
    return dynamic_config.describe()


def _broker_synonyms(dynamic_config: DynamicBrokerConfig, name: str, per_broker: bool,
                     ) -> list[DescribeConfigsResponse.DescribeConfigsSynonym]:
    S = DescribeConfigsResponse.DescribeConfigsSynonym
    out = [S(name=n, value=None if is_sensitive(n) else v, source=src) for n, v, src in dynamic_config.levels(name)
           if per_broker or src != DYNAMIC_BROKER_CONFIG]
    # Kafka's default of the first synonym that has one (log.retention.ms: DEFAULT_CONFIG:log.retention.hours=168)
    default = next(((n, d) for n in synonyms_of(name) if (d := dynamic_config.default_value(n)) is not None), None)
    if default is not None:
        out.append(S(name=default[0], value=default[1], source=DEFAULT_CONFIG))
    return out


def _refusal(authorizer: Any, ctx: RequestContext, op: Op, resource_type: int, name: str,
             ) -> tuple[int, str] | None:
    """The error for a resource the principal may not ``op`` (None when allowed or not a checked type)."""
    if authorizer is None:
        return None
    if resource_type == TOPIC:
        if not allowed(authorizer, ctx, op, (Res.TOPIC, name)):
            return ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Topic authorization failed."
    elif resource_type in (BROKER, BROKER_LOGGER, CLIENT_METRICS):
        if not allowed(authorizer, ctx, op, CLUSTER):
            return ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed."
    return None


@api(ApiKey.DESCRIBE_CONFIGS, 1)
async def describe(ctx: RequestContext, request: DescribeConfigsRequest, *, metadata: MetadataCache,
                   node_id: int, dynamic_config: DynamicBrokerConfig, authorizer: Any,
                   client_metrics: ClientMetricsManager | None) -> DescribeConfigsResponse:
    md = metadata
    R = DescribeConfigsResponse.DescribeConfigsResult
    C = DescribeConfigsResponse.DescribeConfigsResourceResult
    results = []
    for res in request.resources:
        keys = set(res.configuration_keys) if res.configuration_keys is not None else None
        refusal = _refusal(authorizer, ctx, Op.DESCRIBE_CONFIGS, res.resource_type, res.resource_name)
        if refusal is not None:
            results.append(R(error_code=refusal[0], error_message=refusal[1], resource_type=res.resource_type,
                             resource_name=res.resource_name, configs=[]))
            continue
        if res.resource_type == TOPIC:
            info = md.topic(res.resource_name)
            if info is None:
                results.append(R(error_code=UNKNOWN_TOPIC_OR_PARTITION, error_message=f"Topic {res.resource_name} "
                                 "does not exist.", resource_type=TOPIC, resource_name=res.resource_name, configs=[]))
                continue
            rows = _topic_rows(dynamic_config, info.configs)
        elif res.resource_type == CLIENT_METRICS and client_metrics is not None:
            sub = client_metrics.subscription_configs(res.resource_name)
            results.append(R(error_code=ErrorCode.NONE, error_message=None, resource_type=CLIENT_METRICS,
                             resource_name=res.resource_name, configs=[
                                 C(name=n, value=v, read_only=False, is_default=False,
                                   config_source=DYNAMIC_CLIENT_METRICS_CONFIG, is_sensitive=False, synonyms=[],
                                   config_type=_CONFIG_TYPES["int" if n == "interval.ms" else "list"],
                                   documentation=None)
                                 for n, v in sorted(sub.items()) if keys is None or n in keys]))
            continue
        elif res.resource_type in (BROKER, BROKER_LOGGER):
            refused = _broker_id_error(res.resource_name, node_id, empty_allowed=res.resource_type == BROKER)
            if refused is not None:
                results.append(R(error_code=refused[0], error_message=refused[1], resource_type=res.resource_type,
                                 resource_name=res.resource_name, configs=[]))
                continue
            if res.resource_type == BROKER:
                rows = _broker_rows(dynamic_config, res.resource_name)
            else:
                rows = [(n, level, DYNAMIC_BROKER_LOGGER_CONFIG) for n, level in broker_loggers.describe_loggers()]
        else:
            results.append(R(error_code=INVALID_REQUEST, error_message=f"Unsupported resource type "
                             f"{res.resource_type}", resource_type=res.resource_type, resource_name=res.resource_name,
                             configs=[]))
            continue
        synonyms = request.include_synonyms and ctx.api_version >= 1 and res.resource_type != BROKER_LOGGER
        topic = res.resource_type == TOPIC
        per_broker = res.resource_name != DEFAULT_ENTITY
        configs = [
            C(name=n, value=None if is_sensitive(n) else v, read_only=not topic and not is_dynamic(n),
              is_default=src == DEFAULT_CONFIG, config_source=src, is_sensitive=is_sensitive(n),
              synonyms=([] if not synonyms else _topic_synonyms(dynamic_config, n, v, src) if topic
                        else _broker_synonyms(dynamic_config, n, per_broker)),
              config_type=_config_type(n, v),
              documentation=_documentation(n) if request.include_documentation else None)
            for n, v, src in rows if keys is None or n in keys
        ]
        results.append(R(error_code=ErrorCode.NONE, error_message=None, resource_type=res.resource_type,
                         resource_name=res.resource_name, configs=configs))
    return DescribeConfigsResponse(throttle_time_ms=0, results=results)


async def _store(store: Any, name: str, new: dict[str, str], what: str) -> tuple[int, str] | None:
    """``store.write(name, new)`` off the event loop (ZooKeeper round trips, or a file's fsync); the error to answer
    when it fails (None: written, or no store)."""
    if store is None:
        return None
    try:
        await asyncio.get_running_loop().run_in_executor(None, store.write, name, new)
    except Exception as e:
        log.error("cannot store %s of %s: %s", what, name or "<default>", e)
        return ErrorCode.UNKNOWN_SERVER_ERROR, f"Cannot store {what}: {e}"
    return None


async def _apply_broker(dynamic_config: DynamicBrokerConfig, name: str, new: dict[str, str], validate_only: bool,
                        ) -> tuple[int, str | None]:
    """Validate and store ``new`` (the complete dynamic config of this broker, or of the cluster default), then
    apply it here (other brokers apply it when they see the change notification)."""
    try:
        dynamic_config.validate(name, new)
    except ConfigError as e:
        return INVALID_REQUEST, f"Invalid config value for resource ConfigResource(type=BROKER, name='{name}'): {e}"
    if validate_only:
        return ErrorCode.NONE, None
    refused = await _store(dynamic_config.store, name, new, "the dynamic broker config")
    if refused is not None:
        return refused
    # Kafka reloads a listener's keystore and truststore on any per-broker alter that names them, changed or not,
    # so a certificate rewritten in place is picked up
    dynamic_config.update(name, new, reload=[k for k in new if listener_ssl_config(k) is not None])
    return ErrorCode.NONE, None


def _broker_id_error(name: str, node_id: int, empty_allowed: bool = True) -> tuple[int, str] | None:
    """A per-broker resource must name this broker (the admin client sends it to that broker)."""
    if name == DEFAULT_ENTITY:
        return None if empty_allowed else (INVALID_REQUEST, "Broker id must not be empty")
    try:
        int(name)
    except ValueError:
        return INVALID_REQUEST, f"Broker id must be an integer, but it is: {name}"
    if name != str(node_id):
        return INVALID_REQUEST, f"Unexpected broker id, expected {node_id}, but received {name}"
    return None


async def _apply_client_metrics(client_metrics: ClientMetricsManager, name: str, new: dict[str, str],
                                validate_only: bool) -> tuple[int, str | None]:
    """Validate and store subscription ``name`` (no configs: removed), then apply it here (other brokers apply it
    when they see the change notification)."""
    from strom.server.client_metrics_manager import ClientMetricsConfigError, validate_client_metrics_configs

    try:
        validate_client_metrics_configs(name, new or {"metrics": ""})
    except ClientMetricsConfigError as e:
        return e.error_code, str(e)
    if validate_only:
        return ErrorCode.NONE, None
    refused = await _store(client_metrics.store, name, new, "the client metrics subscription")
    if refused is not None:
        return refused
    client_metrics.update_subscription(name, new)
    return ErrorCode.NONE, None


async def _apply(metadata: MetadataCache, admin: AdminManager, dynamic_config: DynamicBrokerConfig,
                 resource_type: int, name: str, new: dict[str, str], validate_only: bool,
                 client_metrics: ClientMetricsManager | None = None) -> tuple[int, str | None]:
    """Validate and store ``new`` (the resource's complete override set)."""
    md = metadata
    if resource_type == CLIENT_METRICS and client_metrics is not None:
        return await _apply_client_metrics(client_metrics, name, new, validate_only)
    if resource_type == BROKER:
        return _broker_id_error(name, dynamic_config.node_id) or await _apply_broker(
            dynamic_config, name, new, validate_only)
    if resource_type == BROKER_LOGGER:
        return INVALID_REQUEST, "AlterConfigs does not support the BROKER_LOGGER resource type: use " \
            "IncrementalAlterConfigs"
    if resource_type != TOPIC:
        return INVALID_REQUEST, f"Unsupported resource type {resource_type}"
    info = md.topic(name)
    if info is None:
        return UNKNOWN_TOPIC_OR_PARTITION, f"Topic {name} does not exist."
    try:
        admin.validate_configs(new)
        if not validate_only:
            await admin.set_topic_configs(name, new)
    except BrokerResponseError as e:
        return e.errno, e.message
    return ErrorCode.NONE, None


def _alter_loggers(name: str, node_id: int, configs: Any, validate_only: bool) -> tuple[int, str | None]:
    """Log levels (Kafka's ``ConfigAdminManager.validateLogLevelConfigs``, then ``Log4jController``): every change
    is checked before any is made."""
    refused = _broker_id_error(name, node_id, empty_allowed=False)
    if refused is not None:
        return refused
    for c in configs:
        if c.config_operation in (APPEND, SUBTRACT):
            op = "APPEND" if c.config_operation == APPEND else "SUBTRACT"
            return INVALID_REQUEST, f"{op} operation is not allowed for the BROKER_LOGGER resource"
        if c.config_operation not in (SET, DELETE):
            return INVALID_REQUEST, f"Unknown config operation {c.config_operation}"
        if c.config_operation == DELETE and c.name == broker_loggers.ROOT_LOGGER:
            return INVALID_REQUEST, f"Removing the log level of the {broker_loggers.ROOT_LOGGER} logger is not allowed"
        try:
            if c.config_operation == SET:
                broker_loggers.check_level(c.name, c.value)
            else:
                broker_loggers.check_level(c.name, "INFO")  # the logger must exist
        except broker_loggers.BrokerLoggerError as e:
            return INVALID_CONFIG, str(e)
    if not validate_only:
        for c in configs:
            if c.config_operation == SET:
                broker_loggers.set_log_level(c.name, c.value)
            else:
                broker_loggers.unset_log_level(c.name)
            log.info("log level of %s %s", c.name, f"set to {c.value}" if c.config_operation == SET else "unset")
    return ErrorCode.NONE, None


@api(ApiKey.ALTER_CONFIGS, 0)
async def alter(ctx: RequestContext, request: AlterConfigsRequest, *, metadata: MetadataCache,
                admin: AdminManager, dynamic_config: DynamicBrokerConfig, authorizer: Any,
                client_metrics: ClientMetricsManager | None) -> AlterConfigsResponse:
    out = []
    for res in request.resources:
        new = {}
        err: tuple[int, str | None] | None = _refusal(authorizer, ctx, Op.ALTER_CONFIGS, res.resource_type,
                                                      res.resource_name)
        for c in res.configs if err is None else ():
            if c.value is None:
                err = (INVALID_REQUEST, f"Null value not supported for : {c.name}")
                break
            new[c.name] = c.value
        code, msg = err or await _apply(metadata, admin, dynamic_config, res.resource_type, res.resource_name, new,
                                        request.validate_only, client_metrics)
        out.append(AlterConfigsResponse.AlterConfigsResourceResponse(
            error_code=code, error_message=msg, resource_type=res.resource_type, resource_name=res.resource_name))
    return AlterConfigsResponse(throttle_time_ms=0, responses=out)


@api(ApiKey.INCREMENTAL_ALTER_CONFIGS, 0)
async def incremental_alter(ctx: RequestContext, request: IncrementalAlterConfigsRequest, *, metadata: MetadataCache,
                            admin: AdminManager, dynamic_config: DynamicBrokerConfig, authorizer: Any,
                            client_metrics: ClientMetricsManager | None) -> IncrementalAlterConfigsResponse:
    md = metadata
    out = []
    for res in request.resources:
        if res.resource_type == BROKER_LOGGER:
            code, msg = _refusal(authorizer, ctx, Op.ALTER_CONFIGS, BROKER_LOGGER, res.resource_name) or \
                _alter_loggers(res.resource_name, dynamic_config.node_id, res.configs, request.validate_only)
            out.append(IncrementalAlterConfigsResponse.AlterConfigsResourceResponse(
                error_code=code, error_message=msg, resource_type=BROKER_LOGGER, resource_name=res.resource_name))
            continue
        if res.resource_type == BROKER:
            new = dynamic_config.entity_configs(res.resource_name)
        elif res.resource_type == CLIENT_METRICS and client_metrics is not None:
            new = client_metrics.subscription_configs(res.resource_name)
        else:
            info = md.topic(res.resource_name) if res.resource_type == TOPIC else None
            new = dict(info.configs) if info else {}
        err: tuple[int, str | None] | None = _refusal(authorizer, ctx, Op.ALTER_CONFIGS, res.resource_type,
                                                      res.resource_name)
        for c in res.configs if err is None else ():
            if c.config_operation == SET:
                if c.value is None:
                    err = (INVALID_REQUEST, f"Null value not supported for : {c.name}")
                    break
                new[c.name] = c.value
            elif c.config_operation == DELETE:
                new.pop(c.name, None)
            elif c.config_operation in (APPEND, SUBTRACT):
                cur = [v for v in new.get(c.name, "").split(",") if v]
                vals = [v for v in (c.value or "").split(",") if v]
                cur = cur + [v for v in vals if v not in cur] if c.config_operation == APPEND else \
                    [v for v in cur if v not in vals]
                new[c.name] = ",".join(cur)
            else:
                err = (INVALID_REQUEST, f"Unknown config operation {c.config_operation}")
                break
        code, msg = err or await _apply(metadata, admin, dynamic_config, res.resource_type, res.resource_name, new,
                                        request.validate_only, client_metrics)
        out.append(IncrementalAlterConfigsResponse.AlterConfigsResourceResponse(
            error_code=code, error_message=msg, resource_type=res.resource_type, resource_name=res.resource_name))
    return IncrementalAlterConfigsResponse(throttle_time_ms=0, responses=out)
