"""Client quotas in a cluster (ZooKeeper + 2 strom brokers): a quota set through broker 1 is written to Kafka's
znodes (/config/clients/<id>, /config/users/<user>/clients/<id>) with a change notification, and broker 2 applies
it — a producer that only talks to broker 2 is throttled — and stops applying it once it is removed."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from strom.admin.admin_client import AdminClient
from strom.admin.client_quotas import ClientQuotaAlteration, ClientQuotaEntity
from strom.admin.models import NewTopic
from strom.protocol.api_keys import ApiKey
from strom.protocol.messages import MetadataRequest, ProduceRequest
from strom.record import MemoryRecordsBuilder
from strom.server.zk.kafka_zk_client import KafkaZkClient
from strom.testing.cluster import LocalCluster, wait_until
from strom.testing.raw_client import RawClient

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]


@pytest.fixture
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(2, overrides={"quota.window.num": "2", "quota.window.size.seconds": "1"}) as c:
        yield c


def _burst(bootstrap: str, client_id: str, topic: str, batches: int) -> list[int]:
    builder = MemoryRecordsBuilder()
    builder.append(1_700_000_000_000, b"k", b"v" * 64 * 1024)
    records = builder.build()
    request = ProduceRequest(acks=1, timeout_ms=10000, topic_data=[ProduceRequest.TopicProduceData(
        name=topic, partition_data=[ProduceRequest.PartitionProduceData(index=0, records=records)])])
    with RawClient(bootstrap, client_id=client_id) as c:
        out = []
        for _ in range(batches):
            resp = c.request(ApiKey.PRODUCE, 8, request)
            assert resp.responses[0].partition_responses[0].error_code == 0
            out.append(resp.throttle_time_ms)
            if resp.throttle_time_ms > 0:
                break  # throttled: the broker now mutes this connection for that long, nothing more to learn
        return out


def _alter(admin: AdminClient, entity: dict[str, str | None], **values: float | None) -> None:
    admin.alter_client_quotas([ClientQuotaAlteration(ClientQuotaEntity(entity), [
        ClientQuotaAlteration.Op(k, v) for k, v in values.items()])]).all().result(30)


def test_quota_set_on_one_broker_applies_on_another(cluster: LocalCluster) -> None:
    first = AdminClient({"bootstrap.servers": cluster.bootstrap_of(1), "default.api.timeout.ms": 30000})
    second = AdminClient({"bootstrap.servers": cluster.bootstrap_of(2), "default.api.timeout.ms": 30000})
    try:
        first.create_topics([NewTopic("on-two", replicas_assignments={0: [2]})]).all().result(30)
        wait_until(lambda: _burst(cluster.bootstrap_of(2), "warmup", "on-two", 1) is not None, 30, "leader on 2")
        assert max(_burst(cluster.bootstrap_of(2), "capped", "on-two", 10)) == 0  # no quota yet
        _alter(first, {"client-id": "capped"}, producer_byte_rate=10 * 1024)
        _alter(first, {"user": "alice", "client-id": None}, consumer_byte_rate=4096)
        with KafkaZkClient.connect(cluster.zk_connect) as zk:  # Kafka's znodes and notifications
            assert zk.get_entity_configs("clients", "capped") == {"producer_byte_rate": "10240"}
            data, _ = zk.get_data_and_version("/config/users/alice/clients/<default>")
            assert json.loads(data or b"{}") == {"version": 1, "config": {"consumer_byte_rate": "4096"}}
            notifications = [json.loads(zk.get_data_and_version(f"/config/changes/{n}")[0] or b"{}")
                             for n in zk.get_children("/config/changes")]
            paths = {n["entity_path"] for n in notifications}
            assert {"clients/capped", "users/alice/clients/<default>"} <= paths
        # broker 2 learns it from the notification: a 640 KiB burst against 10 KiB/s is throttled there
        wait_until(lambda: max(_burst(cluster.bootstrap_of(2), "capped", "on-two", 10)) > 0, 60,
                   "broker 2 to throttle client capped")
        assert second.describe_client_quotas().result(30)[ClientQuotaEntity({"client-id": "capped"})] == {
            "producer_byte_rate": 10240.0}
        _alter(first, {"client-id": "capped"}, producer_byte_rate=None)
        wait_until(lambda: max(_burst(cluster.bootstrap_of(2), "capped", "on-two", 10)) == 0, 60,
                   "broker 2 to stop throttling client capped")
        # An IP quota (KIP-612) travels the same way: /config/ips/<ip>, notification ips/<ip>, applied on broker 2
        _alter(first, {"ip": "127.0.0.2"}, connection_creation_rate=1)
        with KafkaZkClient.connect(cluster.zk_connect) as zk:
            assert zk.get_entity_configs("ips", "127.0.0.2") == {"connection_creation_rate": "1"}
        assert second.describe_client_quotas().result(30)[ClientQuotaEntity({"ip": "127.0.0.2"})] == {
            "connection_creation_rate": 1.0}

        def refused_from_127_0_0_2() -> bool:
            for _ in range(4):
                with RawClient(cluster.bootstrap_of(2), timeout=10, source_host="127.0.0.2") as c:
                    try:
                        c.request(ApiKey.METADATA, 1, MetadataRequest(topics=[]))
                    except ConnectionError:
                        return True
            return False

        wait_until(refused_from_127_0_0_2, 60, "broker 2 to hold back connections from 127.0.0.2")
    finally:
        first.close(5)
        second.close(5)
