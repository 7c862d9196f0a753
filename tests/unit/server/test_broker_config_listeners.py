"""Listener configuration parsed and validated as Kafka's KafkaConfig does it."""

from __future__ import annotations

import pytest

from strom.common.errors import ConfigError
from strom.server.broker_config import BrokerConfig, Listener


def test_named_listeners_take_their_protocol_from_the_map() -> None:
    c = BrokerConfig({
        "listeners": "PLAINTEXT://127.0.0.1:9092,internal://10.0.0.1:9093,EXTERNAL://[::1]:9094",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_SSL,EXTERNAL:SSL",
    })
    assert c.listeners == [
        Listener("PLAINTEXT", "127.0.0.1", 9092, "PLAINTEXT"),
        Listener("INTERNAL", "10.0.0.1", 9093, "SASL_SSL"),
        Listener("EXTERNAL", "::1", 9094, "SSL"),
    ]
    assert c.advertised_listeners == c.listeners
    assert c.inter_broker_listener_name == "PLAINTEXT"
    assert c.listener("internal").uses_sasl and c.listener("internal").uses_ssl
    assert not c.listener("EXTERNAL").uses_sasl


def test_default_map_covers_the_four_protocol_names() -> None:
    c = BrokerConfig({"listeners": "SSL://h:1,SASL_PLAINTEXT://h:2,PLAINTEXT://h:3"})
    assert [lst.security_protocol for lst in c.listeners] == ["SSL", "SASL_PLAINTEXT", "PLAINTEXT"]


def test_inter_broker_listener_by_name_or_by_protocol() -> None:
    listeners = {"listeners": "CLIENT://h:1,REPL://h:2", "listener.security.protocol.map": "CLIENT:SSL,REPL:PLAINTEXT"}
    assert BrokerConfig({**listeners, "inter.broker.listener.name": "repl"}).inter_broker_listener_name == "REPL"
    c = BrokerConfig({"listeners": "SSL://h:1,PLAINTEXT://h:2", "security.inter.broker.protocol": "SSL"})
    assert c.inter_broker_listener_name == "SSL"


def test_listener_prefixed_values_override_the_plain_key() -> None:
    c = BrokerConfig({"listeners": "PLAINTEXT://h:1,SSL://h:2", "ssl.client.auth": "requested",
                      "listener.name.ssl.ssl.client.auth": "required"})
    assert c.listener_value("SSL", "ssl.client.auth") == "required"
    assert c.listener_value("PLAINTEXT", "ssl.client.auth") == "requested"


@pytest.mark.parametrize(("props", "message"), [
    ({"listeners": "FOO://h:1"}, "no security protocol defined for listener FOO"),
    ({"listeners": "PLAINTEXT://h:1,plaintext://h:2"}, "each listener must have a different name"),
    ({"listeners": "PLAINTEXT://h:1,SSL://h:1"}, "each listener must have a different port"),
    ({"listeners": "PLAINTEXT://h:70000"}, "port 70000 out of range"),
    ({"listeners": "PLAINTEXT:/h:1"}, "expected LISTENER_NAME://host:port"),
    ({"listeners": "SSL://h:1"}, "inter.broker.listener.name must be a listener name defined in advertised.listeners"),
    ({"listeners": "PLAINTEXT://h:1", "advertised.listeners": "SSL://h:1"}, "listener SSL is not defined in listeners"),
    ({"listeners": "PLAINTEXT://0.0.0.0:1"}, "set advertised.listeners to an address clients can reach"),
    ({"listener.security.protocol.map": "PLAINTEXT:TLS"}, "unknown security protocol TLS"),
    ({"listener.security.protocol.map": "PLAINTEXT"}, "expected LISTENER_NAME:SECURITY_PROTOCOL"),
    ({"inter.broker.listener.name": "PLAINTEXT", "security.inter.broker.protocol": "PLAINTEXT"},
     "Only one of inter.broker.listener.name and security.inter.broker.protocol"),
    ({"security.inter.broker.protocol": "TLS"}, "security.inter.broker.protocol"),
    ({"ssl.client.auth": "maybe"}, "ssl.client.auth"),
])
def test_bad_listener_settings_name_the_problem(props: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        BrokerConfig(props)
