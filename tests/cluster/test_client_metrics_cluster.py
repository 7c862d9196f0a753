"""Client-metrics subscriptions (KIP-714) in a cluster: set through one broker, they are in ZooKeeper and every
broker applies them from the change notification (and reads them at start), so a client gets its subscription from
whichever broker it asks; confluent-kafka's pushes land on the brokers' Prometheus endpoints."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer

from strom.common.error_codes import ErrorCode
from strom.protocol.api_keys import ApiKey
from strom.protocol.messages.describe_configs import DescribeConfigsRequest
from strom.protocol.messages.incremental_alter_configs import IncrementalAlterConfigsRequest
from strom.testing.broker_process import free_port
from strom.testing.cluster import LocalCluster, wait_until
from strom.testing.raw_client import RawClient
from tests.integration.test_broker_metrics import scrape

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(240)]

CLIENT_METRICS = 16


def _describe(bootstrap: str, name: str) -> dict[str, str]:
    with RawClient(bootstrap) as rc:
        r = rc.request(ApiKey.DESCRIBE_CONFIGS, 4, DescribeConfigsRequest(resources=[
            DescribeConfigsRequest.DescribeConfigsResource(resource_type=CLIENT_METRICS, resource_name=name,
                                                           configuration_keys=None)]))
    res = r.results[0]
    assert res.error_code == ErrorCode.NONE, res.error_message
    return {c.name: c.value for c in res.configs}


def _alter(bootstrap: str, name: str, configs: dict[str, str]) -> None:
    Req = IncrementalAlterConfigsRequest
    with RawClient(bootstrap) as rc:
        r = rc.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, Req(resources=[Req.AlterConfigsResource(
            resource_type=CLIENT_METRICS, resource_name=name,
            configs=[Req.AlterableConfig(name=k, config_operation=0, value=v) for k, v in configs.items()])]))
    assert r.responses[0].error_code == ErrorCode.NONE, r.responses[0].error_message


def test_a_subscription_set_on_one_broker_is_served_by_all() -> None:
    cluster = LocalCluster(2)
    urls = {}
    for node, b in cluster.brokers.items():
        b.overrides["metrics.prometheus.listener"] = f"http://127.0.0.1:{free_port()}"
        urls[node] = b.overrides["metrics.prometheus.listener"] + "/metrics"
    with cluster as c:
        wanted = {"metrics": "org.apache.kafka.producer.", "interval.ms": "500", "match": "client_id=zk-tele"}
        _alter(c.bootstrap_of(1), "zk-producers", wanted)
        wait_until(lambda: _describe(c.bootstrap_of(2), "zk-producers") == wanted, 30,
                   "broker 2 to apply the subscription set through broker 1")
        p = Producer({"bootstrap.servers": c.bootstrap_of(2), "client.id": "zk-tele"})
        for i in range(20):
            p.produce("zk-tele", b"%d" % i)
        assert p.flush(30) == 0

        def pushed() -> bool:
            p.poll(0.1)
            return any(n.startswith("org_apache_kafka_producer_") and ("client_id", "zk-tele") in labels
                       for url in urls.values() for (n, labels) in scrape(url))

        wait_until(pushed, 30, "the producer's pushed metrics on a broker's /metrics")
        # A broker started afterwards reads the subscriptions from ZooKeeper.
        c.brokers[2].stop()
        c.brokers[2].start()
        assert _describe(c.bootstrap_of(2), "zk-producers") == wanted
