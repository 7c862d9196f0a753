"""Brokers that authenticate to each other (ZooKeeper + 3 strom brokers): the inter-broker listener is SASL_SSL
(SCRAM-SHA-512, the brokers' user made in ZooKeeper with ``strom configs --zookeeper`` before they start) or SSL
with client certificates, the authorizer is on and only the brokers' own principal is a super user — so the
controller's requests, the followers' fetches and the leaders' AlterPartition pass only if the brokers really
authenticated as that principal. A broker given a wrong password is refused, says so in its log and stays out
of the ISR while the others carry on."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from strom.testing.broker_process import free_port
from strom.testing.certs import Pki, make_pki
from strom.testing.cluster import LocalCluster, wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
TOPIC = "guarded"


def strom(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "strom.cli.main", *args], capture_output=True, text=True,
                          timeout=90, stdin=subprocess.DEVNULL)


def secure_cluster(overrides: dict[str, str], protocol: str, authorizer: bool = True,
                   ) -> tuple[LocalCluster, dict[int, int]]:
    """Each broker: a PLAINTEXT listener (the harness's metadata checks; with the authorizer its User:ANONYMOUS is
    no super user) and ``protocol`` on a second port, the inter-broker one."""
    c = LocalCluster(3, overrides={**({"authorizer.class.name": AUTHORIZER} if authorizer else {}),
                                   "inter.broker.listener.name": protocol, "min.insync.replicas": "2", **overrides})
    ports = {}
    for n, b in c.brokers.items():
        ports[n] = free_port()
        b.overrides["listeners"] = f"PLAINTEXT://127.0.0.1:{b.port},{protocol}://127.0.0.1:{ports[n]}"
    return c, ports


def logs_tail(c: LocalCluster) -> str:
    return "\n".join(f"==== broker {n}\n" + "\n".join(b.read_log().splitlines()[-30:]) for n, b in c.brokers.items())


@contextmanager
def printing_logs_on_failure(c: LocalCluster) -> Iterator[LocalCluster]:
    """The body's cluster is stopped and removed afterwards; should the body fail, the brokers' last lines are
    printed first."""
    try:
        yield c
    except BaseException:
        print(logs_tail(c))
        raise
    finally:
        c.stop()
        c.cleanup()


def replicate_and_fail_over(c: LocalCluster, ports: dict[int, int], client: dict[str, Any]) -> None:
    """A replication-3 topic reaches an ISR of 3; acks=all writes are acknowledged; after the leader is killed the
    successor (a follower that fetched over the authenticated listener) serves every acknowledged record."""
    from strom import AdminClient, KafkaConsumer, KafkaProducer
    from strom.admin import NewTopic
    from strom.common.structs import TopicPartition

    bootstrap = ",".join(f"127.0.0.1:{p}" for p in ports.values())
    conf = {"bootstrap.servers": bootstrap, **client}
    with AdminClient(conf) as admin:
        admin.create_topics([NewTopic(TOPIC, 1, 3)]).all().result(30)

        def isr() -> list[int]:
            (p,) = admin.describe_topics([TOPIC]).all().result(30)[TOPIC].partitions
            return sorted(n.node_id for n in p.isr)

        wait_until(lambda: isr() == [1, 2, 3], 60, "an ISR of 3 over the authenticated listener")
        (p0,) = admin.describe_topics([TOPIC]).all().result(30)[TOPIC].partitions
        leader = p0.leader.node_id
    with KafkaProducer({**conf, "acks": "all", "enable.idempotence": True}, key_serializer="bytes", value_serializer="bytes") as producer:
        for i in range(100):
            producer.send(TOPIC, b"before-%d" % i)
        producer.flush(30)
        c.brokers[leader].kill()
        acked = [producer.send(TOPIC, b"after-%d" % i) for i in range(100)]
        producer.flush(60)
        assert all(f.get(30).offset >= 100 for f in acked)
    alive = {n: ports[n] for n in c.alive()}
    with KafkaConsumer({**conf, "bootstrap.servers": ",".join(f"127.0.0.1:{p}" for p in alive.values())},
                       key_deserializer="bytes", value_deserializer="bytes") as consumer:
        consumer.assign([TopicPartition(TOPIC, 0)])
        consumer.seek_to_beginning()
        got: list[bytes] = []
        wait_until(lambda: got.extend(r.value for r in consumer.poll(0.5)) or len(got) >= 200, 60,
                   "every acknowledged record from the new leader")
    assert got == [b"before-%d" % i for i in range(100)] + [b"after-%d" % i for i in range(100)]


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return make_pki(tmp_path / "pki")


def test_sasl_ssl_scram_between_brokers(pki: Pki) -> None:
    jaas = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="broker" password="broker-pw";'
    c, ports = secure_cluster({
        "sasl.enabled.mechanisms": "SCRAM-SHA-512", "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": jaas,
        "ssl.keystore.location": str(pki.broker_keystore), "ssl.truststore.location": str(pki.ca),
        "super.users": "User:broker;User:admin"}, "SASL_SSL")
    with printing_logs_on_failure(c):
        c.zookeeper.start()
        for user in ("broker", "admin"):  # before any broker runs, as Kafka's docs have it
            out = strom("configs", "--zookeeper", c.zk_connect, "--alter", "--add-config",
                        f"SCRAM-SHA-512=[iterations=8192,password={user}-pw]", "--entity-type", "users",
                        "--entity-name", user)
            assert (out.returncode, out.stdout.strip()) == (0, f"Completed updating config for user {user}."), \
                out.stderr
        described = strom("configs", "--zookeeper", c.zk_connect, "--describe", "--entity-type", "users")
        assert described.stdout.splitlines() == [
            "SCRAM credential configs for user-principal 'admin' are SCRAM-SHA-512=iterations=8192",
            "SCRAM credential configs for user-principal 'broker' are SCRAM-SHA-512=iterations=8192"]
        c.start()
        replicate_and_fail_over(c, ports, {
            "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "admin",
            "sasl.password": "admin-pw", "ssl.truststore.location": str(pki.ca)})


def test_ssl_with_client_certificates_between_brokers(pki: Pki) -> None:
    # The brokers present their keystore's certificate (CN=localhost,O=strom) when a peer asks for one.
    c, ports = secure_cluster({
        "ssl.keystore.location": str(pki.broker_keystore), "ssl.truststore.location": str(pki.ca),
        "ssl.client.auth": "required", "super.users": "User:CN=localhost,O=strom;User:CN=alice,O=strom"}, "SSL")
    with printing_logs_on_failure(c):
        c.start()
        replicate_and_fail_over(c, ports, {
            "security.protocol": "SSL", "ssl.truststore.location": str(pki.ca),
            "ssl.keystore.location": str(pki.client_keystore)})


@pytest.fixture
def one_wrong_password(pki: Pki) -> Iterator[tuple[LocalCluster, dict[int, int]]]:
    def jaas(password: str) -> str:
        return ('org.apache.kafka.common.security.plain.PlainLoginModule required username="broker" '
                f'password="{password}" user_broker="broker-pw" user_admin="admin-pw";')

    c, ports = secure_cluster({
        "sasl.enabled.mechanisms": "PLAIN", "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": jaas("broker-pw"),
        "ssl.keystore.location": str(pki.broker_keystore), "ssl.truststore.location": str(pki.ca),
        "super.users": "User:broker;User:admin"}, "SASL_SSL")
    c.brokers[3].overrides["listener.name.sasl_ssl.plain.sasl.jaas.config"] = jaas("not-the-password")
    with printing_logs_on_failure(c):
        c.zookeeper.start()
        for n in (1, 2, 3):  # 1 and 2 first: broker 1 is the controller, broker 3 only a follower
            c.brokers[n].overrides["zookeeper.connect"] = c.zk_connect
            c.brokers[n].start(timeout=60)
            if n == 2:
                c.wait_for_metadata()
        yield c, ports


def test_a_broker_with_a_wrong_password_is_refused_and_stays_out_of_the_isr(
        one_wrong_password: tuple[LocalCluster, dict[int, int]], pki: Pki) -> None:
    from strom import AdminClient, KafkaProducer
    from strom.admin import NewTopic

    c, ports = one_wrong_password
    conf = {"bootstrap.servers": f"127.0.0.1:{ports[1]}", "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
            "sasl.username": "admin", "sasl.password": "admin-pw", "ssl.truststore.location": str(pki.ca)}
    with AdminClient(conf) as admin:
        admin.create_topics([NewTopic(TOPIC, 1, None, {0: [1, 2, 3]})]).all().result(30)
        # Broker 3's replica fetcher cannot log in to the leader: the broker names the refusal in its log ...
        wait_until(lambda: "Authentication failed" in c.brokers[3].read_log(), 60,
                   "broker 3 to log its refused login")
        line = next(ln for ln in c.brokers[3].read_log().splitlines() if "Authentication failed" in ln)
        assert f"inter-broker connection to 127.0.0.1:{ports[1]}" in line and "Invalid username or password" in line

        # ... never catches up, so the leader drops it from the ISR (replica.lag.time.max.ms) while the two
        # others carry acks=all writes.
        def partition() -> Any:
            return admin.describe_topics([TOPIC]).all().result(30)[TOPIC].partitions[0]

        wait_until(lambda: sorted(n.node_id for n in partition().isr) == [1, 2], 30, "the ISR without broker 3")
        with KafkaProducer({**conf, "acks": "all"}, key_serializer="bytes", value_serializer="bytes") as producer:
            assert producer.send(TOPIC, b"still durable on two").get(30).offset == 0
        assert sorted(n.node_id for n in partition().isr) == [1, 2] and partition().leader.node_id == 1


def test_a_ca_rotation_reaches_the_brokers_own_connections(tmp_path: Path) -> None:
    """An operator moves a cluster with client-certificate TLS between brokers to a new CA without a restart:
    every broker's inter-broker listener trusts both CAs, then gets a keystore of the new CA, then trusts only the
    new CA (dynamic per-broker configs). A broker restarted afterwards trusts nothing else, so the controller's
    connection to it and the followers' fetches from it -- made after the rotation by brokers that never
    restarted -- pass only if those brokers present the new certificate on their own connections too."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient

    from strom import AdminClient as StromAdmin
    from strom.admin import NewTopic

    old = make_pki(tmp_path / "old")
    new = make_pki(tmp_path / "new", ca_cn="strom test CA 2")
    both = tmp_path / "both-cas.pem"
    both.write_bytes(old.ca.read_bytes() + new.ca.read_bytes())
    c, _ports = secure_cluster({"ssl.keystore.location": str(old.broker_keystore),
                                "ssl.truststore.location": str(old.ca), "ssl.client.auth": "required"}, "SSL",
                               authorizer=False)
    with printing_logs_on_failure(c):
        c.start()
        with StromAdmin({"bootstrap.servers": c.bootstrap}) as strom_admin:
            strom_admin.create_topics([NewTopic(TOPIC, 1, None, {0: [3, 1, 2]})]).all().result(30)
        admin = AdminClient({"bootstrap.servers": c.bootstrap})

        def isr() -> list[int]:
            return sorted(admin.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions[0].isrs)

        wait_until(lambda: isr() == [1, 2, 3], 60, "an ISR of 3")
        for key, value in (("ssl.truststore.location", both), ("ssl.keystore.location", new.broker_keystore),
                           ("ssl.truststore.location", new.ca)):
            for n in c.brokers:
                out = strom("configs", "--bootstrap-server", c.bootstrap, "--alter", "--entity-type", "brokers",
                            "--entity-name", str(n), "--add-config", f"listener.name.ssl.{key}={value}")
                assert out.returncode == 0, out.stderr
        c.brokers[3].kill()
        c.brokers[3].start(timeout=60)
        c.wait_for_metadata(timeout_s=60)  # the controller reached broker 3 on a new connection
        out = strom("leader-election", "--bootstrap-server", c.bootstrap, "--election-type", "preferred",
                    "--topic", TOPIC, "--partition", "0")
        assert out.returncode == 0, out.stderr
        wait_until(lambda: admin.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions[0].leader == 3, 60,
                   "broker 3 leading again")
        wait_until(lambda: isr() == [1, 2, 3], 60, "brokers 1 and 2 fetching from broker 3 with the new certificate")
        p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all"})
        delivered: list[Any] = []
        for i in range(10):
            p.produce(TOPIC, b"after-rotation-%d" % i, on_delivery=lambda err, _m: delivered.append(err))
        assert p.flush(30) == 0 and delivered == [None] * 10
