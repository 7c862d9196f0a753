"""Broker configuration: Kafka's ``server.properties`` keys, defaults and validation.

Kafka counterpart: ``KafkaConfig``. Log-level keys (``log.segment.bytes`` …) are validated here; the broker turns
them into the default topic config with ``LogConfig.from_broker_props``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from strom.common.errors import ConfigError
from strom.config.properties import load_properties_file, parse_properties
from strom.storage.log_config import TOPIC_KEY_OF, LogConfig

__all__ = [
    "BrokerConfig",
    "Listener",
    "SECURITY_PROTOCOLS",
    "parse_listeners",
    "parse_security_protocol_map",
    "parse_properties",
    "load_properties_file",
]

_LONG_MAX = 2**63 - 1
_INT_MAX = 2**31 - 1


SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
_DEFAULT_PROTOCOL_MAP = "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL"


@dataclass(frozen=True, slots=True)
class Listener:
    """One endpoint (Kafka's ``EndPoint``): listener name (upper case), host, port and security protocol."""

    name: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"

    @property
    def uses_ssl(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")


def _int(lo: int | None = None, hi: int | None = None) -> Callable[[str, str], int]:
    def conv(key: str, raw: str) -> int:
        try:
            v = int(str(raw).strip())
        except ValueError:
            raise ConfigError(f"Invalid value {raw} for configuration {key}: Not a number of type INT") from None
        if lo is not None and v < lo:
            raise ConfigError(f"Invalid value {v} for configuration {key}: Value must be at least {lo}")
        if hi is not None and v > hi:
            raise ConfigError(f"Invalid value {v} for configuration {key}: Value must be no more than {hi}")
        return v

    return conv


def _bool(key: str, raw: str) -> bool:
    s = str(raw).strip().lower()
    if s in ("true", "false"):
        return s == "true"
    raise ConfigError(f"Invalid value {raw} for configuration {key}: Expected value to be either true or false")


def _str(key: str, raw: str) -> str:
    return str(raw).strip()


def _choice(*choices: str) -> Callable[[str, str], str]:
    def conv(key: str, raw: str) -> str:
        s = str(raw).strip()
        if s not in choices:
            raise ConfigError(f"Invalid value {s} for configuration {key}: String must be one of: {', '.join(choices)}")
        return s

    return conv


def _prometheus_listener(key: str, raw: str) -> str:
    from strom.metrics.prometheus import parse_listener

    s = str(raw).strip()
    try:
        parse_listener(s)
    except ValueError as e:
        raise ConfigError(f"Invalid value {s} for configuration {key}: {e}") from None
    return s


# key -> (converter, default). Defaults are Kafka 3.x's.
_DEFS: dict[str, tuple[Callable[[str, str], Any], Any]] = {
    "node.id": (_int(-1), 1),
    "broker.id": (_int(-1), None),
    "listeners": (_str, "PLAINTEXT://127.0.0.1:9092"),
    "advertised.listeners": (_str, None),
    "listener.security.protocol.map": (_str, _DEFAULT_PROTOCOL_MAP),
    "inter.broker.listener.name": (_str, None),
    "security.inter.broker.protocol": (_str, "PLAINTEXT"),
    "max.connections": (_int(0), _INT_MAX),
    "max.connections.per.ip": (_int(0), _INT_MAX),
    "max.connections.per.ip.overrides": (_str, ""),
    "max.connection.creation.rate": (_int(0), _INT_MAX),
    "connections.max.reauth.ms": (_int(0), 0),
    "quota.window.num": (_int(1), 11),
    "quota.window.size.seconds": (_int(1), 1),
    "leader.replication.throttled.rate": (_int(0), _LONG_MAX),
    "follower.replication.throttled.rate": (_int(0), _LONG_MAX),
    "replica.alter.log.dirs.io.max.bytes.per.second": (_int(0), _LONG_MAX),
    "replication.quota.window.num": (_int(1), 11),
    "replication.quota.window.size.seconds": (_int(1), 1),
    "sasl.enabled.mechanisms": (_str, "GSSAPI"),
    "sasl.mechanism.inter.broker.protocol": (_str, "GSSAPI"),
    "ssl.client.auth": (_choice("none", "requested", "required"), "none"),
    "ssl.keystore.type": (_choice("PEM"), "PEM"),
    "ssl.truststore.type": (_choice("PEM"), "PEM"),
    "ssl.endpoint.identification.algorithm": (_str, "https"),
    "ssl.principal.mapping.rules": (_str, "DEFAULT"),
    "ssl.enabled.protocols": (_str, "TLSv1.2,TLSv1.3"),
    "ssl.cipher.suites": (_str, ""),
    "super.users": (_str, ""),
    "allow.everyone.if.no.acl.found": (_bool, False),
    "authorizer.class.name": (_str, ""),
    "log.dirs": (_str, None),
    "log.dir": (_str, "./strom-data"),
    "num.partitions": (_int(1), 1),
    "default.replication.factor": (_int(1), 1),
    "auto.create.topics.enable": (_bool, True),
    "delete.topic.enable": (_bool, True),
    "message.max.bytes": (_int(0), 1048588),
    "socket.request.max.bytes": (_int(1), 104857600),
    "log.segment.bytes": (_int(14), 1073741824),
    "log.preallocate": (_bool, False),
    "log.roll.ms": (_int(1), None),
    "log.roll.hours": (_int(1), 168),
    "log.retention.ms": (_int(-1), None),
    "log.retention.minutes": (_int(-1), None),
    "log.retention.hours": (_int(-1), 168),
    "log.retention.bytes": (_int(-1), -1),
    "log.retention.check.interval.ms": (_int(1), 300000),
    "log.flush.interval.messages": (_int(1), _LONG_MAX),
    "log.flush.interval.ms": (_int(0), None),
    "log.flush.scheduler.interval.ms": (_int(0), _LONG_MAX),
    "log.flush.offset.checkpoint.interval.ms": (_int(0), 60000),
    "log.index.interval.bytes": (_int(0), 4096),
    "log.index.size.max.bytes": (_int(4), 10485760),
    "log.message.timestamp.type": (_choice("CreateTime", "LogAppendTime"), "CreateTime"),
    "log.cleanup.policy": (_str, "delete"),
    "log.segment.delete.delay.ms": (_int(0), 60000),
    "min.insync.replicas": (_int(1), 1),
    "compression.type": (_choice("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"), "producer"),
    "group.initial.rebalance.delay.ms": (_int(0), 3000),
    "group.min.session.timeout.ms": (_int(0), 6000),
    "group.max.session.timeout.ms": (_int(0), 1800000),
    "group.max.size": (_int(1), 2147483647),
    "offset.metadata.max.bytes": (_int(0), 4096),
    "offsets.topic.num.partitions": (_int(1), 50),
    "offsets.topic.replication.factor": (_int(1), 3),
    "offsets.topic.segment.bytes": (_int(1), 104857600),
    "offsets.retention.minutes": (_int(1), 10080),
    "offsets.retention.check.interval.ms": (_int(1), 600000),
    "transaction.state.log.num.partitions": (_int(1), 50),
    "transaction.state.log.replication.factor": (_int(1), 3),
    "transaction.state.log.min.isr": (_int(1), 2),
    "transaction.state.log.segment.bytes": (_int(1), 104857600),
    "transaction.max.timeout.ms": (_int(1), 900000),
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": (_int(1), 10000),
    "transaction.remove.expired.transaction.cleanup.interval.ms": (_int(1), 3600000),
    "transactional.id.expiration.ms": (_int(1), 604800000),
    "transaction.partition.verification.enable": (_bool, True),
    "producer.id.expiration.ms": (_int(1), 86400000),
    "connections.max.idle.ms": (_int(1), 600000),
    "queued.max.requests": (_int(1), 500),
    "cluster.id": (_str, None),
    "broker.rack": (_str, None),
    # Cluster mode (Kafka's ZooKeeper mode): empty zookeeper.connect runs a standalone broker.
    "zookeeper.connect": (_str, None),
    "zookeeper.session.timeout.ms": (_int(1), 18000),
    "zookeeper.connection.timeout.ms": (_int(1), None),
    "replica.lag.time.max.ms": (_int(1), 30000),
    "replica.fetch.wait.max.ms": (_int(0), 500),
    "replica.fetch.min.bytes": (_int(1), 1),
    "replica.fetch.max.bytes": (_int(0), 1048576),
    "replica.fetch.response.max.bytes": (_int(0), 10485760),
    "replica.fetch.backoff.ms": (_int(0), 1000),
    "replica.socket.timeout.ms": (_int(1), 30000),
    "replica.high.watermark.checkpoint.interval.ms": (_int(1), 5000),
    "num.replica.fetchers": (_int(1), 1),
    # Fetch sessions (KIP-227): how many the broker keeps, and how long one must be idle before any newcomer may
    # evict it (docs/design.md, "Fetch sessions").
    "max.incremental.fetch.session.cache.slots": (_int(0), 1000),
    "min.incremental.fetch.session.eviction.ms": (_int(0), 120000),
    "unclean.leader.election.enable": (_bool, False),
    "auto.leader.rebalance.enable": (_bool, True),
    "leader.imbalance.check.interval.seconds": (_int(1), 300),
    "leader.imbalance.per.broker.percentage": (_int(0), 10),
    "controlled.shutdown.enable": (_bool, True),
    "controlled.shutdown.max.retries": (_int(0), 3),
    "controlled.shutdown.retry.backoff.ms": (_int(0), 5000),
    "controller.socket.timeout.ms": (_int(1), 30000),
    "replica.selector.class": (_choice("", "org.apache.kafka.common.replica.RackAwareReplicaSelector",
                                       "org.apache.kafka.common.replica.LeaderSelector"), None),
    # Metrics (docs/monitoring.md): the broker's registry and its Prometheus endpoint (empty = off).
    "metric.reporters": (_str, ""),
    "metrics.num.samples": (_int(1), 2),
    "metrics.sample.window.ms": (_int(1), 30000),
    "metrics.recording.level": (_choice("INFO", "DEBUG", "TRACE"), "INFO"),
    "metrics.prometheus.listener": (_prometheus_listener, ""),
    # Client metrics (KIP-714): the largest PushTelemetry payload taken, compressed and decompressed.
    "telemetry.max.bytes": (_int(1), 1048576),
}

# Keys a real Kafka server.properties carries that strom accepts and ignores (threads, ZooKeeper, KRaft quorum,
# socket buffers): a file written for Kafka must start strom.
_IGNORED = {
    "process.roles", "controller.quorum.voters", "controller.quorum.bootstrap.servers", "controller.listener.names",
    "num.network.threads", "num.io.threads",
    "socket.send.buffer.bytes", "socket.receive.buffer.bytes", "num.recovery.threads.per.data.dir",
    "metadata.log.dir", "background.threads", "queued.max.request.bytes",
    "share.coordinator.state.topic.replication.factor",
    "share.coordinator.state.topic.min.isr",
}

# Broker keys of topic configs that only the default LogConfig reads (validated by ``LogConfig.from_broker_props``).
_LOG_ONLY_KEYS = {k: t for k, t in TOPIC_KEY_OF.items() if k not in _DEFS}

_LISTENER_RE = re.compile(r"^(?P<name>[A-Za-z0-9_.-]+)://(?P<host>\[[^\]]*\]|[^:\[\]]*):(?P<port>\d+)$")


def parse_security_protocol_map(key: str, value: str) -> dict[str, str]:
    """``NAME:PROTOCOL,...`` (Kafka's ``listener.security.protocol.map``); names upper-cased."""
    result: dict[str, str] = {}
    for item in (v.strip() for v in value.split(",")):
        if not item:
            continue
        name, sep, proto = item.partition(":")
        name, proto = name.strip().upper(), proto.strip().upper()
        if not sep or not name or not proto:
            raise ConfigError(f"Invalid value {item} for configuration {key}: expected LISTENER_NAME:SECURITY_PROTOCOL")
        if proto not in SECURITY_PROTOCOLS:
            raise ConfigError(f"Invalid value {item} for configuration {key}: unknown security protocol {proto} "
                              f"(one of {', '.join(SECURITY_PROTOCOLS)})")
        if name in result:
            raise ConfigError(f"Invalid value {value} for configuration {key}: listener {name} is mapped twice")
        result[name] = proto
    return result


def parse_listeners(key: str, value: str, protocol_map: Mapping[str, str] | None = None) -> list[Listener]:
    """``NAME://host:port,...`` as Kafka's ``listeners``: names unique, ports unique (port 0 excepted), every
    name mapped to a security protocol."""
    protocol_map = parse_security_protocol_map("listener.security.protocol.map", _DEFAULT_PROTOCOL_MAP) \
        if protocol_map is None else protocol_map
    result: list[Listener] = []
    for item in (v.strip() for v in value.split(",")):
        if not item:
            continue
        m = _LISTENER_RE.match(item)
        if m is None:
            raise ConfigError(f"Invalid value {item} for configuration {key}: expected LISTENER_NAME://host:port")
        name = m.group("name").upper()
        host = m.group("host").strip("[]")
        port = int(m.group("port"))
        if port > 65535:
            raise ConfigError(f"Invalid value {item} for configuration {key}: port {port} out of range (0-65535)")
        proto = protocol_map.get(name)
        if proto is None:
            raise ConfigError(
                f"Invalid value {item} for configuration {key}: no security protocol defined for listener {name} "
                "(add it to listener.security.protocol.map)")
        if any(lst.name == name for lst in result):
            raise ConfigError(f"Invalid value {value} for configuration {key}: each listener must have a different "
                              f"name, listener {name} is given twice")
        if port != 0 and any(lst.port == port and lst.host == host for lst in result):
            raise ConfigError(f"Invalid value {value} for configuration {key}: each listener must have a different "
                              f"port, port {port} is given twice")
        result.append(Listener(name, host, port, proto))
    if not result:
        raise ConfigError(f"Invalid value {value!r} for configuration {key}: at least one listener is required")
    return result


class BrokerConfig:
    """Validated broker settings. Unknown keys raise :class:`ConfigError` naming the key."""

    def __init__(self, props: Mapping[str, Any] | None = None) -> None:
        props = {str(k).strip(): str(v) for k, v in (props or {}).items()}
        self.originals = dict(props)
        self.values: dict[str, Any] = {}
        for key, (conv, default) in _DEFS.items():
            self.values[key] = conv(key, props[key]) if key in props else default
        for key in props:
            if key in _DEFS or key in _IGNORED or key in _LOG_ONLY_KEYS:
                continue
            if key.startswith(("log.cleaner.", "listener.name.", "ssl.", "sasl.", "controller.", "remote.log.",
                               "zookeeper.")):
                continue
            raise ConfigError(f"Unknown configuration {key}")
        if self.values["broker.id"] is not None and "node.id" not in props:
            self.values["node.id"] = self.values["broker.id"]
        self._init_listeners(props)
        dirs = self.values["log.dirs"] or self.values["log.dir"]
        self.log_dirs = [d.strip() for d in str(dirs).split(",") if d.strip()]
        if not self.log_dirs:
            raise ConfigError("Invalid value for configuration log.dirs: at least one directory is required")

    def _init_listeners(self, props: Mapping[str, str]) -> None:
        """Listeners, their security protocols and the inter-broker listener, validated as ``KafkaConfig`` does."""
        self.security_protocol_map = parse_security_protocol_map(
            "listener.security.protocol.map", self.values["listener.security.protocol.map"])
        self.listeners = parse_listeners("listeners", self.values["listeners"], self.security_protocol_map)
        adv = self.values["advertised.listeners"]
        self.advertised_listeners = (parse_listeners("advertised.listeners", adv, self.security_protocol_map)
                                     if adv else self.listeners)
        names = {lst.name for lst in self.listeners}
        for lst in self.advertised_listeners:
            if lst.name not in names:
                raise ConfigError(
                    f"Invalid value {adv} for configuration advertised.listeners: listener {lst.name} is not defined "
                    f"in listeners ({', '.join(sorted(names))})")
            if lst.host in ("", "0.0.0.0", "::"):
                raise ConfigError(
                    f"Invalid value {lst.host or '<empty>'} for configuration advertised.listeners: "
                    "set advertised.listeners to an address clients can reach"
                )
        if "inter.broker.listener.name" in props and "security.inter.broker.protocol" in props:
            raise ConfigError("Only one of inter.broker.listener.name and security.inter.broker.protocol should be set.")
        if "inter.broker.listener.name" in props:
            inter = str(self.values["inter.broker.listener.name"]).upper()
        else:
            inter = str(self.values["security.inter.broker.protocol"]).upper()
            if inter not in SECURITY_PROTOCOLS:
                raise ConfigError(f"Invalid value {inter} for configuration security.inter.broker.protocol: "
                                  f"String must be one of: {', '.join(SECURITY_PROTOCOLS)}")
        advertised_names = [lst.name for lst in self.advertised_listeners]
        if inter not in advertised_names:
            key = ("inter.broker.listener.name" if "inter.broker.listener.name" in props
                   else "security.inter.broker.protocol")
            raise ConfigError(
                f"Invalid value {inter} for configuration {key}: inter.broker.listener.name must be a listener name "
                f"defined in advertised.listeners. The valid options based on currently configured listeners are "
                f"{','.join(advertised_names)}")
        self.inter_broker_listener_name = inter

    def listener(self, name: str) -> Listener:
        """The bound listener called ``name`` (case-insensitive)."""
        for lst in self.listeners:
            if lst.name == name.upper():
                return lst
        raise KeyError(f"no listener named {name}")

    def listener_value(self, listener_name: str, key: str, default: Any = None) -> Any:
        """``listener.name.<listener>.<key>`` if set, else ``<key>`` (Kafka's per-listener override rule)."""
        prefixed = f"listener.name.{listener_name.lower()}.{key}"
        if prefixed in self.originals:
            return self.originals[prefixed]
        if key in self.values and self.values[key] is not None:
            return self.values[key]
        return self.originals.get(key, default)

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    @property
    def node_id(self) -> int:
        return int(self.values["node.id"])

    def describe(self) -> list[tuple[str, str | None, bool]]:
        """(name, value, is_default) for DescribeConfigs on the broker resource."""
        rows = []
        for key, (_conv, default) in sorted(_DEFS.items()):
            value = self.values[key]
            rows.append((key, None if value is None else _fmt(value), key not in self.originals))
            del default
        defaults = LogConfig()
        for key, topic_key in sorted(_LOG_ONLY_KEYS.items()):
            value = self.originals.get(key)
            if value is None:  # the topic default (log.roll.jitter.hours, the one in hours, defaults to 0 too)
                value = defaults.value_str(topic_key)
            rows.append((key, value, key not in self.originals))
        return sorted(rows)


def _fmt(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)
