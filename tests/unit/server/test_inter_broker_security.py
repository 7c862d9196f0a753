"""InterBrokerSecurity.from_config: what a broker connects to its peers with, and the settings it refuses at start
(the cluster tests in tests/cluster/test_inter_broker_security.py show the connections themselves)."""

from __future__ import annotations

import socket
import ssl
import threading
from pathlib import Path

import pytest

from strom.common.errors import ConfigError
from strom.server.broker_config import BrokerConfig
from strom.server.security.inter_broker import InterBrokerSecurity
from strom.testing.certs import Pki, first_certificate_der, make_pki

pytestmark = pytest.mark.unit

SCRAM_JAAS = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="broker" password="pw";'


def config(**props: str) -> BrokerConfig:
    return BrokerConfig({"listeners": "SASL_PLAINTEXT://127.0.0.1:9093", "inter.broker.listener.name": "SASL_PLAINTEXT",
                         "sasl.enabled.mechanisms": "SCRAM-SHA-256", **{k.replace("_", "."): v for k, v in props.items()}})


def test_plaintext_needs_nothing() -> None:
    assert InterBrokerSecurity.from_config(BrokerConfig({"listeners": "PLAINTEXT://127.0.0.1:9092"})) is None


def test_scram_credentials_from_the_listener_and_mechanism_prefixed_jaas() -> None:
    c = BrokerConfig({"listeners": "SASL_PLAINTEXT://127.0.0.1:9093", "inter.broker.listener.name": "SASL_PLAINTEXT",
                      "sasl.enabled.mechanisms": "SCRAM-SHA-256",
                      "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-256",
                      "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": SCRAM_JAAS})
    sec = InterBrokerSecurity.from_config(c)
    assert sec is not None and (sec.protocol, sec.mechanism, sec.username, sec.ssl_context) == (
        "SASL_PLAINTEXT", "SCRAM-SHA-256", "broker", None)
    assert "pw" not in repr(sec)
    assert sec.new_sasl_client().initial_response().startswith(b"n,,n=broker,r=")


def test_kafkas_default_gssapi_is_refused_with_the_key_named() -> None:
    with pytest.raises(ConfigError, match="Invalid value GSSAPI for configuration sasl.mechanism.inter.broker.protocol"):
        InterBrokerSecurity.from_config(config())


def test_the_mechanism_must_be_enabled_on_the_listener() -> None:
    c = BrokerConfig({"listeners": "SASL_PLAINTEXT://127.0.0.1:9093", "inter.broker.listener.name": "SASL_PLAINTEXT",
                      "sasl.enabled.mechanisms": "SCRAM-SHA-256", "sasl.mechanism.inter.broker.protocol": "PLAIN"})
    with pytest.raises(ConfigError, match="must be included in sasl.enabled.mechanisms"):
        InterBrokerSecurity.from_config(c)


def test_missing_broker_credentials_name_the_key() -> None:
    c = BrokerConfig({"listeners": "SASL_PLAINTEXT://127.0.0.1:9093", "inter.broker.listener.name": "SASL_PLAINTEXT",
                      "sasl.enabled.mechanisms": "SCRAM-SHA-256",
                      "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-256"})
    with pytest.raises(ConfigError, match="listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config"):
        InterBrokerSecurity.from_config(c)


def test_ssl_uses_the_listeners_truststore_and_keystore(tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    c = BrokerConfig({"listeners": "SSL://127.0.0.1:9093", "inter.broker.listener.name": "SSL",
                      "listener.name.ssl.ssl.keystore.location": str(pki.broker_keystore),
                      "listener.name.ssl.ssl.truststore.location": str(pki.ca)})
    sec = InterBrokerSecurity.from_config(c)
    assert sec is not None and sec.ssl_context is not None and sec.ssl_context.check_hostname
    assert not sec.uses_sasl
    missing = BrokerConfig({"listeners": "SSL://127.0.0.1:9093", "inter.broker.listener.name": "SSL",
                            "ssl.truststore.location": str(tmp_path / "nowhere.pem")})
    with pytest.raises(ConfigError, match="inter-broker listener SSL: Cannot read the SSL truststore"):
        InterBrokerSecurity.from_config(missing)


def _client_cert_presented(ctx: ssl.SSLContext, server_pki: Pki, client_cas: Path) -> bytes:
    """The certificate ``ctx`` presents to a TLS server that requires one (DER), over a loopback handshake."""
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(str(server_pki.broker_keystore))
    server_ctx.load_verify_locations(str(client_cas))
    server_ctx.verify_mode = ssl.CERT_REQUIRED
    seen: list[bytes] = []
    with socket.create_server(("127.0.0.1", 0)) as listening:
        port = listening.getsockname()[1]

        def serve() -> None:
            conn, _ = listening.accept()
            with server_ctx.wrap_socket(conn, server_side=True) as tls:
                der = tls.getpeercert(binary_form=True)
                seen.append(der or b"")

        t = threading.Thread(target=serve)
        t.start()
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
                ctx.wrap_socket(raw, server_hostname="localhost"):
            pass
        t.join(10)
    return seen[0]


def test_a_new_keystore_of_the_inter_broker_listener_is_presented_on_new_connections(tmp_path: Path) -> None:
    """A dynamic keystore change of the inter-broker listener reaches the broker's client side too (Kafka
    reconfigures its inter-broker channel builders): the next connection presents the new certificate."""
    first, second = make_pki(tmp_path / "first"), make_pki(tmp_path / "second")
    cas = tmp_path / "cas.pem"
    cas.write_bytes(first.ca.read_bytes() + second.ca.read_bytes())
    props = {"listeners": "SSL://127.0.0.1:9093", "inter.broker.listener.name": "SSL",
             "listener.name.ssl.ssl.keystore.location": str(first.broker_keystore),
             "listener.name.ssl.ssl.truststore.location": str(cas)}
    sec = InterBrokerSecurity.from_config(BrokerConfig(props))
    assert sec is not None and sec.ssl_context is not None
    before = sec.ssl_context
    assert _client_cert_presented(sec.ssl_context, first, cas) == first_certificate_der(first.broker_cert)
    assert sec.reload_ssl_context(BrokerConfig({**props, "listener.name.ssl.ssl.keystore.location":
                                                str(second.broker_keystore)}))
    assert _client_cert_presented(sec.ssl_context, first, cas) == first_certificate_der(second.broker_cert)
    with pytest.raises(ConfigError, match="inter-broker listener SSL"):
        sec.reload_ssl_context(BrokerConfig({**props, "listener.name.ssl.ssl.keystore.location":
                                             str(tmp_path / "missing.pem")}))
    assert sec.ssl_context is not before and _client_cert_presented(sec.ssl_context, first, cas) == first_certificate_der(
        second.broker_cert)  # a refused reload keeps the current context

