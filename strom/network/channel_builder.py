"""What a client connection is made of for its ``security.protocol`` (Kafka's ``ChannelBuilders`` /
``SaslChannelBuilder`` / ``SslChannelBuilder``): the transport (plain TCP or TLS) and, for SASL_*, the SASL
authenticator with the configured mechanism and credentials.

Credentials come from ``sasl.jaas.config`` (``PlainLoginModule`` / ``ScramLoginModule`` with ``username`` and
``password``) or from librdkafka's ``sasl.username`` / ``sasl.password``. Immutable once built; thread-safe.
"""

from __future__ import annotations

import selectors
import socket
import ssl
from collections.abc import Mapping
from typing import Any

from strom.common.errors import ConfigError
from strom.common.ssl_factory import build_ssl_context
from strom.network.sasl_authenticator import SaslClientAuthenticator
from strom.network.transport import PlaintextTransport, SslTransport, Transport
from strom.security.jaas import parse_jaas_config
from strom.security.plain import PlainClient
from strom.security.sasl import SUPPORTED_MECHANISMS, SaslClient
from strom.security.scram import SCRAM_MECHANISMS, ScramClient

__all__ = ["ClientChannelBuilder", "PLAINTEXT_CHANNELS"]


def _secret(value: Any) -> str | None:
    if value is None:
        return None
    return str(getattr(value, "value", value))


class ClientChannelBuilder:
    def __init__(self, security_protocol: str = "PLAINTEXT", ssl_context: ssl.SSLContext | None = None,
                 sasl_mechanism: str | None = None, sasl_username: str | None = None,
                 sasl_password: str | None = None, client_id: str | None = None) -> None:
        self.security_protocol = security_protocol.upper()
        self.ssl_context = ssl_context
        self.sasl_mechanism = sasl_mechanism
        self._username = sasl_username
        self._password = sasl_password
        self.client_id = client_id

    def __repr__(self) -> str:  # never the password
        return (f"ClientChannelBuilder({self.security_protocol}, mechanism={self.sasl_mechanism}, "
                f"user={self._username})")

    @property
    def uses_ssl(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    @classmethod
    def from_config(cls, values: Mapping[str, Any]) -> ClientChannelBuilder:
        """From a client's parsed config (``security.protocol``, ``ssl.*``, ``sasl.*``); a missing or bad
        setting raises :class:`ConfigError` naming it."""
        protocol = str(values.get("security.protocol") or "PLAINTEXT").upper()
        client_id = values.get("client.id")
        ctx = build_ssl_context(values.get, server=False) if protocol in ("SSL", "SASL_SSL") else None
        if protocol not in ("SASL_PLAINTEXT", "SASL_SSL"):
            return cls(protocol, ctx, client_id=client_id)
        mechanism = str(values.get("sasl.mechanism") or "GSSAPI").upper()
        if mechanism not in SUPPORTED_MECHANISMS:
            raise ConfigError(f"Invalid value {mechanism} for configuration sasl.mechanism: strom supports "
                              f"{', '.join(SUPPORTED_MECHANISMS)}")
        username = values.get("sasl.username")
        password = _secret(values.get("sasl.password"))
        jaas = _secret(values.get("sasl.jaas.config"))
        if jaas:
            options = parse_jaas_config(jaas).options
            username = options.get("username", username)
            password = options.get("password", password)
        if not username or password is None:
            raise ConfigError(f"security.protocol={protocol} with sasl.mechanism={mechanism} needs credentials: set "
                              "sasl.jaas.config (username=\"...\" password=\"...\") or sasl.username and "
                              "sasl.password")
        return cls(protocol, ctx, mechanism, str(username), password, client_id)

    def new_sasl_client(self) -> SaslClient:
        assert self.sasl_mechanism is not None and self._username is not None and self._password is not None
        if self.sasl_mechanism == "PLAIN":
            return PlainClient(self._username, self._password)
        return ScramClient(SCRAM_MECHANISMS[self.sasl_mechanism], self._username, self._password)

    def build(self, node: Any, sock: socket.socket, sel: selectors.BaseSelector, interest: int, attachment: Any,
              host: str | None) -> tuple[Transport, SaslClientAuthenticator | None]:
        if self.uses_ssl:
            assert self.ssl_context is not None
            transport: Transport = SslTransport(sock, sel, interest, attachment, self.ssl_context,
                                                host if self.ssl_context.check_hostname else None)
        else:
            transport = PlaintextTransport(sock, sel, interest, attachment)
        authenticator = (SaslClientAuthenticator(self.new_sasl_client(), self.client_id, node)
                         if self.uses_sasl else None)
        return transport, authenticator


PLAINTEXT_CHANNELS = ClientChannelBuilder()
