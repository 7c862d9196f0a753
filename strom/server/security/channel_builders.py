"""One :class:`~strom.server.socket_server.SocketServer` per configured listener, with the TLS context,
SASL authenticator and principal mapping its security protocol needs (Kafka's ``ChannelBuilders``).

The broker calls :func:`build_socket_servers` once with its dispatcher, then ``start()`` / ``stop()`` on each.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from strom.common.time import SYSTEM_TIME, Time
from strom.server.broker_config import BrokerConfig, Listener
from strom.server.connection_quotas import ConnectionQuotas
from strom.server.security.credentials import CredentialStore
from strom.server.security.principal import KafkaPrincipal, SslPrincipalMapper, distinguished_name
from strom.server.socket_server import Dispatcher, SocketServer

__all__ = ["build_socket_servers", "build_socket_server"]


def build_socket_servers(config: BrokerConfig, dispatch: Dispatcher, *, time: Time = SYSTEM_TIME,
                         data_dir: str | Path | None = None, credentials: CredentialStore | None = None,
                         connection_rate: Callable[[str], float | None] | None = None) -> list[SocketServer]:
    """A socket server for every listener in ``listeners``, sharing one set of connection quotas. SCRAM reads
    ``credentials`` (default: the file store in ``data_dir`` / the first log dir); pass the same store to the
    AlterUserScramCredentials handler so new users can log in at once. ``connection_rate(ip)`` is the IP's
    ``connection_creation_rate`` quota (the client quota managers')."""
    quotas = ConnectionQuotas.from_config(config, connection_rate, time)
    return [build_socket_server(config, lst, dispatch, quotas, time=time, data_dir=data_dir, credentials=credentials)
            for lst in config.listeners]


def build_socket_server(config: BrokerConfig, listener: Listener, dispatch: Dispatcher, quotas: ConnectionQuotas,
                        *, time: Time = SYSTEM_TIME, data_dir: str | Path | None = None,
                        credentials: CredentialStore | None = None) -> SocketServer:
    kwargs: dict[str, Any] = {"time": time}
    if listener.uses_ssl:
        from strom.server.security.ssl_factory import server_ssl_context

        kwargs["ssl_context"] = server_ssl_context(config, listener.name)
        mapper = SslPrincipalMapper(str(config.listener_value(listener.name, "ssl.principal.mapping.rules",
                                                              "DEFAULT")))
        kwargs["principal_from_cert"] = lambda cert: KafkaPrincipal("User", mapper.name(distinguished_name(cert)))
    if listener.uses_sasl:
        from strom.server.security.sasl_server import authenticator_factory

        kwargs["authenticator_factory"] = authenticator_factory(config, listener.name, time=time, data_dir=data_dir,
                                                                credentials=credentials)
    server = SocketServer.from_config(listener, dispatch, config, quotas, **kwargs)
    server.inter_broker = listener.name == getattr(config, "inter_broker_listener_name", None)
    return server
