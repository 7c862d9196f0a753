"""Per-topic log configuration with Kafka's names, types, defaults and validation.

Kafka counterpart: ``org.apache.kafka.storage.internals.log.LogConfig`` (topic-level keys from
``TopicConfig``) plus the broker-level ``log.*`` synonyms from ``KafkaConfig``/``ServerLogConfigs``.

``LogConfig`` is an immutable value (frozen dataclass): replace it to change it (``Log.update_config``).
Thread-safe by immutability.

Sources, used by DescribeConfigs: a key is a *topic override* when it came through :meth:`LogConfig.from_props`,
a *broker override* when it came through :meth:`LogConfig.from_broker_props`, else Kafka's default.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from strom.common.errors import ConfigError

__all__ = [
    "LONG_MAX",
    "ConfigKey",
    "LogConfig",
    "LOG_CONFIG_KEYS",
    "BROKER_SYNONYMS",
    "TOPIC_KEY_OF",
    "SOURCE_TOPIC",
    "SOURCE_BROKER",
    "SOURCE_DEFAULT",
]

LONG_MAX = 9223372036854775807
_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1
_LONG_MIN = -(2**63)

# DescribeConfigs ConfigSource names (the broker maps these to the protocol's source codes).
SOURCE_TOPIC = "DYNAMIC_TOPIC_CONFIG"
SOURCE_BROKER = "STATIC_BROKER_CONFIG"
SOURCE_DEFAULT = "DEFAULT_CONFIG"

Validator = Callable[[str, Any], None]


def _at_least(low: float) -> Validator:
    def check(name: str, value: Any) -> None:
        if value < low:
            raise ConfigError(f"Invalid value {value} for configuration {name}: Value must be at least {low}")

    return check


def _between(low: float, high: float) -> Validator:
    def check(name: str, value: Any) -> None:
        if not low <= value <= high:
            raise ConfigError(
                f"Invalid value {value} for configuration {name}: Value must be between {low} and {high}"
            )

    return check


def _one_of(*allowed: str) -> Validator:
    def check(name: str, value: Any) -> None:
        items = value if isinstance(value, tuple) else (value,)
        for item in items:
            if item not in allowed:
                raise ConfigError(
                    f"Invalid value {item} for configuration {name}: String must be one of: {', '.join(allowed)}"
                )

    return check


def _throttled_replicas(name: str, value: Any) -> None:
    """Kafka's ``ThrottledReplicaListValidator``: ``partition:broker`` entries, or ``*`` alone."""
    items = [str(v).strip() for v in value]
    if items == ["*"] or all(_REPLICA_ENTRY.match(v) for v in items):
        return
    raise ConfigError(f"Invalid value {','.join(items)} for configuration {name}: {name} must be the literal '*' "
                      "or a list of replicas in the following format: [partitionId]:[brokerId],"
                      "[partitionId]:[brokerId],...")


_REPLICA_ENTRY = re.compile(r"^\d+:\d+$")


@dataclass(frozen=True, slots=True)
class ConfigKey:
    """One topic config: Kafka name, type (int/long/double/boolean/string/list), default and docs."""

    name: str
    type: str
    default: Any
    doc: str
    validator: Validator | None = None
    sensitive: bool = False
    read_only: bool = False

    @property
    def attr(self) -> str:
        return self.name.replace(".", "_")

    def parse(self, value: Any, key_for_errors: str | None = None) -> Any:
        """Convert a string (or an already typed Python value) and validate it; errors name the key."""
        name = key_for_errors or self.name
        parsed = _parse(self.type, name, value)
        if self.validator is not None:
            self.validator(name, parsed)
        return parsed

    def format(self, value: Any) -> str:
        """Render a value as Java's ``ConfigDef`` would in DescribeConfigs."""
        if self.type == "boolean":
            return "true" if value else "false"
        if self.type == "list":
            return ",".join(value)
        return str(value)


def _parse(kind: str, name: str, value: Any) -> Any:
    if value is None:
        raise ConfigError(f"Invalid value None for configuration {name}: value must not be null")
    try:
        if kind in ("int", "long"):
            if isinstance(value, bool) or isinstance(value, float):
                raise ValueError
            number = value if isinstance(value, int) else int(str(value).strip())
            low, high = (_INT_MIN, _INT_MAX) if kind == "int" else (_LONG_MIN, LONG_MAX)
            if not low <= number <= high:
                raise ValueError
            return number
        if kind == "double":
            if isinstance(value, bool):
                raise ValueError
            return float(value)
        if kind == "boolean":
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text in ("true", "false"):
                return text == "true"
            raise ValueError
        if kind == "list":
            if isinstance(value, (list, tuple)):
                return tuple(str(v).strip() for v in value)
            text = str(value).strip()
            return tuple(part.strip() for part in text.split(",")) if text else ()
        return str(value).strip()
    except ValueError:
        raise ConfigError(
            f"Invalid value {value!r} for configuration {name}: Expected value to be of type {kind.upper()}"
        ) from None


def _key(name: str, kind: str, default: Any, doc: str, validator: Validator | None = None) -> ConfigKey:
    return ConfigKey(name, kind, default, doc, validator)


_COMPRESSION = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")

LOG_CONFIG_KEYS: dict[str, ConfigKey] = {
    k.name: k
    for k in (
        _key(
            "cleanup.policy",
            "list",
            ("delete",),
            "Retention policy: 'delete' and/or 'compact'.",
            _one_of("compact", "delete"),
        ),
        _key(
            "compression.type",
            "string",
            "producer",
            "Final compression type for the topic.",
            _one_of(*_COMPRESSION),
        ),
        _key("compression.gzip.level", "int", -1, "Compression level for gzip (-1: zlib's default, 6).",
             _between(-1, 9)),
        _key("compression.lz4.level", "int", 9, "Compression level for lz4.", _between(1, 17)),
        _key("compression.zstd.level", "int", 3, "Compression level for zstd.", _between(-131072, 22)),
        _key(
            "delete.retention.ms",
            "long",
            86400000,
            "How long delete tombstones are retained (compacted topics).",
            _at_least(0),
        ),
        _key(
            "file.delete.delay.ms",
            "long",
            60000,
            "Time to wait before deleting a file from the filesystem.",
            _at_least(0),
        ),
        _key("flush.messages", "long", LONG_MAX, "Force an fsync after this many messages.", _at_least(1)),
        _key("flush.ms", "long", LONG_MAX, "Force an fsync after this much time.", _at_least(0)),
        _key("follower.replication.throttled.replicas", "list", (), "Replicas (partition:broker, or *) fetched at no "
             "more than follower.replication.throttled.rate while out of the ISR.", _throttled_replicas),
        _key("index.interval.bytes", "int", 4096, "Bytes between offset index entries.", _at_least(0)),
        _key("leader.replication.throttled.replicas", "list", (), "Replicas (partition:broker, or *) served to "
             "followers out of the ISR at no more than leader.replication.throttled.rate.", _throttled_replicas),
        _key(
            "local.retention.bytes",
            "long",
            -2,
            "Local retention size (tiered storage; ignored).",
            _at_least(-2),
        ),
        _key(
            "local.retention.ms", "long", -2, "Local retention time (tiered storage; ignored).", _at_least(-2)
        ),
        _key(
            "max.compaction.lag.ms",
            "long",
            LONG_MAX,
            "Maximum time a message stays uncompacted.",
            _at_least(1),
        ),
        _key("max.message.bytes", "int", 1048588, "Largest record batch size allowed.", _at_least(0)),
        _key(
            "message.downconversion.enable", "boolean", True, "Down-conversion for old consumers (ignored)."
        ),
        _key("message.format.version", "string", "3.0-IV1", "Deprecated message format version (ignored)."),
        _key(
            "message.timestamp.after.max.ms",
            "long",
            LONG_MAX,
            "Allowed amount a CreateTime timestamp may be ahead of the broker time.",
            _at_least(0),
        ),
        _key(
            "message.timestamp.before.max.ms",
            "long",
            LONG_MAX,
            "Allowed amount a CreateTime timestamp may be behind the broker time.",
            _at_least(0),
        ),
        _key(
            "message.timestamp.difference.max.ms",
            "long",
            LONG_MAX,
            "Deprecated: maximum difference between the broker time and a CreateTime timestamp.",
            _at_least(0),
        ),
        _key(
            "message.timestamp.type",
            "string",
            "CreateTime",
            "CreateTime or LogAppendTime.",
            _one_of("CreateTime", "LogAppendTime"),
        ),
        _key(
            "min.cleanable.dirty.ratio",
            "double",
            0.5,
            "Dirty ratio that triggers compaction.",
            _between(0, 1),
        ),
        _key("min.compaction.lag.ms", "long", 0, "Minimum time a message stays uncompacted.", _at_least(0)),
        _key("min.insync.replicas", "int", 1, "Minimum in-sync replicas for acks=all.", _at_least(1)),
        _key("preallocate", "boolean", False, "Reserve a new segment's blocks (segment.bytes) when it is created."),
        _key("remote.storage.enable", "boolean", False, "Tiered storage (unsupported; must stay false)."),
        _key("remote.log.copy.disable", "boolean", False, "Tiered storage copy (ignored)."),
        _key("remote.log.delete.on.disable", "boolean", False, "Tiered storage delete (ignored)."),
        _key(
            "retention.bytes",
            "long",
            -1,
            "Maximum partition size before old segments are deleted; -1 unlimited.",
        ),
        _key(
            "retention.ms",
            "long",
            604800000,
            "Maximum age of a segment before deletion; -1 unlimited.",
            _at_least(-1),
        ),
        _key("segment.bytes", "int", 1073741824, "Segment file size.", _at_least(14)),
        _key(
            "segment.index.bytes", "int", 10485760, "Maximum size of a segment's offset index.", _at_least(4)
        ),
        _key(
            "segment.jitter.ms",
            "long",
            0,
            "Random jitter subtracted from segment.ms (ignored).",
            _at_least(0),
        ),
        _key("segment.ms", "long", 604800000, "Time after which a segment is rolled.", _at_least(1)),
        _key(
            "unclean.leader.election.enable",
            "boolean",
            False,
            "Allow out-of-ISR leaders (single broker: ignored).",
        ),
    )
}

# Broker-level name -> (topic-level name, multiplier to the topic unit). Earlier entries win over later
# ones for the same topic key (log.roll.ms over log.roll.hours, like Kafka).
_BROKER_TO_TOPIC: tuple[tuple[str, str, int], ...] = (
    ("log.segment.bytes", "segment.bytes", 1),
    ("log.roll.ms", "segment.ms", 1),
    ("log.roll.hours", "segment.ms", 3600000),
    ("log.roll.jitter.ms", "segment.jitter.ms", 1),
    ("log.roll.jitter.hours", "segment.jitter.ms", 3600000),
    ("log.index.size.max.bytes", "segment.index.bytes", 1),
    ("log.retention.ms", "retention.ms", 1),
    ("log.retention.minutes", "retention.ms", 60000),
    ("log.retention.hours", "retention.ms", 3600000),
    ("log.retention.bytes", "retention.bytes", 1),
    ("log.flush.interval.messages", "flush.messages", 1),
    ("log.flush.interval.ms", "flush.ms", 1),
    ("log.index.interval.bytes", "index.interval.bytes", 1),
    ("message.max.bytes", "max.message.bytes", 1),
    ("log.message.timestamp.type", "message.timestamp.type", 1),
    ("log.message.timestamp.difference.max.ms", "message.timestamp.difference.max.ms", 1),
    ("log.message.timestamp.before.max.ms", "message.timestamp.before.max.ms", 1),
    ("log.message.timestamp.after.max.ms", "message.timestamp.after.max.ms", 1),
    ("log.message.downconversion.enable", "message.downconversion.enable", 1),
    ("log.cleanup.policy", "cleanup.policy", 1),
    ("log.segment.delete.delay.ms", "file.delete.delay.ms", 1),
    ("log.cleaner.delete.retention.ms", "delete.retention.ms", 1),
    ("log.cleaner.min.compaction.lag.ms", "min.compaction.lag.ms", 1),
    ("log.cleaner.max.compaction.lag.ms", "max.compaction.lag.ms", 1),
    ("log.cleaner.min.cleanable.ratio", "min.cleanable.dirty.ratio", 1),
    ("log.preallocate", "preallocate", 1),
    ("log.local.retention.ms", "local.retention.ms", 1),
    ("log.local.retention.bytes", "local.retention.bytes", 1),
    ("compression.type", "compression.type", 1),
    ("compression.gzip.level", "compression.gzip.level", 1),
    ("compression.lz4.level", "compression.lz4.level", 1),
    ("compression.zstd.level", "compression.zstd.level", 1),
    ("min.insync.replicas", "min.insync.replicas", 1),
    ("unclean.leader.election.enable", "unclean.leader.election.enable", 1),
)

BROKER_SYNONYMS: dict[str, tuple[str, ...]] = {}
"""Topic key -> its broker-level synonyms in precedence order (DescribeConfigs ``synonyms``)."""
for _broker_key, _topic_key, _ in _BROKER_TO_TOPIC:
    BROKER_SYNONYMS.setdefault(_topic_key, ())
    BROKER_SYNONYMS[_topic_key] += (_broker_key,)
TOPIC_KEY_OF: dict[str, str] = {b: t for b, t, _ in _BROKER_TO_TOPIC}
"""Broker key -> the topic key it sets (``log.retention.hours`` -> ``retention.ms``)."""


@dataclass(frozen=True, slots=True)
class LogConfig:
    """Effective configuration of one partition's log. Field ``x_y`` holds Kafka key ``x.y``."""

    cleanup_policy: tuple[str, ...] = ("delete",)
    compression_type: str = "producer"
    compression_gzip_level: int = -1
    compression_lz4_level: int = 9
    compression_zstd_level: int = 3
    delete_retention_ms: int = 86400000
    file_delete_delay_ms: int = 60000
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    follower_replication_throttled_replicas: tuple[str, ...] = ()
    index_interval_bytes: int = 4096
    leader_replication_throttled_replicas: tuple[str, ...] = ()
    local_retention_bytes: int = -2
    local_retention_ms: int = -2
    max_compaction_lag_ms: int = LONG_MAX
    max_message_bytes: int = 1048588
    message_downconversion_enable: bool = True
    message_format_version: str = "3.0-IV1"
    message_timestamp_after_max_ms: int = LONG_MAX
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_difference_max_ms: int = LONG_MAX
    message_timestamp_type: str = "CreateTime"
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    min_insync_replicas: int = 1
    preallocate: bool = False
    remote_storage_enable: bool = False
    remote_log_copy_disable: bool = False
    remote_log_delete_on_disable: bool = False
    retention_bytes: int = -1
    retention_ms: int = 604800000
    segment_bytes: int = 1073741824
    segment_index_bytes: int = 10485760
    segment_jitter_ms: int = 0
    segment_ms: int = 604800000
    unclean_leader_election_enable: bool = False
    topic_overrides: frozenset[str] = field(default=frozenset(), compare=False)
    broker_overrides: frozenset[str] = field(default=frozenset(), compare=False)

    # --- construction -------------------------------------------------------------------------------

    @classmethod
    def from_props(cls, props: Mapping[str, Any], defaults: LogConfig | None = None) -> LogConfig:
        """Topic-level overrides (``segment.bytes`` ...) on top of ``defaults`` (the broker's LogConfig).

        Raises :class:`ConfigError` naming the key for an unknown key or an invalid value.
        """
        base = defaults if defaults is not None else cls()
        values: dict[str, Any] = {}
        for name, raw in props.items():
            key = LOG_CONFIG_KEYS.get(name)
            if key is None:
                raise ConfigError(f"Unknown topic config name: {name}")
            values[key.attr] = key.parse(raw)
        config = dataclasses.replace(base, topic_overrides=base.topic_overrides | frozenset(props), **values)
        config._check_consistency()
        return config

    @classmethod
    def from_broker_props(cls, props: Mapping[str, Any]) -> LogConfig:
        """The broker-wide defaults from broker keys (``log.segment.bytes``, ``log.retention.hours`` ...).

        Keys that are not log settings are ignored (they belong to other broker components). Where two
        broker keys feed one topic key the finer unit wins (``log.roll.ms`` over ``log.roll.hours``).
        """
        values: dict[str, Any] = {}
        sources: set[str] = set()
        for broker_key, topic_key, multiplier in _BROKER_TO_TOPIC:
            if topic_key in sources or broker_key not in props or props[broker_key] is None:
                continue
            raw = props[broker_key]
            key = LOG_CONFIG_KEYS[topic_key]
            if multiplier != 1:
                number = _parse("long", broker_key, raw)
                if topic_key == "retention.ms" and number < 0:
                    value: Any = -1
                else:
                    value = key.parse(number * multiplier, broker_key)
            else:
                value = key.parse(raw, broker_key)
            values[key.attr] = value
            sources.add(topic_key)
        config = cls(broker_overrides=frozenset(sources), **values)
        config._check_consistency()
        return config

    def _check_consistency(self) -> None:
        if self.remote_storage_enable:
            raise ConfigError(
                "Invalid value true for configuration remote.storage.enable: tiered storage is not supported"
            )

    # --- derived values --------------------------------------------------------------------------------

    @property
    def delete_enabled(self) -> bool:
        """Retention deletes old segments (``cleanup.policy`` contains ``delete``)."""
        return "delete" in self.cleanup_policy

    @property
    def compact_enabled(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    @property
    def max_index_entries_bytes(self) -> int:
        return self.segment_index_bytes

    def timestamp_before_max_ms(self) -> int:
        """Effective lower bound distance: the newer key wins when set, else the deprecated one."""
        if "message.timestamp.before.max.ms" in self.topic_overrides | self.broker_overrides:
            return self.message_timestamp_before_max_ms
        return min(self.message_timestamp_before_max_ms, self.message_timestamp_difference_max_ms)

    def timestamp_after_max_ms(self) -> int:
        if "message.timestamp.after.max.ms" in self.topic_overrides | self.broker_overrides:
            return self.message_timestamp_after_max_ms
        return min(self.message_timestamp_after_max_ms, self.message_timestamp_difference_max_ms)

    # --- DescribeConfigs -------------------------------------------------------------------------------

    def get(self, name: str) -> Any:
        key = LOG_CONFIG_KEYS.get(name)
        if key is None:
            raise ConfigError(f"Unknown topic config name: {name}")
        return getattr(self, key.attr)

    def value_str(self, name: str) -> str:
        return LOG_CONFIG_KEYS[name].format(self.get(name))

    def source(self, name: str) -> str:
        """Where the value of ``name`` came from: SOURCE_TOPIC, SOURCE_BROKER or SOURCE_DEFAULT."""
        if name in self.topic_overrides:
            return SOURCE_TOPIC
        if name in self.broker_overrides:
            return SOURCE_BROKER
        return SOURCE_DEFAULT

    def describe(self, names: Iterable[str] | None = None) -> list[tuple[str, str, bool]]:
        """``(name, value_str, is_default)`` per key, sorted by name (or in the order of ``names``)."""
        keys = sorted(LOG_CONFIG_KEYS) if names is None else list(names)
        return [(n, self.value_str(n), self.source(n) == SOURCE_DEFAULT) for n in keys]

    def overridden_props(self) -> dict[str, str]:
        """The topic-level overrides as strings (what ``CreateTopics`` / ``AlterConfigs`` set)."""
        return {n: self.value_str(n) for n in sorted(self.topic_overrides)}
