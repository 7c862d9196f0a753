"""Keys shared by the producer, consumer and admin clients, with Kafka 3.x defaults.

Kafka counterpart: ``org.apache.kafka.clients.CommonClientConfigs`` (+ ``SslConfigs``/``SaslConfigs`` key
names: ``security.protocol`` PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL; PEM key material; SASL PLAIN and
SCRAM-SHA-256/512. librdkafka's ``ssl.ca.location``, ``ssl.certificate.location``, ``ssl.key.location``,
``sasl.username`` and ``sasl.password`` are accepted too. Keys for what strom does not implement (GSSAPI,
OAUTHBEARER, JKS stores) are accepted so Java property files load; using them gives a clear error).

Thread-safety: module-level constants and pure functions.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from strom.config.config_def import (
    CaseInsensitiveValidString,
    ConfigDef,
    ConfigType,
    Importance,
    LambdaValidator,
    Range,
    ValidString,
    invalid_value,
)

__all__ = [
    "BOOTSTRAP_SERVERS_CONFIG",
    "CLIENT_ID_CONFIG",
    "CLIENT_DNS_LOOKUP_CONFIG",
    "METADATA_MAX_AGE_CONFIG",
    "SEND_BUFFER_CONFIG",
    "RECEIVE_BUFFER_CONFIG",
    "RECONNECT_BACKOFF_MS_CONFIG",
    "RECONNECT_BACKOFF_MAX_MS_CONFIG",
    "RETRY_BACKOFF_MS_CONFIG",
    "RETRY_BACKOFF_MAX_MS_CONFIG",
    "REQUEST_TIMEOUT_MS_CONFIG",
    "CONNECTIONS_MAX_IDLE_MS_CONFIG",
    "SOCKET_CONNECTION_SETUP_TIMEOUT_MS_CONFIG",
    "SOCKET_CONNECTION_SETUP_TIMEOUT_MAX_MS_CONFIG",
    "SECURITY_PROTOCOL_CONFIG",
    "SUPPORTED_SECURITY_PROTOCOLS",
    "define_common_client_configs",
    "define_security_configs",
    "parse_bootstrap_servers",
    "post_process_reconnect_backoff_configs",
]

BOOTSTRAP_SERVERS_CONFIG = "bootstrap.servers"
CLIENT_ID_CONFIG = "client.id"
CLIENT_DNS_LOOKUP_CONFIG = "client.dns.lookup"
METADATA_MAX_AGE_CONFIG = "metadata.max.age.ms"
SEND_BUFFER_CONFIG = "send.buffer.bytes"
RECEIVE_BUFFER_CONFIG = "receive.buffer.bytes"
RECONNECT_BACKOFF_MS_CONFIG = "reconnect.backoff.ms"
RECONNECT_BACKOFF_MAX_MS_CONFIG = "reconnect.backoff.max.ms"
RETRY_BACKOFF_MS_CONFIG = "retry.backoff.ms"
RETRY_BACKOFF_MAX_MS_CONFIG = "retry.backoff.max.ms"
REQUEST_TIMEOUT_MS_CONFIG = "request.timeout.ms"
CONNECTIONS_MAX_IDLE_MS_CONFIG = "connections.max.idle.ms"
SOCKET_CONNECTION_SETUP_TIMEOUT_MS_CONFIG = "socket.connection.setup.timeout.ms"
SOCKET_CONNECTION_SETUP_TIMEOUT_MAX_MS_CONFIG = "socket.connection.setup.timeout.max.ms"
SECURITY_PROTOCOL_CONFIG = "security.protocol"

SUPPORTED_SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
_KAFKA_SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")

# host:port, [ipv6]:port
_ADDRESS = re.compile(r"^\s*(?:\[(?P<v6>[0-9a-fA-F:.%a-zA-Z]+)\]|(?P<host>[^:\s\[\]]+)):(?P<port>\d+)\s*$")


def parse_bootstrap_servers(urls: list[str], config_name: str = BOOTSTRAP_SERVERS_CONFIG) -> list[tuple[str, int]]:
    """``["h1:9092", "[::1]:9093"]`` → ``[("h1", 9092), ("::1", 9093)]`` (Kafka's
    ``ClientUtils.parseAndValidateAddresses`` without DNS resolution, which the network layer does).

    Raises :class:`ConfigError` "Invalid url in bootstrap.servers: X" / "No resolvable bootstrap urls
    given in bootstrap.servers" like Kafka.
    """
    out: list[tuple[str, int]] = []
    for url in urls:
        if not isinstance(url, str):
            raise invalid_value(config_name, url, f"Invalid url in {config_name}: {url!r}")
        if not url.strip():
            continue
        match = _ADDRESS.match(url)
        port = int(match.group("port")) if match else -1
        if match is None or not 0 <= port <= 65535:
            raise invalid_value(config_name, urls, f"Invalid url in {config_name}: {url}")
        out.append((match.group("v6") or match.group("host"), port))
    if not out:
        raise invalid_value(config_name, urls, f"No resolvable bootstrap urls given in {config_name}")
    return out


def _check_bootstrap(value: Any) -> str | None:
    if value is None:
        return "entry must be non null"
    parse_bootstrap_servers(value)
    return None


def _check_security_protocol(value: Any) -> str | None:
    upper = value.upper() if isinstance(value, str) else value
    if upper in SUPPORTED_SECURITY_PROTOCOLS:
        return None
    if upper in _KAFKA_SECURITY_PROTOCOLS:
        return f"strom supports only {', '.join(SUPPORTED_SECURITY_PROTOCOLS)}; {upper} is not implemented"
    return "String must be one of (case insensitive): " + ", ".join(_KAFKA_SECURITY_PROTOCOLS)


def define_common_client_configs(
    config_def: ConfigDef,
    *,
    request_timeout_ms: int = 30_000,
    send_buffer_bytes: int = 128 * 1024,
    receive_buffer_bytes: int = 32 * 1024,
) -> ConfigDef:
    """Declare the shared client keys on ``config_def`` (client-specific defaults are parameters, as the
    producer/consumer/admin ``ConfigDef`` s differ only in those). Returns ``config_def``."""
    d = config_def
    d.define(BOOTSTRAP_SERVERS_CONFIG, ConfigType.LIST, validator=LambdaValidator(_check_bootstrap, "host:port list"),
             importance=Importance.HIGH,
             doc="host:port pairs used to establish the initial connection to the cluster.")
    d.define(CLIENT_DNS_LOOKUP_CONFIG, ConfigType.STRING, "use_all_dns_ips",
             ValidString.in_("use_all_dns_ips", "resolve_canonical_bootstrap_servers_only"), Importance.MEDIUM,
             "How the client uses DNS lookups for bootstrap and broker addresses.")
    d.define(CLIENT_ID_CONFIG, ConfigType.STRING, "", None, Importance.MEDIUM,
             "An id string passed to the server with requests; used in logs, metrics and the thread name.")
    d.define(METADATA_MAX_AGE_CONFIG, ConfigType.LONG, 5 * 60 * 1000, Range.at_least(0), Importance.LOW,
             "Period after which metadata is refreshed even without partition leadership changes.")
    d.define(SEND_BUFFER_CONFIG, ConfigType.INT, send_buffer_bytes, Range.at_least(-1), Importance.MEDIUM,
             "SO_SNDBUF of the sockets; -1 uses the OS default.")
    d.define(RECEIVE_BUFFER_CONFIG, ConfigType.INT, receive_buffer_bytes, Range.at_least(-1), Importance.MEDIUM,
             "SO_RCVBUF of the sockets; -1 uses the OS default.")
    d.define(RECONNECT_BACKOFF_MS_CONFIG, ConfigType.LONG, 50, Range.at_least(0), Importance.LOW,
             "Base wait before reconnecting to a host.")
    d.define(RECONNECT_BACKOFF_MAX_MS_CONFIG, ConfigType.LONG, 1000, Range.at_least(0), Importance.LOW,
             "Maximum reconnect backoff; the backoff grows exponentially up to it.")
    d.define(RETRY_BACKOFF_MS_CONFIG, ConfigType.LONG, 100, Range.at_least(0), Importance.LOW,
             "Wait before retrying a failed request.")
    d.define(RETRY_BACKOFF_MAX_MS_CONFIG, ConfigType.LONG, 1000, Range.at_least(0), Importance.LOW,
             "Maximum retry backoff; the backoff grows exponentially up to it.")
    d.define(REQUEST_TIMEOUT_MS_CONFIG, ConfigType.INT, request_timeout_ms, Range.at_least(0), Importance.MEDIUM,
             "How long the client waits for a response before retrying or failing the request.")
    d.define(CONNECTIONS_MAX_IDLE_MS_CONFIG, ConfigType.LONG, 9 * 60 * 1000, None, Importance.MEDIUM,
             "Idle connections are closed after this many ms.")
    d.define(SOCKET_CONNECTION_SETUP_TIMEOUT_MS_CONFIG, ConfigType.LONG, 10_000, Range.at_least(0),
             Importance.MEDIUM, "Time allowed to establish a socket connection.")
    d.define(SOCKET_CONNECTION_SETUP_TIMEOUT_MAX_MS_CONFIG, ConfigType.LONG, 30_000, Range.at_least(0),
             Importance.MEDIUM, "Maximum connection setup timeout; grows exponentially up to it.")
    d.define("metrics.sample.window.ms", ConfigType.LONG, 30_000, Range.at_least(0), Importance.LOW,
             "Window of a metrics sample.")
    d.define("metrics.num.samples", ConfigType.INT, 2, Range.at_least(1), Importance.LOW,
             "Number of samples kept to compute metrics.")
    d.define("metrics.recording.level", ConfigType.STRING, "INFO", ValidString.in_("INFO", "DEBUG", "TRACE"),
             Importance.LOW, "Highest recording level for metrics.")
    d.define("metric.reporters", ConfigType.LIST, [], None, Importance.LOW, "Metrics reporter classes.")
    d.define("auto.include.jmx.reporter", ConfigType.BOOLEAN, True, None, Importance.LOW,
             "Deprecated in Kafka 3.x; accepted and ignored (there is no JMX).")
    d.define("enable.metrics.push", ConfigType.BOOLEAN, True, None, Importance.LOW,
             "Push the client's metrics to the cluster when a broker asks for them (KIP-714).")
    d.define("metadata.recovery.strategy", ConfigType.STRING, "none",
             CaseInsensitiveValidString.in_("none", "rebootstrap"), Importance.LOW,
             "What to do when no broker the client knows of can be reached (KIP-899, Kafka 3.8+): 'rebootstrap' "
             "starts again from bootstrap.servers (producer and consumer); 'none' (Kafka 3.x's default) keeps "
             "trying the known brokers.")
    d.define(SECURITY_PROTOCOL_CONFIG, ConfigType.STRING, "PLAINTEXT",
             LambdaValidator(_check_security_protocol, "PLAINTEXT"), Importance.MEDIUM,
             "Protocol used to communicate with brokers: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL.")
    define_security_configs(d)
    return d


_SECURITY_KEYS: list[tuple[str, ConfigType, Any]] = [
    ("security.providers", ConfigType.STRING, None),
    ("ssl.protocol", ConfigType.STRING, "TLSv1.3"),
    ("ssl.provider", ConfigType.STRING, None),
    ("ssl.cipher.suites", ConfigType.LIST, None),
    ("ssl.enabled.protocols", ConfigType.LIST, ["TLSv1.2", "TLSv1.3"]),
    ("ssl.keystore.type", ConfigType.STRING, "PEM"),
    ("ssl.keystore.location", ConfigType.STRING, None),
    ("ssl.keystore.password", ConfigType.PASSWORD, None),
    ("ssl.keystore.key", ConfigType.PASSWORD, None),
    ("ssl.keystore.certificate.chain", ConfigType.PASSWORD, None),
    ("ssl.key.password", ConfigType.PASSWORD, None),
    ("ssl.truststore.type", ConfigType.STRING, "PEM"),
    ("ssl.truststore.location", ConfigType.STRING, None),
    ("ssl.truststore.password", ConfigType.PASSWORD, None),
    ("ssl.truststore.certificates", ConfigType.PASSWORD, None),
    ("ssl.keymanager.algorithm", ConfigType.STRING, "SunX509"),
    ("ssl.trustmanager.algorithm", ConfigType.STRING, "PKIX"),
    ("ssl.endpoint.identification.algorithm", ConfigType.STRING, "https"),
    ("ssl.secure.random.implementation", ConfigType.STRING, None),
    ("ssl.engine.factory.class", ConfigType.STRING, None),
    ("ssl.ca.location", ConfigType.STRING, None),
    ("ssl.certificate.location", ConfigType.STRING, None),
    ("ssl.key.location", ConfigType.STRING, None),
    ("sasl.username", ConfigType.STRING, None),
    ("sasl.password", ConfigType.PASSWORD, None),
    ("sasl.mechanism", ConfigType.STRING, "GSSAPI"),
    ("sasl.jaas.config", ConfigType.PASSWORD, None),
    ("sasl.client.callback.handler.class", ConfigType.STRING, None),
    ("sasl.login.callback.handler.class", ConfigType.STRING, None),
    ("sasl.login.class", ConfigType.STRING, None),
    ("sasl.kerberos.service.name", ConfigType.STRING, None),
    ("sasl.kerberos.kinit.cmd", ConfigType.STRING, "/usr/bin/kinit"),
    ("sasl.kerberos.ticket.renew.window.factor", ConfigType.DOUBLE, 0.8),
    ("sasl.kerberos.ticket.renew.jitter", ConfigType.DOUBLE, 0.05),
    ("sasl.kerberos.min.time.before.relogin", ConfigType.LONG, 60_000),
    ("sasl.login.refresh.window.factor", ConfigType.DOUBLE, 0.8),
    ("sasl.login.refresh.window.jitter", ConfigType.DOUBLE, 0.05),
    ("sasl.login.refresh.min.period.seconds", ConfigType.SHORT, 60),
    ("sasl.login.refresh.buffer.seconds", ConfigType.SHORT, 300),
    ("sasl.login.connect.timeout.ms", ConfigType.INT, None),
    ("sasl.login.read.timeout.ms", ConfigType.INT, None),
    ("sasl.login.retry.backoff.max.ms", ConfigType.LONG, 10_000),
    ("sasl.login.retry.backoff.ms", ConfigType.LONG, 100),
    ("sasl.oauthbearer.scope.claim.name", ConfigType.STRING, "scope"),
    ("sasl.oauthbearer.sub.claim.name", ConfigType.STRING, "sub"),
    ("sasl.oauthbearer.token.endpoint.url", ConfigType.STRING, None),
    ("sasl.oauthbearer.jwks.endpoint.url", ConfigType.STRING, None),
    ("sasl.oauthbearer.jwks.endpoint.refresh.ms", ConfigType.LONG, 3_600_000),
    ("sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms", ConfigType.LONG, 10_000),
    ("sasl.oauthbearer.jwks.endpoint.retry.backoff.ms", ConfigType.LONG, 100),
    ("sasl.oauthbearer.clock.skew.seconds", ConfigType.INT, 30),
    ("sasl.oauthbearer.expected.audience", ConfigType.LIST, None),
    ("sasl.oauthbearer.expected.issuer", ConfigType.STRING, None),
]


def define_security_configs(config_def: ConfigDef) -> ConfigDef:
    """Declare Kafka's SSL/SASL keys (and librdkafka's simple ones); see the module docstring."""
    for name, typ, default in _SECURITY_KEYS:
        config_def.define(name, typ, default, None, Importance.LOW,
                          "SSL/SASL setting, as in Kafka (read by strom.network.channel_builder).")
    return config_def


def post_process_reconnect_backoff_configs(originals: Mapping[str, Any], values: dict[str, Any]) -> None:
    """If the user set ``reconnect.backoff.ms`` but not ``reconnect.backoff.max.ms``, the max follows the
    base (Kafka's ``CommonClientConfigs.postProcessReconnectBackoffConfigs``). Mutates ``values``."""
    if RECONNECT_BACKOFF_MS_CONFIG in originals and RECONNECT_BACKOFF_MAX_MS_CONFIG not in originals:
        values[RECONNECT_BACKOFF_MAX_MS_CONFIG] = values[RECONNECT_BACKOFF_MS_CONFIG]
