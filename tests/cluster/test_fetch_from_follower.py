"""KIP-392 on a real 3-broker cluster with racks a, b, c and the rack-aware replica selector: the leader points a
consumer of another rack to the in-sync replica of its rack, that follower serves the records, and
confluent-kafka (which implements KIP-392) reads everything with ``client.rack``."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer

from strom import KafkaConsumer
from strom.common.error_codes import ErrorCode
from strom.common.structs import TopicPartition
from strom.metrics import metric_values
from strom.protocol.api_keys import ApiKey
from strom.protocol.messages.fetch import FetchRequest
from strom.testing.cluster import LocalCluster, wait_until
from strom.testing.raw_client import RawClient
from tests.cluster.test_replication import create_topic, isr_is, partition_meta, produce

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

RACKS = ["a", "b", "c"]


def fetch(bootstrap: str, rack: str, offset: int = 0) -> FetchRequest:
    with RawClient(bootstrap) as c:
        return c.request(ApiKey.FETCH, 12, FetchRequest(
            replica_id=-1, max_wait_ms=100, min_bytes=1, max_bytes=1 << 20, isolation_level=0, session_id=0,
            session_epoch=-1, rack_id=rack, forgotten_topics_data=[], topics=[FetchRequest.FetchTopic(
                topic="near", partitions=[FetchRequest.FetchPartition(
                    partition=0, current_leader_epoch=-1, fetch_offset=offset, last_fetched_epoch=-1,
                    log_start_offset=-1, partition_max_bytes=1 << 20)])]))


def test_consumer_reads_from_the_replica_in_its_rack() -> None:
    overrides = {"replica.selector.class": "org.apache.kafka.common.replica.RackAwareReplicaSelector"}
    with LocalCluster(3, racks=RACKS, overrides=overrides) as cluster:
        create_topic(cluster, "near")
        acked, errors = produce(cluster.bootstrap, "near", list(range(100)))
        assert len(acked) == 100 and not errors
        wait_until(lambda: isr_is(cluster, "near", {1, 2, 3}), 60, "ISR of 3")
        leader = partition_meta(cluster, "near").leader
        other = next(n for n in (1, 2, 3) if n != leader)
        other_rack = RACKS[other - 1]
        # The leader sends a consumer of another rack to that rack's replica, with no records.
        resp = fetch(cluster.brokers[leader].bootstrap, other_rack)
        pd = resp.responses[0].partitions[0]
        assert pd.error_code == ErrorCode.NONE and pd.preferred_read_replica == other and not pd.records
        # A consumer of the leader's own rack is served by the leader.
        own = fetch(cluster.brokers[leader].bootstrap, RACKS[leader - 1]).responses[0].partitions[0]
        assert own.preferred_read_replica == -1 and own.records
        # The follower serves the records (up to its high watermark) to that consumer.
        wait_until(lambda: fetch(cluster.brokers[other].bootstrap, other_rack).responses[0].partitions[0].records,
                   30, "the follower to serve records")
        served = fetch(cluster.brokers[other].bootstrap, other_rack).responses[0].partitions[0]
        assert served.error_code == ErrorCode.NONE and served.high_watermark == 100
        # confluent-kafka with client.rack reads everything.
        c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "near", "client.rack": other_rack,
                      "auto.offset.reset": "earliest", "enable.auto.commit": False})
        c.subscribe(["near"])
        got: list[int] = []
        deadline = time.monotonic() + 60
        while len(got) < 100:
            assert time.monotonic() < deadline, f"read {len(got)} of 100"
            m = c.poll(0.5)
            if m is not None and not m.error():
                got.append(int(m.value()))
        c.close()
        assert got == list(range(100))
        # strom's consumer with client.rack follows the leader's pointer: the records come from the follower.
        with KafkaConsumer({"bootstrap.servers": cluster.bootstrap, "client.rack": other_rack,
                            "auto.offset.reset": "earliest"}, key_deserializer="bytes",
                           value_deserializer="bytes") as consumer:
            consumer.assign([TopicPartition("near", 0)])
            values: list[int] = []
            deadline = time.monotonic() + 60
            while len(values) < 100:
                assert time.monotonic() < deadline, f"strom read {len(values)} of 100"
                values.extend(int(r.value) for r in consumer.poll(0.5))
            assert values == list(range(100))
            received = {n.tags["node-id"]: m.metric_value() for n, m in consumer.metrics().items()
                        if n.group == "consumer-node-metrics" and n.name == "incoming-byte-total"}
            # the leader only answered the first (redirecting, empty) fetch and metadata; the follower sent the data
            # the leader answered metadata-free requests only (ApiVersions, the redirecting empty fetch); the
            # follower sent the records (seen: follower 1,426 bytes, leader 487)
            assert received.get(f"node-{other}", 0) > received.get(f"node-{leader}", 0)
            # ... and the partition's preferred-read-replica metric names the follower (-1: the leader)
            replica = metric_values(consumer.metrics(), "consumer-fetch-manager-metrics", topic="near",
                                    partition="0")["preferred-read-replica"]
            assert replica == other


def test_without_a_selector_followers_do_not_redirect() -> None:
    with LocalCluster(3, racks=RACKS) as cluster:
        create_topic(cluster, "near")
        produce(cluster.bootstrap, "near", list(range(10)))
        leader = partition_meta(cluster, "near").leader
        other_rack = RACKS[next(n for n in (1, 2, 3) if n != leader) - 1]
        pd = fetch(cluster.brokers[leader].bootstrap, other_rack).responses[0].partitions[0]
        assert pd.preferred_read_replica == -1 and pd.records
