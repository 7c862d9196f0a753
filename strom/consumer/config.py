"""Consumer configuration: every key of Kafka 3.x's ``ConsumerConfig`` with the Java defaults.

Kafka counterpart: ``org.apache.kafka.clients.consumer.ConsumerConfig`` (+ ``maybeOverrideClientId``,
``maybeOverrideEnableAutoCommit``, ``appendDeserializerToConfig`` and the checks ``GroupRebalanceConfig`` /
``Heartbeat`` make).

Version choices: Kafka **3.x** defaults — ``session.timeout.ms=45000``, ``partition.assignment.strategy =
[range, cooperative-sticky]`` (the first one wins when every member supports it, so groups start eager and can
be upgraded by a rolling bounce), ``group.protocol=classic`` (``consumer``, KIP-848, is rejected: not
implemented). Assignors may be named by Kafka's Java class names, short names (``range``, ``roundrobin``,
``sticky``, ``cooperative-sticky``), dotted Python paths, classes or instances. Deserializers take the same
forms as the producer's serializers (``"string"``, ``"bytes"``, Java class names, a class, an instance or a
callable).

Usage::

    cfg = ConsumerConfig({"bootstrap.servers": "localhost:9092", "group.id": "g"},
                         key_deserializer="string", value_deserializer="bytes", max_poll_records=100)
    cfg["max.poll.records"]          # 100

Thread-safety: immutable after construction.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from strom.common.errors import ConfigError
from strom.config.abstract_config import AbstractConfig
from strom.config.common_client_configs import (
    CLIENT_ID_CONFIG,
    define_common_client_configs,
    post_process_reconnect_backoff_configs,
)
from strom.config.config_def import (
    CaseInsensitiveValidString,
    ConfigDef,
    ConfigType,
    Importance,
    LambdaValidator,
    NonEmptyString,
    Range,
)

__all__ = [
    "ConsumerConfig",
    "CONSUMER_CONFIG_DEF",
    "GROUP_ID_CONFIG",
    "GROUP_INSTANCE_ID_CONFIG",
    "ENABLE_AUTO_COMMIT_CONFIG",
    "AUTO_COMMIT_INTERVAL_MS_CONFIG",
    "AUTO_OFFSET_RESET_CONFIG",
    "ISOLATION_LEVEL_CONFIG",
    "MAX_POLL_RECORDS_CONFIG",
    "MAX_POLL_INTERVAL_MS_CONFIG",
    "SESSION_TIMEOUT_MS_CONFIG",
    "HEARTBEAT_INTERVAL_MS_CONFIG",
    "PARTITION_ASSIGNMENT_STRATEGY_CONFIG",
    "KEY_DESERIALIZER_CLASS_CONFIG",
    "VALUE_DESERIALIZER_CLASS_CONFIG",
    "INTERCEPTOR_CLASSES_CONFIG",
]

log = logging.getLogger(__name__)

GROUP_ID_CONFIG = "group.id"
GROUP_INSTANCE_ID_CONFIG = "group.instance.id"
GROUP_PROTOCOL_CONFIG = "group.protocol"
ENABLE_AUTO_COMMIT_CONFIG = "enable.auto.commit"
AUTO_COMMIT_INTERVAL_MS_CONFIG = "auto.commit.interval.ms"
AUTO_OFFSET_RESET_CONFIG = "auto.offset.reset"
ISOLATION_LEVEL_CONFIG = "isolation.level"
MAX_POLL_RECORDS_CONFIG = "max.poll.records"
MAX_POLL_INTERVAL_MS_CONFIG = "max.poll.interval.ms"
SESSION_TIMEOUT_MS_CONFIG = "session.timeout.ms"
HEARTBEAT_INTERVAL_MS_CONFIG = "heartbeat.interval.ms"
PARTITION_ASSIGNMENT_STRATEGY_CONFIG = "partition.assignment.strategy"
KEY_DESERIALIZER_CLASS_CONFIG = "key.deserializer"
VALUE_DESERIALIZER_CLASS_CONFIG = "value.deserializer"
INTERCEPTOR_CLASSES_CONFIG = "interceptor.classes"

_CLIENT_ID_SEQUENCE = itertools.count(1)

_DESERIALIZER_ALIASES = {
    "bytes": "strom.common.serialization.ByteArrayDeserializer",
    "bytearray": "strom.common.serialization.ByteArrayDeserializer",
    "str": "strom.common.serialization.StringDeserializer",
    "string": "strom.common.serialization.StringDeserializer",
    "int": "strom.common.serialization.IntegerDeserializer",
    "integer": "strom.common.serialization.IntegerDeserializer",
    "long": "strom.common.serialization.LongDeserializer",
    "short": "strom.common.serialization.ShortDeserializer",
    "float": "strom.common.serialization.FloatDeserializer",
    "double": "strom.common.serialization.DoubleDeserializer",
    "json": "strom.common.serialization.JsonDeserializer",
    "uuid": "strom.common.serialization.UUIDDeserializer",
    "void": "strom.common.serialization.VoidDeserializer",
}


def _check_assignors(value: Any) -> str | None:
    from strom.consumer.assignors import resolve_assignor

    for spec in value or ():
        try:
            resolve_assignor(spec)
        except (ConfigError, TypeError, ValueError) as exc:
            return str(exc)
    return None


def _build_def() -> ConfigDef:
    d = ConfigDef()
    # receive.buffer.bytes: the OS default (Java: 64 KiB), which keeps Linux's receive-buffer autotuning on for
    # large fetch responses (docs/divergences.md)
    define_common_client_configs(d, request_timeout_ms=30_000, receive_buffer_bytes=-1)
    d.define(GROUP_ID_CONFIG, ConfigType.STRING, None, None, Importance.HIGH,
             "The consumer group this consumer belongs to; required for subscribe() and offset commits.")
    d.define(GROUP_INSTANCE_ID_CONFIG, ConfigType.STRING, None, NonEmptyString(), Importance.MEDIUM,
             "A unique identifier of the consumer instance (static membership, KIP-345).")
    d.define(GROUP_PROTOCOL_CONFIG, ConfigType.STRING, "classic", CaseInsensitiveValidString.in_("classic", "consumer"),
             Importance.HIGH, "Group protocol; strom implements the classic protocol only.")
    d.define("group.remote.assignor", ConfigType.STRING, None, None, Importance.MEDIUM,
             "Server-side assignor of the KIP-848 protocol (accepted; not implemented).")
    d.define(MAX_POLL_RECORDS_CONFIG, ConfigType.INT, 500, Range.at_least(1), Importance.MEDIUM,
             "The maximum number of records returned in a single call to poll().")
    d.define(MAX_POLL_INTERVAL_MS_CONFIG, ConfigType.INT, 300_000, Range.at_least(1), Importance.MEDIUM,
             "Maximum delay between poll() calls before the consumer is considered failed and leaves the group.")
    d.define(SESSION_TIMEOUT_MS_CONFIG, ConfigType.INT, 45_000, None, Importance.HIGH,
             "Timeout used to detect client failures with the group membership protocol.")
    d.define(HEARTBEAT_INTERVAL_MS_CONFIG, ConfigType.INT, 3000, None, Importance.HIGH,
             "Expected time between heartbeats to the group coordinator.")
    d.define(PARTITION_ASSIGNMENT_STRATEGY_CONFIG, ConfigType.LIST,
             ["org.apache.kafka.clients.consumer.RangeAssignor",
              "org.apache.kafka.clients.consumer.CooperativeStickyAssignor"],
             LambdaValidator(_check_assignors, "assignor names or classes"), Importance.MEDIUM,
             "Ordered list of supported partition assignment strategies (preferred first).")
    d.define(ENABLE_AUTO_COMMIT_CONFIG, ConfigType.BOOLEAN, True, None, Importance.MEDIUM,
             "Commit the consumer's offsets periodically in the background of poll().")
    d.define(AUTO_COMMIT_INTERVAL_MS_CONFIG, ConfigType.INT, 5000, Range.at_least(0), Importance.LOW,
             "Frequency in ms of the automatic offset commits.")
    d.define("client.rack", ConfigType.STRING, "", None, Importance.LOW,
             "A rack identifier for this client (sent in Fetch and the subscription).")
    d.define("max.partition.fetch.bytes", ConfigType.INT, 1024 * 1024, Range.at_least(0), Importance.HIGH,
             "The maximum data returned per partition by the server.")
    d.define("fetch.min.bytes", ConfigType.INT, 1, Range.at_least(0), Importance.HIGH,
             "The minimum amount of data the server returns for a fetch request.")
    d.define("fetch.max.bytes", ConfigType.INT, 50 * 1024 * 1024, Range.at_least(0), Importance.MEDIUM,
             "The maximum amount of data the server returns for a fetch request.")
    d.define("fetch.max.wait.ms", ConfigType.INT, 500, Range.at_least(0), Importance.LOW,
             "How long the server blocks a fetch that does not yet have fetch.min.bytes of data.")
    d.define(AUTO_OFFSET_RESET_CONFIG, ConfigType.STRING, "latest",
             CaseInsensitiveValidString.in_("latest", "earliest", "none"), Importance.MEDIUM,
             "What to do when there is no initial offset or the offset is out of range.")
    d.define("check.crcs", ConfigType.BOOLEAN, True, None, Importance.LOW,
             "Check the CRC32C of every fetched record batch.")
    d.define(KEY_DESERIALIZER_CLASS_CONFIG, ConfigType.CLASS, importance=Importance.HIGH,
             doc="Deserializer for keys: a class, a dotted class path, an alias (bytes, string, int, long, json, "
                 "float, double, uuid), a Deserializer instance or a plain callable.")
    d.define(VALUE_DESERIALIZER_CLASS_CONFIG, ConfigType.CLASS, importance=Importance.HIGH,
             doc="Deserializer for values (same forms as key.deserializer).")
    for name in ("key.deserializer.encoding", "value.deserializer.encoding", "deserializer.encoding"):
        d.define(name, ConfigType.STRING, None, None, Importance.LOW,
                 "Charset of StringDeserializer (Kafka's StringDeserializer option; default UTF-8).")
    d.define("default.api.timeout.ms", ConfigType.INT, 60_000, Range.at_least(0), Importance.MEDIUM,
             "Default timeout of consumer APIs that do not take a timeout.")
    d.define(INTERCEPTOR_CLASSES_CONFIG, ConfigType.LIST, [], None, Importance.LOW,
             "Ordered list of ConsumerInterceptor classes (or instances).")
    d.define("exclude.internal.topics", ConfigType.BOOLEAN, True, None, Importance.MEDIUM,
             "Whether internal topics matching a subscribed pattern are excluded.")
    d.define("internal.leave.group.on.close", ConfigType.BOOLEAN, True, None, Importance.LOW,
             "Internal: send LeaveGroup on close (dynamic members).")
    d.define("internal.throw.on.fetch.stable.offset.unsupported", ConfigType.BOOLEAN, False, None,
             Importance.LOW, "Internal: fail when the broker cannot serve stable offsets.")
    d.define(ISOLATION_LEVEL_CONFIG, ConfigType.STRING, "read_uncommitted",
             CaseInsensitiveValidString.in_("read_committed", "read_uncommitted"), Importance.MEDIUM,
             "read_committed hides records of aborted and open transactions.")
    d.define("allow.auto.create.topics", ConfigType.BOOLEAN, True, None, Importance.MEDIUM,
             "Allow automatic topic creation when subscribing to or assigning a topic.")
    return d


CONSUMER_CONFIG_DEF: ConfigDef = _build_def()
"""The consumer's declared keys."""


class ConsumerConfig(AbstractConfig):
    """Parsed, validated consumer configuration. Immutable, thread-safe.

    ``ConsumerConfig(configs=None, *, key_deserializer=None, value_deserializer=None, custom_configs=None,
    **kwargs)``: ``configs`` and ``kwargs`` may use dotted or snake_case keys; the deserializer arguments fill
    ``key.deserializer`` / ``value.deserializer`` (Kafka's ``appendDeserializerToConfig``). ``custom_configs``
    reach plug-ins' ``configure`` unvalidated. ``values`` holds every key after post-processing
    (``client.id`` filled in, ``enable.auto.commit`` forced off without a group id, ``auto.offset.reset`` and
    ``isolation.level`` lower-cased).
    """

    CONFIG_DEF = CONSUMER_CONFIG_DEF

    def __init__(
        self,
        configs: Mapping[str, Any] | None = None,
        *,
        key_deserializer: Any = None,
        value_deserializer: Any = None,
        custom_configs: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self._custom: Mapping[str, Any] = MappingProxyType(dict(custom_configs or {}))
        merged = self.merge_originals(configs, kwargs)
        for name, deserializer in ((KEY_DESERIALIZER_CLASS_CONFIG, key_deserializer),
                                   (VALUE_DESERIALIZER_CLASS_CONFIG, value_deserializer)):
            if deserializer is not None:
                merged[name] = deserializer
            value = merged.get(name)
            if isinstance(value, str) and value.strip().lower() in _DESERIALIZER_ALIASES:
                merged[name] = _DESERIALIZER_ALIASES[value.strip().lower()]
        self._originals: Mapping[str, Any] = MappingProxyType(dict(merged))
        values = CONSUMER_CONFIG_DEF.parse(merged)
        post_process_reconnect_backoff_configs(merged, values)
        values[AUTO_OFFSET_RESET_CONFIG] = values[AUTO_OFFSET_RESET_CONFIG].lower()
        values[ISOLATION_LEVEL_CONFIG] = values[ISOLATION_LEVEL_CONFIG].lower()
        values[GROUP_PROTOCOL_CONFIG] = values[GROUP_PROTOCOL_CONFIG].lower()
        self._validate_group(merged, values)
        self._maybe_override_enable_auto_commit(merged, values)
        self._maybe_override_client_id(values)
        self._values: Mapping[str, Any] = MappingProxyType(values)

    @staticmethod
    def _validate_group(originals: Mapping[str, Any], values: dict[str, Any]) -> None:
        if values[GROUP_PROTOCOL_CONFIG] != "classic":
            raise ConfigError(f"Invalid value {values[GROUP_PROTOCOL_CONFIG]} for configuration "
                              f"{GROUP_PROTOCOL_CONFIG}: strom implements the classic group protocol only")
        if values[HEARTBEAT_INTERVAL_MS_CONFIG] >= values[SESSION_TIMEOUT_MS_CONFIG]:
            raise ConfigError(f"{HEARTBEAT_INTERVAL_MS_CONFIG} must be lower than {SESSION_TIMEOUT_MS_CONFIG} "
                              f"({values[HEARTBEAT_INTERVAL_MS_CONFIG]} >= {values[SESSION_TIMEOUT_MS_CONFIG]})")
        if values[GROUP_ID_CONFIG] is not None and not values[PARTITION_ASSIGNMENT_STRATEGY_CONFIG]:
            raise ConfigError(f"Invalid value [] for configuration {PARTITION_ASSIGNMENT_STRATEGY_CONFIG}: a "
                              f"consumer with a group.id needs at least one assignor")
        if values[GROUP_INSTANCE_ID_CONFIG] is not None and values[GROUP_ID_CONFIG] is None:
            raise ConfigError(f"{GROUP_INSTANCE_ID_CONFIG} requires {GROUP_ID_CONFIG} to be set")

    # Kafka's ConsumerConfig.maybeOverrideEnableAutoCommit
    @staticmethod
    def _maybe_override_enable_auto_commit(originals: Mapping[str, Any], values: dict[str, Any]) -> None:
        group_id = values[GROUP_ID_CONFIG]
        if group_id is None:
            if ENABLE_AUTO_COMMIT_CONFIG in originals and values[ENABLE_AUTO_COMMIT_CONFIG]:
                raise ConfigError(f"{ENABLE_AUTO_COMMIT_CONFIG} cannot be set to true when default group id "
                                  f"(null) is used.")
            values[ENABLE_AUTO_COMMIT_CONFIG] = False
        elif group_id == "":
            log.warning("Support for using the empty group id by consumers is deprecated and will be removed "
                        "in the next major release.")

    # Kafka's ConsumerConfig.maybeOverrideClientId
    @staticmethod
    def _maybe_override_client_id(values: dict[str, Any]) -> None:
        if values[CLIENT_ID_CONFIG]:
            return
        group_id = values[GROUP_ID_CONFIG]
        instance_id = values[GROUP_INSTANCE_ID_CONFIG]
        if instance_id is not None:
            values[CLIENT_ID_CONFIG] = f"consumer-{group_id}-{instance_id}"
        elif group_id is not None:
            values[CLIENT_ID_CONFIG] = f"consumer-{group_id}-{next(_CLIENT_ID_SEQUENCE)}"
        else:
            values[CLIENT_ID_CONFIG] = f"consumer-{next(_CLIENT_ID_SEQUENCE)}"

    # ----------------------------------------------------------------------------------------- accessors

    @property
    def group_id(self) -> str | None:
        return self._values[GROUP_ID_CONFIG]

    @property
    def group_instance_id(self) -> str | None:
        return self._values[GROUP_INSTANCE_ID_CONFIG]

    @property
    def read_committed(self) -> bool:
        return self._values[ISOLATION_LEVEL_CONFIG] == "read_committed"

    # ------------------------------------------------------------------------------ plug-in construction

    def plugin_configs(self) -> dict[str, Any]:
        """What plug-ins receive in ``configure``: the user's settings plus the effective ``client.id``."""
        out = dict(self._custom)
        out.update(self._originals)
        out[CLIENT_ID_CONFIG] = self._values[CLIENT_ID_CONFIG]
        return out

    def make_key_deserializer(self) -> Any:
        from strom.common.serialization import make_deserializer

        return make_deserializer(self._values[KEY_DESERIALIZER_CLASS_CONFIG], True, self.plugin_configs())

    def make_value_deserializer(self) -> Any:
        from strom.common.serialization import make_deserializer

        return make_deserializer(self._values[VALUE_DESERIALIZER_CLASS_CONFIG], False, self.plugin_configs())

    def make_interceptors(self) -> Any:
        from strom.consumer.interceptors import make_interceptors

        return make_interceptors(self._values[INTERCEPTOR_CLASSES_CONFIG], self.plugin_configs())

    def make_assignors(self) -> list[Any]:
        from strom.consumer.assignors import make_assignors

        return make_assignors(self._values[PARTITION_ASSIGNMENT_STRATEGY_CONFIG], self.plugin_configs())
