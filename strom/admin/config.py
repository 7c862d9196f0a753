"""Admin client configuration: every key of Kafka 3.x's ``AdminClientConfig`` with the Java defaults.

Kafka counterpart: ``org.apache.kafka.clients.admin.AdminClientConfig`` (common client keys from
``CommonClientConfigs`` plus ``default.api.timeout.ms`` and ``retries``; admin-specific defaults:
``send.buffer.bytes=128KiB``, ``receive.buffer.bytes=64KiB``, ``connections.max.idle.ms=300000``).
``client.id`` defaults to ``adminclient-N`` as in ``KafkaAdminClient.generateClientId``.

Usage::

    cfg = AdminClientConfig({"bootstrap.servers": "localhost:9092"}, request_timeout_ms=5000)
    cfg["request.timeout.ms"]          # 5000

Thread-safety: immutable after construction.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from strom.config.abstract_config import AbstractConfig
from strom.config.common_client_configs import (
    CLIENT_ID_CONFIG,
    CONNECTIONS_MAX_IDLE_MS_CONFIG,
    define_common_client_configs,
    post_process_reconnect_backoff_configs,
)
from strom.config.config_def import INT_MAX, ConfigDef, ConfigType, Importance, Range

__all__ = ["AdminClientConfig", "ADMIN_CONFIG_DEF", "DEFAULT_API_TIMEOUT_MS_CONFIG", "RETRIES_CONFIG"]

DEFAULT_API_TIMEOUT_MS_CONFIG = "default.api.timeout.ms"
RETRIES_CONFIG = "retries"


def _build() -> ConfigDef:
    d = define_common_client_configs(ConfigDef(), request_timeout_ms=30_000, send_buffer_bytes=128 * 1024,
                                     receive_buffer_bytes=64 * 1024)
    d.undefine(CONNECTIONS_MAX_IDLE_MS_CONFIG)
    d.define(CONNECTIONS_MAX_IDLE_MS_CONFIG, ConfigType.LONG, 5 * 60 * 1000, None, Importance.MEDIUM,
             "Idle connections are closed after this many ms.")
    d.define(DEFAULT_API_TIMEOUT_MS_CONFIG, ConfigType.INT, 60_000, Range.at_least(0), Importance.MEDIUM,
             "Timeout of admin operations that are not given one explicitly.")
    d.define(RETRIES_CONFIG, ConfigType.INT, INT_MAX, Range.between(0, INT_MAX), Importance.LOW,
             "How many times a failed call is retried (within its timeout).")
    return d


ADMIN_CONFIG_DEF = _build()
_CLIENT_IDS = itertools.count(1)


class AdminClientConfig(AbstractConfig):
    """Parsed, validated admin configuration (Kafka's ``AdminClientConfig``). Immutable, thread-safe.

    Keys may be dotted (``request.timeout.ms``) or snake_case keywords (``request_timeout_ms``). Unknown keys
    raise :class:`ConfigError` naming the key.
    """

    CONFIG_DEF = ADMIN_CONFIG_DEF

    def __init__(self, configs: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        merged = self.merge_originals(configs, kwargs)
        self._originals: Mapping[str, Any] = MappingProxyType(dict(merged))
        values = ADMIN_CONFIG_DEF.parse(merged)
        post_process_reconnect_backoff_configs(merged, values)
        if not values[CLIENT_ID_CONFIG]:
            values[CLIENT_ID_CONFIG] = f"adminclient-{next(_CLIENT_IDS)}"
        self._values: Mapping[str, Any] = MappingProxyType(values)

