"""strom's AdminClient against librdkafka's mock cluster (an independent Kafka implementation, 3 brokers).

The mock speaks older versions than strom's broker (FindCoordinator ≤ v3, OffsetFetch ≤ v6, ListOffsets ≤ v7) and
has no DescribeCluster: this checks the version-dependent request/response paths, the DescribeCluster →
Metadata downgrade, leader routing across brokers and retries after injected errors.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pytest.importorskip("confluent_kafka")

from strom.admin import AdminClient, OffsetSpec, TopicPartition  # noqa: E402
from strom.protocol.api_keys import ApiKey  # noqa: E402
from strom.testing.mock_cluster import MockCluster  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.interop, pytest.mark.timeout(60)]


@pytest.fixture(scope="module")
def cluster() -> Iterator[MockCluster]:
    with MockCluster(3) as mc:
        mc.create_topic("six", 6, 3)
        yield mc


@pytest.fixture(scope="module")
def admin(cluster: MockCluster) -> Iterator[AdminClient]:
    with AdminClient({"bootstrap.servers": cluster.bootstrap_servers, "default.api.timeout.ms": 20000,
                      "retry.backoff.ms": 10}) as client:
        yield client


def test_describe_cluster_downgrades_to_metadata(admin: AdminClient, cluster: MockCluster) -> None:
    description = admin.describe_cluster().description().result(10)
    assert sorted(n.node_id for n in description.nodes) == sorted(cluster.broker_ids)


def test_topics_and_leaders_on_several_brokers(admin: AdminClient, cluster: MockCluster) -> None:
    assert "six" in admin.list_topics().names().result(10)
    description = admin.describe_topics(["six"])["six"].result(10)
    assert [p.partition for p in description.partitions] == list(range(6))
    assert all(len(p.replicas) == 3 for p in description.partitions)
    cluster.set_partition_leader("six", 0, cluster.broker_ids[0])
    cluster.set_partition_leader("six", 1, cluster.broker_ids[1])
    cluster.start_request_tracking()
    try:
        offsets = admin.list_offsets({TopicPartition("six", p): OffsetSpec.latest() for p in range(6)}).all()
        assert {tp.partition: info.offset for tp, info in offsets.result(10).items()} == dict.fromkeys(range(6), 0)
        brokers = {broker for broker, api_key, _v in cluster.requests() if api_key == ApiKey.LIST_OFFSETS}
        assert len(brokers) >= 2  # one request per leader
    finally:
        cluster.stop_request_tracking()


def test_group_offsets_through_old_versions(admin: AdminClient) -> None:
    tps = {TopicPartition("six", 0): 0, TopicPartition("six", 3): 0}
    admin.alter_consumer_group_offsets("mock-group", tps).all().result(10)
    committed = admin.list_consumer_group_offsets("mock-group", partitions=list(tps))
    result = committed.partitions_to_offset_and_metadata().result(10)
    assert {tp: o.offset for tp, o in result.items() if o is not None} == tps


def test_retriable_errors_are_retried(admin: AdminClient, cluster: MockCluster) -> None:
    # COORDINATOR_NOT_AVAILABLE twice, then the coordinator is found
    cluster.push_request_errors(ApiKey.FIND_COORDINATOR, [15, 15])
    result = admin.list_consumer_group_offsets("retry-group", partitions=[TopicPartition("six", 1)])
    assert result.partitions_to_offset_and_metadata().result(15) == {TopicPartition("six", 1): None}
    # NOT_LEADER_OR_FOLLOWER on ListOffsets: the leader is looked up again
    cluster.push_request_errors(ApiKey.LIST_OFFSETS, [6])
    found = admin.list_offsets({TopicPartition("six", 2): OffsetSpec.earliest()})
    assert found[TopicPartition("six", 2)].result(15).offset == 0
