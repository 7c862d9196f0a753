"""How this broker connects to the other brokers' inter-broker listener (Kafka: the client ``ChannelBuilder`` made
for ``inter.broker.listener.name`` / ``security.inter.broker.protocol``).

The inter-broker listener's security protocol decides the connection: TLS for SSL / SASL_SSL with the listener's
own ``ssl.*`` settings (``listener.name.<l>.ssl.*`` first) used client side — its truststore verifies the peer
(host name checked unless ``ssl.endpoint.identification.algorithm`` is empty) and its keystore is presented when
the peer asks for a client certificate — and, for SASL_PLAINTEXT / SASL_SSL, ``sasl.mechanism.inter.broker.protocol``
(Kafka's default GSSAPI is refused: strom has PLAIN and SCRAM) with the ``username`` / ``password`` of
``listener.name.<l>.<mechanism>.sasl.jaas.config`` (else ``sasl.jaas.config``), Kafka's place for the broker's
own credentials. The brokers then act as that principal, which ``super.users`` (or CLUSTER_ACTION ACLs) must
allow. Every setting is checked when the broker starts (ConfigError naming it). A new keystore or truststore of
the inter-broker listener (a dynamic broker config) replaces the client context for connections made afterwards
(:meth:`reload_ssl_context`), as Kafka reconfigures its inter-broker channel builders. Thread-safe.
"""

from __future__ import annotations

import ssl
from typing import TYPE_CHECKING

from strom.common.errors import ConfigError
from strom.common.ssl_factory import build_ssl_context
from strom.security.jaas import parse_jaas_config
from strom.security.plain import PlainClient
from strom.security.sasl import SaslClient
from strom.security.scram import SCRAM_MECHANISMS, ScramClient

if TYPE_CHECKING:
    from strom.server.broker_config import BrokerConfig

__all__ = ["InterBrokerSecurity"]

MECHANISM_KEY = "sasl.mechanism.inter.broker.protocol"


class InterBrokerSecurity:
    def __init__(self, protocol: str, ssl_context: ssl.SSLContext | None, mechanism: str | None = None,
                 username: str | None = None, password: str | None = None) -> None:
        self.protocol = protocol
        self.ssl_context = ssl_context
        self.mechanism = mechanism
        self.username = username
        self._password = password

    def __repr__(self) -> str:  # never the password
        return f"InterBrokerSecurity({self.protocol}, mechanism={self.mechanism}, user={self.username})"

    def reload_ssl_context(self, config: BrokerConfig) -> bool:
        """Build the TLS client context again from ``config`` (the inter-broker listener's ``ssl.*`` settings, its
        dynamic ones included); connections made afterwards use it, open ones keep theirs. Whether there was one
        to replace (ConfigError when the new settings do not load: the current context stays)."""
        if self.ssl_context is None:
            return False
        name = config.inter_broker_listener_name
        try:
            self.ssl_context = build_ssl_context(lambda key: config.listener_value(name, key), server=False)
        except ConfigError as e:
            raise ConfigError(f"inter-broker listener {name}: {e}") from None
        return True

    @property
    def uses_sasl(self) -> bool:
        return self.mechanism is not None

    def new_sasl_client(self) -> SaslClient:
        assert self.mechanism is not None and self.username is not None and self._password is not None
        if self.mechanism == "PLAIN":
            return PlainClient(self.username, self._password)
        return ScramClient(SCRAM_MECHANISMS[self.mechanism], self.username, self._password)

    @classmethod
    def from_config(cls, config: BrokerConfig) -> InterBrokerSecurity | None:
        """``None`` for a PLAINTEXT inter-broker listener (plain TCP, nothing to configure)."""
        name = config.inter_broker_listener_name
        listener = next((lst for lst in config.listeners if lst.name == name), None)
        protocol = listener.security_protocol if listener is not None else "PLAINTEXT"
        if protocol == "PLAINTEXT":
            return None
        ctx = None
        if protocol in ("SSL", "SASL_SSL"):
            try:
                ctx = build_ssl_context(lambda key: config.listener_value(name, key), server=False)
            except ConfigError as e:
                raise ConfigError(f"inter-broker listener {name}: {e}") from None
        if protocol == "SSL":
            return cls(protocol, ctx)
        mechanism = str(config.values[MECHANISM_KEY]).upper()
        if mechanism != "PLAIN" and mechanism not in SCRAM_MECHANISMS:
            raise ConfigError(f"Invalid value {mechanism} for configuration {MECHANISM_KEY}: strom's brokers "
                              f"authenticate to each other with PLAIN, {', '.join(SCRAM_MECHANISMS)} (inter-broker "
                              f"listener {name}: {protocol})")
        enabled = [m.strip().upper() for m in str(config.listener_value(name, "sasl.enabled.mechanisms") or "")
                   .split(",") if m.strip()]
        if mechanism not in enabled:
            raise ConfigError(f"{MECHANISM_KEY} must be included in sasl.enabled.mechanisms when SASL is used for "
                              f"inter-broker communication ({mechanism} is not in {','.join(enabled) or 'none'} "
                              f"of listener {name})")
        prefixed = f"listener.name.{name.lower()}.{mechanism.lower()}.sasl.jaas.config"
        key = prefixed if prefixed in config.originals else "sasl.jaas.config"
        text = config.originals.get(key)
        options = parse_jaas_config(str(getattr(text, "value", text)), key).options if text else {}
        username, password = options.get("username"), options.get("password")
        if not username or password is None:
            raise ConfigError(f"Missing configuration {prefixed}: the broker's own credentials for inter-broker "
                              f"{mechanism} on listener {name} go in its login module as username=\"...\" "
                              "password=\"...\"")
        return cls(protocol, ctx, mechanism, username, password)
