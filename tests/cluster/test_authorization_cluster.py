"""Replication with the authorizer on (ZooKeeper + 3 strom brokers): clients use a SASL_PLAINTEXT listener and get
only what their ACLs allow; the brokers talk to each other on a PLAINTEXT inter-broker listener, whose principal
(User:ANONYMOUS) is a super user — the private-interface set-up; brokers authenticating to each other over SASL_SSL
or mTLS are tested in test_inter_broker_security.py. The followers' Fetch and OffsetForLeaderEpoch, the controller's
LeaderAndIsr / UpdateMetadata and the leaders' AlterPartition all pass the CLUSTER_ACTION check there."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from strom.common.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from strom.testing.broker_process import free_port
from strom.testing.cluster import LocalCluster, wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(600)]

USERS = ("admin", "alice", "bob")
JAAS = "org.apache.kafka.common.security.plain.PlainLoginModule required " + " ".join(
    f'user_{u}="{u}-pw"' for u in USERS) + ";"
TOPIC, GROUP = "replicated", "alice-readers"


def _allow(rt: ResourceType, name: str, op: AclOperation) -> AclBinding:
    return AclBinding(ResourcePattern(rt, name, PatternType.LITERAL),
                      AccessControlEntry("User:alice", "*", op, AclPermissionType.ALLOW))


@pytest.fixture
def cluster() -> Iterator[tuple[LocalCluster, str]]:
    c = LocalCluster(3, overrides={
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin;User:ANONYMOUS",
        "sasl.enabled.mechanisms": "PLAIN", "sasl.jaas.config": JAAS,
        "inter.broker.listener.name": "PLAINTEXT", "min.insync.replicas": "2", "offsets.topic.replication.factor": "2"})
    sasl_ports = {}
    for n, b in c.brokers.items():
        sasl_ports[n] = free_port()
        b.overrides["listeners"] = f"PLAINTEXT://127.0.0.1:{b.port},SASL_PLAINTEXT://127.0.0.1:{sasl_ports[n]}"
    try:
        c.start()
        # ACLs live in ZooKeeper: created through broker 1, every broker enforces them.
        from strom.admin import AdminClient as StromAdmin

        conf = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": "admin",
                "sasl.password": "admin-pw"}
        first = StromAdmin({"bootstrap.servers": f"127.0.0.1:{sasl_ports[1]}", **conf})
        try:
            first.create_acls([
                _allow(ResourceType.TOPIC, TOPIC, AclOperation.WRITE),
                _allow(ResourceType.TOPIC, TOPIC, AclOperation.READ),
                _allow(ResourceType.GROUP, GROUP, AclOperation.READ)]).all().result(30)
        finally:
            first.close()
        for n in (2, 3):
            other = StromAdmin({"bootstrap.servers": f"127.0.0.1:{sasl_ports[n]}", **conf})
            try:
                wait_until(lambda other=other: len(other.describe_acls().result(30)) == 3, 30,
                           f"broker {n} to load the ACLs created on broker 1")
            finally:
                other.close()
        yield c, ",".join(f"127.0.0.1:{p}" for p in sasl_ports.values())
    finally:
        for n, b in c.brokers.items():  # shown by pytest when the test failed
            print(f"==== broker {n} log (tail)\n" + "\n".join(b.read_log().splitlines()[-40:]))
        c.stop()
        c.cleanup()


def sasl(user: str) -> dict[str, Any]:
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": user,
            "sasl.password": f"{user}-pw", "log_level": 0}


def produce(bootstrap: str, user: str, values: range) -> tuple[int, list[int]]:
    """(records acknowledged, error codes) for acks=all through librdkafka."""
    acked, errors = [], []

    def cb(err: KafkaError | None, msg: Any) -> None:
        (errors.append(err.code()) if err is not None else acked.append(msg.offset()))

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "message.timeout.ms": 30000, **sasl(user)})
    for v in values:
        p.produce(TOPIC, str(v).encode(), partition=0, on_delivery=cb)
    p.flush(60)
    return len(acked), errors


def isr(bootstrap: str) -> set[int]:
    admin = AdminClient({"bootstrap.servers": bootstrap, **sasl("admin")})
    return set(admin.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions[0].isrs)


def leader(bootstrap: str) -> int:
    admin = AdminClient({"bootstrap.servers": bootstrap, **sasl("admin")})
    return int(admin.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions[0].leader)


def test_replication_and_failover_with_the_authorizer_on(cluster: tuple[LocalCluster, str]) -> None:
    c, bootstrap = cluster
    admin = AdminClient({"bootstrap.servers": bootstrap, **sasl("admin")})
    for f in admin.create_topics([NewTopic(TOPIC, 1, 3)], operation_timeout=30).values():
        f.result(60)
    wait_until(lambda: isr(bootstrap) == {1, 2, 3}, 60, "an ISR of 3")

    n, errors = produce(bootstrap, "alice", range(100))
    assert n == 100 and not errors  # acks=all: the followers fetched (CLUSTER_ACTION) and moved the HW
    n, errors = produce(bootstrap, "bob", range(5))
    assert n == 0 and set(errors) == {KafkaError.TOPIC_AUTHORIZATION_FAILED}

    old = leader(bootstrap)
    c.brokers[old].kill()  # the controller elects a new leader and tells the brokers (LeaderAndIsr)
    rest = ",".join(a for a, node in zip(bootstrap.split(","), c.brokers, strict=True) if node != old)
    wait_until(lambda: leader(rest) not in (old, -1), 60, "a new leader")
    n, errors = produce(rest, "alice", range(100, 150))
    assert n == 50 and not errors

    consumer = Consumer({"bootstrap.servers": rest, "group.id": GROUP, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, **sasl("alice")})
    try:
        consumer.subscribe([TOPIC])
        seen: list[int] = []
        deadline = time.monotonic() + 60
        while len(seen) < 150:
            assert time.monotonic() < deadline, f"read {len(seen)} of 150 records"
            m = consumer.poll(0.5)
            if m is None:
                continue
            assert not m.error(), m.error()
            seen.append(int(m.value()))
        assert seen == list(range(150))  # nothing acknowledged was lost in the failover
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
