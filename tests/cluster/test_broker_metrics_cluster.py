"""Broker metrics of a real 3-broker cluster: each broker serves ``/metrics``; the leaders hold one fetch session
per follower broker; kill a follower and the survivors report as under-replicated exactly the partitions it
hosted; bring it back and their leaders count one ISR expansion each."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AdminClient

from strom.admin import AdminClient as StromAdmin
from strom.admin import NewTopic
from strom.testing.broker_process import free_port
from strom.testing.cluster import LocalCluster, wait_until
from tests.integration.test_broker_metrics import scrape, value

pytestmark = [pytest.mark.timeout(240)]

# Broker 3 follows partitions 0 and 1 only; 2 and 3 live on brokers 1 and 2.
ASSIGNMENT = {0: [1, 3], 1: [2, 3], 2: [1, 2], 3: [2, 1]}


@pytest.fixture
def cluster() -> Iterator[LocalCluster]:
    c = LocalCluster(3, overrides={"auto.leader.rebalance.enable": "false"})
    for b in c.brokers.values():
        b.overrides["metrics.prometheus.listener"] = f"http://127.0.0.1:{free_port()}"
    with c:
        try:
            yield c
        finally:
            for n, b in c.brokers.items():  # shown by pytest when the test failed
                print(f"==== broker {n} log (tail)\n" + "\n".join(b.read_log().splitlines()[-40:]))


def metrics_of(cluster: LocalCluster, node: int) -> dict:  # type: ignore[type-arg]
    return scrape(cluster.brokers[node].overrides["metrics.prometheus.listener"] + "/metrics")


def sum_over(cluster: LocalCluster, nodes: list[int], name: str) -> float:
    return sum(value(metrics_of(cluster, n), name) for n in nodes)


def test_under_replicated_partitions_after_a_follower_dies(cluster: LocalCluster) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    with StromAdmin({"bootstrap.servers": cluster.bootstrap}) as strom_admin:
        strom_admin.create_topics([NewTopic("urp", replicas_assignments=ASSIGNMENT)]).all().result(60)

    def isrs_full() -> bool:
        parts = admin.list_topics("urp", timeout=10).topics["urp"].partitions
        return len(parts) == 4 and all(sorted(p.isrs) == sorted(ASSIGNMENT[i]) for i, p in parts.items())

    wait_until(isrs_full, 60, "every ISR to be full")
    parts = admin.list_topics("urp", timeout=10).topics["urp"].partitions
    leaders = {i: p.leader for i, p in parts.items()}
    assert all(leaders[i] == ASSIGNMENT[i][0] for i in range(4)), leaders  # preferred leaders, none on broker 3
    every = [1, 2, 3]
    wait_until(lambda: sum_over(cluster, every, "kafka_server_replicamanager_partitioncount") == 8, 30,
               "8 replicas hosted")
    for n in every:
        m = metrics_of(cluster, n)
        assert value(m, "kafka_server_replicamanager_leadercount") == sum(1 for ld in leaders.values() if ld == n)
        assert value(m, "kafka_server_replicamanager_underreplicatedpartitions") == 0
    assert sum_over(cluster, every, "kafka_controller_kafkacontroller_activecontrollercount") == 1
    # Followers fetch in sessions (KIP-227): each leader holds one per broker following it (1: brokers 2 and 3;
    # 2: brokers 1 and 3), and broker 3 leads nothing.
    sessions = "kafka_server_fetchsessioncache_numincrementalfetchsessions"
    wait_until(lambda: [value(metrics_of(cluster, n), sessions) for n in every] == [2, 2, 0], 30,
               "one fetch session per follower broker on each leader")
    assert sum_over(cluster, every, "kafka_controller_kafkacontroller_offlinepartitionscount") == 0
    expands_before = sum_over(cluster, [1, 2], "kafka_server_replicamanager_isrexpands_total")

    cluster.brokers[3].kill()
    survivors = [1, 2]
    # Partitions 0 and 1 had broker 3 as a follower: their leaders (1 and 2) drop it from the ISR.
    wait_until(lambda: sum_over(cluster, survivors, "kafka_server_replicamanager_underreplicatedpartitions") == 2,
               60, "two under-replicated partitions on the survivors")
    assert value(metrics_of(cluster, 1), "kafka_server_replicamanager_underreplicatedpartitions") == 1
    assert value(metrics_of(cluster, 2), "kafka_server_replicamanager_underreplicatedpartitions") == 1
    assert sum_over(cluster, survivors, "kafka_server_replicamanager_leadercount") == 4
    wait_until(lambda: sum_over(cluster, survivors, "kafka_controller_kafkacontroller_activecontrollercount") == 1,
               60, "one active controller among the survivors")

    # Broker 3 comes back and catches up: the leaders of 0 and 1 expand their ISR (AlterPartition), once each.
    cluster.brokers[3].start(timeout=60)
    wait_until(lambda: sum_over(cluster, every, "kafka_server_replicamanager_underreplicatedpartitions") == 0,
               90, "no under-replicated partition once broker 3 is back")
    assert sum_over(cluster, survivors, "kafka_server_replicamanager_isrexpands_total") - expands_before == 2
