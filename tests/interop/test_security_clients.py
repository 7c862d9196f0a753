"""Third-party clients as judges of the broker's TLS + SASL listeners: confluent-kafka (librdkafka), kafka-python
and aiokafka authenticate over SASL_SSL with PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 (the principal the broker saw
comes back as the cluster id), and a wrong password is refused and never let through."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from strom.security.scram import SCRAM_MECHANISMS, ScramCredential
from strom.server.security.credentials import CREDENTIALS_FILE, FileCredentialStore
from strom.testing.certs import Pki, make_pki
from tests.integration.listener_process import ListenerProcess

USERS = {"PLAIN": ("alice", "alice-Pw-1"), "SCRAM-SHA-256": ("bob", "bob-Pw-2"), "SCRAM-SHA-512": ("bob", "bob-Pw-2")}


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def server(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ListenerProcess]:
    data = tmp_path_factory.mktemp("data")
    store = FileCredentialStore(Path(data) / CREDENTIALS_FILE)
    for name, mech in SCRAM_MECHANISMS.items():
        store.upsert("bob", name, ScramCredential.generate(mech, USERS[name][1]))
    p = ListenerProcess({
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_SSL://localhost:0",
        "ssl.keystore.location": str(pki.broker_keystore),
        "sasl.enabled.mechanisms": ",".join(USERS),
        "listener.name.sasl_ssl.plain.sasl.jaas.config":
            f'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="{USERS["PLAIN"][1]}";',
    }, data_dir=str(data)).start()
    yield p
    p.stop()


def _confluent(server: ListenerProcess, pki: Pki, mechanism: str, user: str, password: str,
               timeout_s: float = 10.0) -> str:
    from confluent_kafka.admin import AdminClient

    errors: list[Any] = []
    admin = AdminClient({"bootstrap.servers": f"localhost:{server.port('SASL_SSL')}", "security.protocol": "SASL_SSL",
                         "ssl.ca.location": str(pki.ca), "sasl.mechanism": mechanism, "sasl.username": user,
                         "sasl.password": password, "error_cb": errors.append, "log_level": 0})
    try:
        return str(admin.list_topics(timeout=timeout_s).cluster_id)
    except Exception as e:
        raise RuntimeError(f"{e} {[str(x) for x in errors]}") from None


def _kafka_python(server: ListenerProcess, pki: Pki, mechanism: str, user: str, password: str,
                  timeout_s: float = 10.0) -> str:
    import kafka

    admin = kafka.KafkaAdminClient(bootstrap_servers=f"localhost:{server.port('SASL_SSL')}",
                                   security_protocol="SASL_SSL", ssl_cafile=str(pki.ca), sasl_mechanism=mechanism,
                                   sasl_plain_username=user, sasl_plain_password=password,
                                   request_timeout_ms=int(timeout_s * 800), api_version=(2, 5, 0),
                                   bootstrap_timeout_ms=int(timeout_s * 1000))
    try:
        return str(admin.describe_cluster()["cluster_id"])
    finally:
        admin.close()


def _aiokafka(server: ListenerProcess, pki: Pki, mechanism: str, user: str, password: str,
              timeout_s: float = 10.0) -> str:
    import aiokafka
    from aiokafka.helpers import create_ssl_context
    from aiokafka.protocol.metadata import MetadataRequest

    async def run() -> str:
        client = aiokafka.AIOKafkaClient(bootstrap_servers=f"localhost:{server.port('SASL_SSL')}",
                                         security_protocol="SASL_SSL",
                                         ssl_context=create_ssl_context(cafile=str(pki.ca)), sasl_mechanism=mechanism,
                                         sasl_plain_username=user, sasl_plain_password=password,
                                         request_timeout_ms=int(timeout_s * 800))
        try:
            await client.bootstrap()
            response = await client.send(1, MetadataRequest(topics=[]))
            return str(response.cluster_id)
        finally:
            await client.close()

    return asyncio.run(run())


def _kcat(server: ListenerProcess, pki: Pki, mechanism: str, user: str, password: str,
          timeout_s: float = 10.0) -> str:
    import shutil
    import subprocess

    if shutil.which("kcat") is None:
        pytest.skip("kcat is not installed (make test installs it with apt-get)")
    out = subprocess.run(["kcat", "-b", f"localhost:{server.port('SASL_SSL')}", "-L", "-J", "-m", str(int(timeout_s)),
                          "-X", "security.protocol=SASL_SSL", "-X", f"ssl.ca.location={pki.ca}",
                          "-X", f"sasl.mechanism={mechanism}", "-X", f"sasl.username={user}",
                          "-X", f"sasl.password={password}"], capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise RuntimeError(f"kcat failed: {out.stderr.strip()[-300:]}")
    import json

    # kcat -L shows no cluster id: the broker list (only served after authentication) stands for it
    return f"brokers={[b['id'] for b in json.loads(out.stdout)['brokers']]}"


CLIENTS = {"confluent-kafka": _confluent, "kafka-python": _kafka_python, "aiokafka": _aiokafka, "kcat": _kcat}


@pytest.mark.parametrize("mechanism", list(USERS))
@pytest.mark.parametrize("client", list(CLIENTS))
def test_sasl_ssl_authenticates(server: ListenerProcess, pki: Pki, client: str, mechanism: str) -> None:
    user, password = USERS[mechanism]
    expected = "brokers=[1]" if client == "kcat" else f"User:{user}"
    assert CLIENTS[client](server, pki, mechanism, user, password) == expected


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
@pytest.mark.parametrize("client", list(CLIENTS))
def test_wrong_password_is_refused(server: ListenerProcess, pki: Pki, client: str, mechanism: str) -> None:
    user, _ = USERS[mechanism]
    before = server.read_log().count("Failed authentication with 127.0.0.1")
    with pytest.raises(Exception) as e:  # each client reports it its own way; none gets an answer
        # A refused client gets no answer: wait a few seconds, not the 10 s a slow success may need.
        CLIENTS[client](server, pki, mechanism, user, "not-the-password", timeout_s=3.0)
    assert "User:" not in str(e.value)
    assert server.read_log().count("Failed authentication with 127.0.0.1") > before
    assert "not-the-password" not in server.read_log()
