"""``format("strom")`` against a broker that only lets authenticated TLS clients in: Spark's ``kafka.*`` security
options (``kafka.security.protocol``, ``kafka.sasl.*``, ``kafka.ssl.*``, as with Spark's Kafka connector) reach the
clients in the driver and in every executor, for the sink and the source; a wrong password fails the query with
the broker's authentication error instead of hanging."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from strom.broker_process import BrokerProcess, free_port
from strom.testing.certs import Pki, make_pki

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

USERS = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-pw";'


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Pki]]:
    base = tmp_path_factory.mktemp("secured")
    pki = make_pki(base / "pki")
    port = free_port()
    b = BrokerProcess(data_dir=base / "data", overrides={
        # The harness's PLAINTEXT listener stays for the inter-broker name; clients use SASL_SSL only, and the
        # authorizer refuses User:ANONYMOUS everything, so a client that did not log in gets nowhere.
        "listeners": f"PLAINTEXT://127.0.0.1:{free_port()},SASL_SSL://127.0.0.1:{port}",
        "sasl.enabled.mechanisms": "PLAIN", "listener.name.sasl_ssl.plain.sasl.jaas.config": USERS,
        "ssl.keystore.location": str(pki.broker_keystore),
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:alice", "num.partitions": "2"})
    b.start()
    try:
        yield f"127.0.0.1:{port}", pki
    finally:
        b.stop()
        b.cleanup()


def options(bootstrap: str, pki: Pki, password: str = "alice-pw") -> dict[str, str]:
    return {"kafka.bootstrap.servers": bootstrap, "kafka.security.protocol": "SASL_SSL",
            "kafka.sasl.mechanism": "PLAIN",
            "kafka.sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required '
                                      f'username="alice" password="{password}";',
            "kafka.ssl.truststore.location": str(pki.ca)}


def test_write_then_read_over_sasl_ssl(spark: Any, secured: tuple[str, Pki]) -> None:
    bootstrap, pki = secured
    opts = options(bootstrap, pki)
    rows = [(f"k{i}", f"v{i}") for i in range(40)]
    df = spark.createDataFrame(rows, "key string, value string")
    df.write.format("strom").options(**opts).option("topic", "guarded").mode("append").save()
    back = spark.read.format("strom").options(**opts).option("subscribe", "guarded").load().collect()
    assert sorted((r.key.decode(), r.value.decode()) for r in back) == sorted(rows)
    assert {r.partition for r in back} == {0, 1}  # both partitions were written and read by executors


def test_a_wrong_password_fails_the_query_with_the_brokers_reason(spark: Any, secured: tuple[str, Pki],
                                                                  tmp_path: Path) -> None:
    bootstrap, pki = secured
    reader = spark.read.format("strom").options(**options(bootstrap, pki, password="wrong")) \
        .option("subscribe", "guarded")
    with pytest.raises(Exception, match="Invalid username or password"):
        reader.load().collect()
