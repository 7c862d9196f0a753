"""Describe and alter configs of topics and brokers.

Kafka counterparts: ``KafkaAdminClient.describeConfigs`` / ``incrementalAlterConfigs`` / ``alterConfigs``.
A broker resource with a broker id is sent to that broker; every other resource (topics, the cluster-wide
broker default ``""``) to the least loaded broker — one request per destination, one future per resource.
A resource's error (unknown topic, INVALID_REQUEST for a static broker config, INVALID_CONFIG) fails its future
with the broker's message.

I/O: calls run on the admin client's I/O thread.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from strom.admin._support import FutureMap
from strom.admin.calls import Call, ConstantNodeProvider, LeastLoadedNodeProvider
from strom.admin.models import (
    AlterConfigOp,
    Config,
    ConfigEntry,
    ConfigResource,
    ConfigResourceType,
    ConfigSource,
    ConfigSynonym,
)
from strom.admin.results import KeyedResult
from strom.common.errors import for_code
from strom.protocol.messages import (
    AlterConfigsRequest,
    DescribeConfigsRequest,
    IncrementalAlterConfigsRequest,
)

if TYPE_CHECKING:
    from strom.admin.runnable import AdminClientRunnable

__all__ = ["describe_configs", "incremental_alter_configs", "alter_configs", "legacy_source"]


def _destination(resource: ConfigResource) -> Any:
    """A broker-specific resource goes to that broker (Kafka: ``ConstantNodeIdProvider``)."""
    if resource.type in (ConfigResourceType.BROKER, ConfigResourceType.BROKER_LOGGER) and resource.name:
        try:
            return int(resource.name)
        except ValueError:
            return None
    return None


def _by_destination(resources: Iterable[ConfigResource]) -> dict[Any, list[ConfigResource]]:
    groups: dict[Any, list[ConfigResource]] = {}
    for r in resources:
        groups.setdefault(_destination(r), []).append(r)
    return groups


def _provider(node_id: Any) -> Any:
    return LeastLoadedNodeProvider() if node_id is None else ConstantNodeProvider(node_id)


def legacy_source(resource_type: int, is_default: bool, read_only: bool) -> ConfigSource:
    """DescribeConfigs v0 has no source: infer it as Kafka's ``DescribeConfigsResponse`` does."""
    if is_default:
        return ConfigSource.DEFAULT_CONFIG
    if resource_type == ConfigResourceType.BROKER:
        return ConfigSource.STATIC_BROKER_CONFIG if read_only else ConfigSource.DYNAMIC_BROKER_CONFIG
    if resource_type == ConfigResourceType.TOPIC:
        return ConfigSource.DYNAMIC_TOPIC_CONFIG
    return ConfigSource.UNKNOWN


def _check_type(futures: FutureMap[ConfigResource]) -> None:
    for r in list(futures.futures):
        if not isinstance(r, ConfigResource):
            futures.fail(r, TypeError(f"Expected a ConfigResource, got {r!r}"))


def describe_configs(rt: AdminClientRunnable, resources: Iterable[ConfigResource], include_synonyms: bool,
                     include_documentation: bool, timeout_ms: int | None) -> KeyedResult[ConfigResource, Config]:
    futures: FutureMap[ConfigResource] = FutureMap(resources)
    _check_type(futures)
    deadline = rt.calc_deadline(timeout_ms)
    D = DescribeConfigsRequest
    for node_id, group in _by_destination(futures.undone()).items():
        def request(_timeout: int, group: list[ConfigResource] = group) -> Any:
            return D(resources=[D.DescribeConfigsResource(resource_type=int(r.type), resource_name=r.name,
                                                          configuration_keys=None) for r in group],
                     include_synonyms=include_synonyms, include_documentation=include_documentation)

        def response(body: Any, version: int, group: list[ConfigResource] = group) -> None:
            seen = []
            for res in body.results:
                key = ConfigResource(ConfigResourceType(res.resource_type), res.resource_name)
                seen.append(key)
                if res.error_code:
                    futures.fail(key, for_code(res.error_code, res.error_message))
                    continue
                entries = []
                for c in res.configs:
                    source = ConfigSource.of(c.config_source) if version >= 1 else legacy_source(
                        res.resource_type, c.is_default, c.read_only)
                    synonyms = tuple(ConfigSynonym(s.name, s.value, ConfigSource.of(s.source))
                                     for s in (c.synonyms if version >= 1 else ()))
                    entries.append(ConfigEntry(c.name, c.value, source, c.is_sensitive, c.read_only, synonyms,
                                               c.documentation if version >= 3 else None))
                futures.complete(key, Config(tuple(entries)))
            futures.fail_missing(seen, "resource", group)

        def failure(e: BaseException, group: list[ConfigResource] = group) -> None:
            for r in group:
                futures.fail(r, e)

        rt.submit(Call("describeConfigs", deadline, _provider(node_id), request, response, failure))
    return KeyedResult(futures.futures)


def _alter(rt: AdminClientRunnable, name: str, resources: Iterable[ConfigResource], build: Any,
           timeout_ms: int | None) -> KeyedResult[ConfigResource, None]:
    futures: FutureMap[ConfigResource] = FutureMap(resources)
    _check_type(futures)
    deadline = rt.calc_deadline(timeout_ms)
    for node_id, group in _by_destination(futures.undone()).items():
        def request(_timeout: int, group: list[ConfigResource] = group) -> Any:
            return build(group)

        def response(body: Any, _version: int, group: list[ConfigResource] = group) -> None:
            seen = []
            for res in body.responses:
                key = ConfigResource(ConfigResourceType(res.resource_type), res.resource_name)
                seen.append(key)
                if res.error_code:
                    futures.fail(key, for_code(res.error_code, res.error_message))
                else:
                    futures.complete(key, None)
            futures.fail_missing(seen, "resource", group)

        def failure(e: BaseException, group: list[ConfigResource] = group) -> None:
            for r in group:
                futures.fail(r, e)

        rt.submit(Call(name, deadline, _provider(node_id), request, response, failure))
    return KeyedResult(futures.futures)


def incremental_alter_configs(rt: AdminClientRunnable, configs: Mapping[ConfigResource, Iterable[AlterConfigOp]],
                              validate_only: bool, timeout_ms: int | None) -> KeyedResult[ConfigResource, None]:
    ops = {r: list(o) for r, o in configs.items()}
    R = IncrementalAlterConfigsRequest

    def build(group: list[ConfigResource]) -> Any:
        return R(resources=[R.AlterConfigsResource(
            resource_type=int(r.type), resource_name=r.name,
            configs=[R.AlterableConfig(name=op.name, config_operation=int(op.op_type), value=op.value)
                     for op in ops[r]]) for r in group], validate_only=validate_only)

    return _alter(rt, "incrementalAlterConfigs", ops, build, timeout_ms)


def alter_configs(rt: AdminClientRunnable, configs: Mapping[ConfigResource, Config | Mapping[str, str]],
                  validate_only: bool, timeout_ms: int | None) -> KeyedResult[ConfigResource, None]:
    """The legacy whole-set AlterConfigs (Kafka's deprecated ``alterConfigs``): unspecified keys revert."""
    values: dict[ConfigResource, list[tuple[str, str | None]]] = {}
    for r, cfg in configs.items():
        if isinstance(cfg, Config):
            values[r] = [(e.name, e.value) for e in cfg.entries]
        else:
            values[r] = list(cfg.items())
    R = AlterConfigsRequest

    def build(group: list[ConfigResource]) -> Any:
        return R(resources=[R.AlterConfigsResource(
            resource_type=int(r.type), resource_name=r.name,
            configs=[R.AlterableConfig(name=k, value=v) for k, v in values[r]]) for r in group],
            validate_only=validate_only)

    return _alter(rt, "alterConfigs", values, build, timeout_ms)
