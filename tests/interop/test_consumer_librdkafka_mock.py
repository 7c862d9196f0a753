"""The strom consumer against librdkafka's mock cluster (a broker we did not write): it reads what
confluent-kafka wrote, in a group and with manual assignment, through injected errors and leader moves."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from strom.common.structs import TopicPartition
from strom.consumer import KafkaConsumer
from strom.protocol.api_keys import ApiKey

pytestmark = [pytest.mark.interop, pytest.mark.timeout(120)]

confluent_kafka = pytest.importorskip("confluent_kafka")
from strom.testing.mock_cluster import MockCluster  # noqa: E402

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


@pytest.fixture(scope="module")
def cluster() -> Iterator[MockCluster]:
    with MockCluster(3) as mc:
        yield mc


def produce(bootstrap: str, topic: str, n: int, codec: str = "none", partitions: int = 6) -> None:
    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 5})
    for i in range(n):
        p.produce(topic, key=b"k%d" % i, value=b"%s-%d" % (codec.encode(), i), partition=i % partitions,
                  headers=[("i", b"%d" % i)])
    assert p.flush(30) == 0


def consume(c: KafkaConsumer, n: int, timeout: float = 30.0) -> list:
    out: list = []
    deadline = time.monotonic() + timeout
    while len(out) < n and time.monotonic() < deadline:
        out.extend(c.poll(0.2))
    return out


def test_group_consumer_reads_every_codec(cluster: MockCluster) -> None:
    cluster.create_topic("mock-codecs", 6, 3)
    for codec in CODECS:
        produce(cluster.bootstrap_servers, "mock-codecs", 60, codec)
    with KafkaConsumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "mock-g1"},
                       key_deserializer="string", value_deserializer="string", auto_offset_reset="earliest",
                       enable_auto_commit=False) as c:
        c.subscribe(["mock-codecs"])
        records = consume(c, 300)
        assert sorted(r.value for r in records) == sorted(f"{codec}-{i}" for codec in CODECS for i in range(60))
        assert all(r.headers == (("i", r.value.split("-")[1].encode()),) for r in records)
        assert len(c.assignment()) == 6
        c.commit_sync()
        committed = c.committed(c.assignment())
        assert sum(om.offset for om in committed.values()) == 300
    # the group's committed offsets are where a new consumer of the group starts (manual assignment: the mock
    # only re-forms a group whose members all left after their session timeout, for librdkafka's own
    # consumers too)
    produce(cluster.bootstrap_servers, "mock-codecs", 6)
    with KafkaConsumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "mock-g1"},
                       key_deserializer="bytes", value_deserializer="bytes", auto_offset_reset="earliest") as c:
        c.assign([TopicPartition("mock-codecs", p) for p in range(6)])
        assert len(consume(c, 6)) == 6


def test_manual_assignment_survives_fetch_errors_and_leader_moves(cluster: MockCluster) -> None:
    cluster.create_topic("mock-faults", 4, 3)
    produce(cluster.bootstrap_servers, "mock-faults", 200, partitions=4)
    with KafkaConsumer({"bootstrap.servers": cluster.bootstrap_servers}, key_deserializer="bytes",
                       value_deserializer="bytes", auto_offset_reset="earliest") as c:
        c.assign([TopicPartition("mock-faults", p) for p in range(4)])
        cluster.push_request_errors(ApiKey.FETCH, [6, 6, 5])  # NOT_LEADER_OR_FOLLOWER x2, LEADER_NOT_AVAILABLE
        first = consume(c, 100)
        cluster.set_partition_leader("mock-faults", 0, 3)
        cluster.set_partition_leader("mock-faults", 1, 1)
        produce(cluster.bootstrap_servers, "mock-faults", 200, partitions=4)
        rest = consume(c, 400 - len(first))
        got = sorted((r.partition, r.offset) for r in first + rest)
        assert len(got) == 400 and len(set(got)) == 400
        assert c.end_offsets([TopicPartition("mock-faults", 0)]) == {TopicPartition("mock-faults", 0): 100}


def test_coordinator_errors_are_retried(cluster: MockCluster) -> None:
    cluster.create_topic("mock-coord", 2, 3)
    produce(cluster.bootstrap_servers, "mock-coord", 20, partitions=2)
    cluster.push_request_errors(ApiKey.FIND_COORDINATOR, [15])  # COORDINATOR_NOT_AVAILABLE
    cluster.push_request_errors(ApiKey.JOIN_GROUP, [14])  # COORDINATOR_LOAD_IN_PROGRESS
    cluster.push_request_errors(ApiKey.OFFSET_COMMIT, [16])  # NOT_COORDINATOR
    with KafkaConsumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "mock-g2"},
                       key_deserializer="bytes", value_deserializer="bytes", auto_offset_reset="earliest",
                       enable_auto_commit=False) as c:
        c.subscribe(["mock-coord"])
        assert len(consume(c, 20)) == 20
        c.commit_sync(timeout=20)
        assert sum(om.offset for om in c.committed(c.assignment(), timeout=20).values()) == 20
