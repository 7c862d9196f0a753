"""strom's clients over SSL, SASL_PLAINTEXT and SASL_SSL against the broker's listeners (real process, one
listener per protocol); the principal the broker saw comes back as the cluster id (see socket_server_app)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from strom.admin.admin_client import AdminClient
from strom.common.errors import KafkaTimeoutError
from strom.security.sasl import SslAuthenticationError
from strom.security.scram import SCRAM_MECHANISMS, ScramCredential
from strom.server.security.credentials import CREDENTIALS_FILE, FileCredentialStore
from strom.testing.certs import Pki
from tests.integration.listener_process import ListenerProcess

ALICE, BOB = "alice-Secret-1", "bob-Secret-2"


@pytest.fixture(scope="module")
def server(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ListenerProcess]:
    data = tmp_path_factory.mktemp("data")
    store = FileCredentialStore(Path(data) / CREDENTIALS_FILE)
    for name, mech in SCRAM_MECHANISMS.items():
        store.upsert("bob", name, ScramCredential.generate(mech, BOB))
    p = ListenerProcess({
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,MTLS://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,"
                     "SASL_SSL://localhost:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,"
                                          "SASL_SSL:SASL_SSL",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(pki.broker_keystore),
        "ssl.truststore.location": str(pki.ca),
        "ssl.client.auth": "requested",
        "listener.name.mtls.ssl.client.auth": "required",
        "listener.name.mtls.ssl.principal.mapping.rules": "RULE:^CN=(.*?),O=.*$/$1/L,DEFAULT",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "sasl.jaas.config": f'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="{ALICE}";',
    }, data_dir=str(data)).start()
    yield p
    p.stop()


def _principal(server: ListenerProcess, listener: str, **config: Any) -> str:
    host = "localhost" if listener == "SASL_SSL" else "127.0.0.1"
    admin = AdminClient({"bootstrap.servers": f"{host}:{server.port(listener)}", "request.timeout.ms": 10000,
                         "default.api.timeout.ms": 15000, **config})
    try:
        return str(admin.describe_cluster().cluster_id().result(20))
    finally:
        admin.close(5)


def test_each_protocol_gives_its_principal(server: ListenerProcess, pki: Pki) -> None:
    assert _principal(server, "PLAINTEXT") == "User:ANONYMOUS"
    tls = {"ssl.ca.location": str(pki.ca)}
    assert _principal(server, "SSL", **{"security.protocol": "SSL", **tls}) == "User:ANONYMOUS"
    assert _principal(server, "SSL", **{"security.protocol": "SSL", "ssl.truststore.location": str(pki.ca),
                                        "ssl.keystore.location": str(pki.client_keystore)}) == "User:CN=alice,O=strom"
    assert _principal(server, "MTLS", **{"security.protocol": "SSL", **tls, "ssl.certificate.location":
                                         str(pki.client_cert), "ssl.key.location": str(pki.client_key)}) == "User:alice"
    assert _principal(server, "SASL_PLAINTEXT", **{"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                                                   "sasl.username": "alice", "sasl.password": ALICE}) == "User:alice"
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        jaas = f'org.apache.kafka.common.security.scram.ScramLoginModule required username="bob" password="{BOB}";'
        assert _principal(server, "SASL_SSL", **{"security.protocol": "SASL_SSL", **tls, "sasl.mechanism": mechanism,
                                                 "sasl.jaas.config": jaas}) == "User:bob"


@pytest.mark.parametrize(("listener", "config", "error"), [
    ("SASL_PLAINTEXT", {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": "alice",
                        "sasl.password": "wrong"}, "Invalid username or password"),
    ("SASL_SSL", {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "mallory",
                  "sasl.password": BOB, "ssl.ca.location": "CA"}, "invalid credentials"),
    ("SSL", {"security.protocol": "SSL", "ssl.ca.location": "ROGUE"}, "certificate verify failed"),
    ("MTLS", {"security.protocol": "SSL", "ssl.ca.location": "CA"}, "SSL handshake failed"),
    ("MTLS", {"security.protocol": "SSL", "ssl.ca.location": "CA", "ssl.certificate.location": "ROGUE_CERT",
              "ssl.key.location": "ROGUE_KEY"}, "SSL handshake failed"),
])
def test_refusals_surface_as_authentication_errors(server: ListenerProcess, pki: Pki, listener: str,
                                                    config: dict[str, str], error: str) -> None:
    paths = {"CA": str(pki.ca), "ROGUE": str(pki.rogue_ca), "ROGUE_CERT": str(pki.rogue_client_cert),
             "ROGUE_KEY": str(pki.rogue_client_key)}
    config = {k: paths.get(v, v) for k, v in config.items()}
    with pytest.raises(Exception) as e:
        _principal(server, listener, **config)
    chain = []
    exc: BaseException | None = e.value
    while exc is not None:
        chain.append(f"{type(exc).__name__}: {exc}")
        exc = exc.__cause__ or exc.__context__
    assert any("Authentication" in c and error in c for c in chain), chain
    for secret in ("wrong", BOB):
        assert secret not in server.read_log()


def test_wrong_protocol_on_a_port_is_dropped_and_others_are_served(server: ListenerProcess, pki: Pki) -> None:
    with pytest.raises(KafkaTimeoutError):  # plaintext bytes on the TLS port: the broker drops them
        _principal(server, "SSL", **{"default.api.timeout.ms": 3000, "request.timeout.ms": 2000})
    with pytest.raises(SslAuthenticationError):  # a TLS handshake on the plaintext port
        _principal(server, "PLAINTEXT", **{"security.protocol": "SSL", "ssl.ca.location": str(pki.ca),
                                           "default.api.timeout.ms": 3000, "request.timeout.ms": 2000})
    assert _principal(server, "SSL", **{"security.protocol": "SSL", "ssl.ca.location": str(pki.ca)}) == \
        "User:ANONYMOUS"
    assert _principal(server, "PLAINTEXT") == "User:ANONYMOUS"


def test_client_replaces_connections_before_the_sasl_session_ends(pki: Pki,
                                                                  tmp_path_factory: pytest.TempPathFactory) -> None:
    """KIP-368: with connections.max.reauth.ms the broker closes a connection whose session expired; strom's
    client stops using it before that and reconnects, so every call succeeds across several session lifetimes."""
    import time

    p = ListenerProcess({
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN", "connections.max.reauth.ms": "1000",
        "sasl.jaas.config": f'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="{ALICE}";',
    }, data_dir=str(tmp_path_factory.mktemp("reauth"))).start()
    admin = AdminClient({"bootstrap.servers": p.bootstrap("SASL_PLAINTEXT"), "security.protocol": "SASL_PLAINTEXT",
                         "sasl.mechanism": "PLAIN", "sasl.username": "alice", "sasl.password": ALICE,
                         "default.api.timeout.ms": 10000, "retries": 0})
    try:
        deadline = time.monotonic() + 3.5
        calls = 0
        while time.monotonic() < deadline:
            assert admin.describe_cluster().cluster_id().result(10) == "User:alice"
            calls += 1
            time.sleep(0.1)
        assert calls >= 10
        assert p.read_log().count("SASL session of User:alice expired") == 0  # never caught sending late
    finally:
        admin.close(5)
        p.stop()
