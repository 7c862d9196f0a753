"""A consumer group across the death of its coordinator's broker (kill -9), on a fresh 3-broker cluster (the
coordinator dies about a second after __consumer_offsets was created, as for a group's first minutes)."""

from __future__ import annotations

import pytest

from strom.testing.cluster import LocalCluster, wait_until

from .test_cluster_failover_clients import in_sync

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]


# This lost acknowledged commits (11 of 12 runs) until an offset commit was answered only once every in-sync
# replica of the group's __consumer_offsets partition had it (Kafka's acks=-1 for group records).
def test_consumer_group_survives_the_death_of_its_coordinator(cluster: LocalCluster) -> None:
    """kill -9 the group coordinator's broker: the member finds the new coordinator (the __consumer_offsets
    partition's new leader), its committed offsets are intact and no record is lost or read twice."""
    from strom import AdminClient, KafkaConsumer, KafkaProducer
    from strom.admin import NewTopic

    topic, group = "coordinated", "survivors"
    with AdminClient({"bootstrap.servers": cluster.bootstrap}) as admin:
        admin.create_topics([NewTopic(topic, 2, 3, None, {"min.insync.replicas": "2"})]).all().result(30)
    wait_until(lambda: in_sync(cluster, topic, 2), 30, "an ISR of 3")
    with KafkaProducer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "key.serializer": "bytes",
                        "value.serializer": "bytes"}) as producer:
        for i in range(400):
            producer.send(topic, value=str(i).encode(), partition=i % 2)
        producer.flush(60)

    def member() -> KafkaConsumer:
        c = KafkaConsumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                           "auto.offset.reset": "earliest", "enable.auto.commit": False, "max.poll.records": 50},
                          key_deserializer="bytes", value_deserializer="bytes")
        c.subscribe([topic])
        return c

    seen: list[int] = []

    def read(c: KafkaConsumer, until: int) -> bool:
        for r in c.poll(0.2):
            seen.append(int(r.value))
        c.commit_sync()
        return len(seen) >= until

    first = member()
    wait_until(lambda: read(first, 100), 60, "100 records read and committed", interval_s=0)
    with AdminClient({"bootstrap.servers": cluster.bootstrap}) as admin:
        coordinator = admin.describe_consumer_groups([group])[group].result(30).coordinator
    assert coordinator is not None
    cluster.brokers[coordinator.node_id].kill()
    try:
        wait_until(lambda: read(first, 250), 90, "reading on after the coordinator died", interval_s=0)
        first.close()
        with AdminClient({"bootstrap.servers": cluster.bootstrap_of(*cluster.alive())}) as admin:
            new = admin.describe_consumer_groups([group])[group].result(30).coordinator
            committed = admin.list_consumer_group_offsets(group).partitions_to_offset_and_metadata().result(30)
        assert new is not None and new.node_id != coordinator.node_id
        assert sum(om.offset for om in committed.values()) == len(seen)  # every read record committed, nothing more
        second = member()  # resumes from the committed offsets on the new coordinator
        wait_until(lambda: read(second, 400), 90, "the rest read by a new member", interval_s=0)
        second.close()
        assert sorted(seen) == list(range(400))  # nothing lost, nothing read twice
    finally:  # the module's other tests need all 3 brokers, whatever happened here
        cluster.brokers[coordinator.node_id].start(timeout=60)
    wait_until(lambda: in_sync(cluster, topic, 2), 60, "the ISR back to 3")
