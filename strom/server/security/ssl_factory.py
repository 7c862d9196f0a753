"""The TLS context of one listener: ``listener.name.<listener>.ssl.*`` overrides ``ssl.*`` (Kafka's rule)."""

from __future__ import annotations

import ssl

from strom.common.ssl_factory import build_ssl_context
from strom.server.broker_config import BrokerConfig

__all__ = ["server_ssl_context"]


def server_ssl_context(config: BrokerConfig, listener_name: str) -> ssl.SSLContext:
    return build_ssl_context(lambda key: config.listener_value(listener_name, key), server=True)
