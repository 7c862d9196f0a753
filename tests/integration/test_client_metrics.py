"""Client metrics measured by the real code paths against a real strom broker: a known workload, then
``metrics()`` (and a Prometheus scrape of it) must show it."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from strom.admin import AdminClient, NewTopic
from strom.common.structs import TopicPartition
from strom.consumer import KafkaConsumer
from strom.metrics import KafkaMetric, metric_values
from strom.metrics.prometheus import MetricsHttpServer
from strom.producer import KafkaProducer
from strom.testing.broker_process import BrokerProcess

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(data_dir=tmp_path_factory.mktemp("client-metrics") / "data",
                      overrides={"group.initial.rebalance.delay.ms": "0"})
    b.start()
    yield b
    b.stop()
    b.cleanup()


def create_topic(bootstrap: str, topic: str, partitions: int = 1) -> None:
    with AdminClient({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics([NewTopic(topic, partitions, 1)]).all().result(30)


def produce(bootstrap: str, topic: str, n: int, size: int = 100, **extra: Any) -> KafkaProducer:
    producer = KafkaProducer({"bootstrap.servers": bootstrap, "linger.ms": 5}, key_serializer="bytes",
                             value_serializer="bytes", **extra)
    for i in range(n):
        producer.send(topic, value=b"%0*d" % (size, i), partition=i % producer_partitions(producer, topic))
    producer.flush(30)
    return producer


def producer_partitions(producer: KafkaProducer, topic: str) -> int:
    return len(producer.partitions_for(topic))


class ListReporter:
    """A metric.reporters plug-in loaded by class name; keeps what it is told."""

    last: ListReporter | None = None

    def __init__(self) -> None:
        self.added: list[str] = []
        self.closed = False
        self.configs: dict[str, Any] = {}
        ListReporter.last = self

    def configure(self, configs: dict[str, Any]) -> None:
        self.configs = configs

    def init(self, metrics: list[KafkaMetric]) -> None:
        self.added += [m.metric_name().name for m in metrics]

    def metric_change(self, metric: KafkaMetric) -> None:
        self.added.append(metric.metric_name().name)

    def metric_removal(self, metric: KafkaMetric) -> None:
        pass

    def close(self) -> None:
        self.closed = True


def test_producer_metrics_count_a_known_workload(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "metrics-produce")
    producer = produce(broker.bootstrap, "metrics-produce", 1000, client_id="p-metrics", acks="all",
                       metric_reporters=f"{__name__}.ListReporter", buffer_memory=1 << 20)
    try:
        all_metrics = producer.metrics()
        assert all(name.tags.get("client-id") == "p-metrics" for name in all_metrics)
        topic = metric_values(all_metrics, "producer-topic-metrics", topic="metrics-produce")
        client = metric_values(all_metrics, "producer-metrics")
        assert topic["record-send-total"] == 1000 and client["record-send-total"] == 1000
        # the byte count is what went into the batches: the values plus the record and batch framing
        assert 100_000 < topic["byte-total"] < 100_000 + 1000 * 20 + 61 * 1000
        assert client["record-error-total"] == 0 and client["record-retry-total"] == 0
        assert client["batch-size-max"] >= client["batch-size-avg"] > 100
        # record-size: a batch of one 100-byte value alone: 61 bytes of batch header, the value and 8 to 21 bytes
        # of record framing (21: the most Kafka's estimate allows for)
        assert 61 + 100 + 8 <= client["record-size-avg"] <= client["record-size-max"] <= 61 + 100 + 21
        assert client["request-latency-max"] >= client["request-latency-avg"] >= 0
        assert client["records-per-request-avg"] >= 1
        assert client["buffer-available-bytes"] == client["buffer-total-bytes"] == 1 << 20
        assert client["connection-count"] >= 1 and client["connection-creation-total"] >= 1
        assert client["outgoing-byte-total"] > topic["byte-total"]
        assert client["request-total"] >= client["response-total"] >= 2  # metadata + produce at least
        assert 0 < client["io-wait-ratio"] <= 1.0
        # one node for the bootstrap connection (node--1, as Kafka names it) and one for the broker's id
        node_ids = {n.tags["node-id"] for n in all_metrics if n.group == "producer-node-metrics"}
        broker_nodes = sorted(n for n in node_ids if not n.startswith("node--"))
        assert len(broker_nodes) == 1 and "node--1" in node_ids
        nodes = metric_values(all_metrics, "producer-node-metrics", node_id=broker_nodes[0])
        assert nodes["request-total"] >= 1 and nodes["request-latency-max"] >= 0
        assert metric_values(all_metrics, "app-info")["version"]
        reporter = ListReporter.last
        assert reporter is not None and "record-send-total" in reporter.added
        assert reporter.configs["client.id"] == "p-metrics"
    finally:
        producer.close()
    assert reporter.closed


def wait_for(condition: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def scrape(url: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    with urllib.request.urlopen(url, timeout=10) as resp:
        text = resp.read().decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_consumer_lag_fetch_and_prometheus(broker: BrokerProcess) -> None:
    """500 records, 200 consumed: records-lag 300 in metrics() and in a Prometheus scrape."""
    create_topic(broker.bootstrap, "metrics-lag")
    create_topic(broker.bootstrap, "metrics-lag-other")
    produce(broker.bootstrap, "metrics-lag", 500).close()
    tp = TopicPartition("metrics-lag", 0)
    consumer = KafkaConsumer({"bootstrap.servers": broker.bootstrap}, client_id="c-lag", max_poll_records=200,
                             key_deserializer="bytes", value_deserializer="bytes",
                             auto_offset_reset="earliest", fetch_max_wait_ms=100)
    try:
        consumer.assign([tp])
        consumed = 0
        deadline = time.monotonic() + 30
        while consumed < 200:
            assert time.monotonic() < deadline
            consumed += consumer.poll(0.5).count()
        assert consumed == 200  # max.poll.records: exactly one batch of 200 out of the 500 fetched
        fetch = metric_values(consumer.metrics(), "consumer-fetch-manager-metrics", topic="metrics-lag",
                              partition="0")
        assert fetch["records-lag"] == 300 and fetch["records-lag-max"] == 300
        assert fetch["records-lead"] == 200 and fetch["records-lead-min"] == 200
        manager = metric_values(consumer.metrics(), "consumer-fetch-manager-metrics")
        assert manager["records-lag-max"] == 300 and manager["records-consumed-total"] == 200
        assert manager["fetch-total"] >= 1 and manager["fetch-latency-max"] >= manager["fetch-latency-avg"] >= 0
        assert manager["bytes-consumed-total"] > 500 * 100  # the whole response was fetched
        topic = metric_values(consumer.metrics(), "consumer-fetch-manager-metrics", topic="metrics-lag")
        assert topic["records-consumed-total"] == 200
        assert fetch["preferred-read-replica"] == -1  # read from the leader
        with MetricsHttpServer(consumer, "127.0.0.1", 0, domain="kafka.consumer") as server:
            series = scrape(server.url)
        key = ("kafka_consumer_consumer_fetch_manager_metrics_records_lag",
               frozenset({"client_id": "c-lag", "topic": "metrics-lag", "partition": "0"}.items()))
        assert series[key] == 300
        # reassigned elsewhere: the partition's lag and lead metrics are removed (Kafka's maybeUpdateAssignment)
        consumer.assign([TopicPartition("metrics-lag-other", 0)])
        consumer.poll(0)
        assert not [n for n in consumer.metrics() if n.tags.get("topic") == "metrics-lag" and "partition" in n.tags]
    finally:
        consumer.close()


def test_consumer_group_coordinator_metrics(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "metrics-group", 2)
    produce(broker.bootstrap, "metrics-group", 10).close()
    consumer = KafkaConsumer({"bootstrap.servers": broker.bootstrap, "group.id": "metrics-g"}, client_id="c-group",
                             key_deserializer="bytes", value_deserializer="bytes",
                             auto_offset_reset="earliest", enable_auto_commit=False, heartbeat_interval_ms=100)
    try:
        consumer.subscribe(["metrics-group"])
        got = 0
        deadline = time.monotonic() + 30
        while got < 10:
            assert time.monotonic() < deadline
            got += consumer.poll(0.5).count()
        start = time.monotonic_ns()
        consumer.commit_sync()
        commit_sync_ns = time.monotonic_ns() - start
        start = time.monotonic_ns()
        assert consumer.committed(TopicPartition("metrics-group", 0)).offset >= 0
        committed_ns = time.monotonic_ns() - start
        # Kafka's commit-sync-time-ns-total / committed-time-ns-total: each call's time, a round trip at least
        calls = metric_values(consumer.metrics(), "consumer-metrics")
        assert 10_000 < calls["commit-sync-time-ns-total"] <= commit_sync_ns
        assert 10_000 < calls["committed-time-ns-total"] <= committed_ns
        assert 0 < calls["poll-idle-ratio-avg"] <= 1

        def coordinator() -> dict[str, Any]:
            return metric_values(consumer.metrics(), "consumer-coordinator-metrics")

        wait_for(lambda: coordinator()["heartbeat-total"] >= 1)
        values = coordinator()
        assert values["assigned-partitions"] == 2
        # the first JoinGroup is answered MEMBER_ID_REQUIRED (KIP-394): Kafka counts that as a failed rebalance
        assert values["rebalance-total"] == 1 and values["failed-rebalance-total"] == 1
        assert values["rebalance-latency-max"] >= values["rebalance-latency-avg"] >= 0
        assert values["rebalance-rate-per-hour"] > 0
        assert values["join-total"] >= 1 and values["sync-total"] == 1
        assert values["commit-total"] == 1 and values["commit-latency-max"] >= 0
        assert 0 <= values["last-heartbeat-seconds-ago"] < 30 and 0 <= values["last-rebalance-seconds-ago"] < 30
        assert values["partition-assigned-latency-max"] >= 0
        consumer.poll(0)  # a second poll at least: time-between-poll has a gap to report
        assert metric_values(consumer.metrics(), "consumer-metrics")["time-between-poll-max"] >= 0
    finally:
        consumer.close()


def test_admin_client_network_metrics(broker: BrokerProcess) -> None:
    with AdminClient({"bootstrap.servers": broker.bootstrap}, client_id="a-metrics") as admin:
        admin.list_topics().names().result(30)
        values = metric_values(admin.metrics(), "admin-client-metrics", client_id="a-metrics")
        assert values["connection-creation-total"] >= 1 and values["request-total"] >= 2
        assert values["incoming-byte-total"] > 0
        node_groups = {name.tags["node-id"] for name in admin.metrics() if name.group == "admin-client-node-metrics"}
        assert node_groups and all(n.startswith("node-") for n in node_groups)


def test_bad_metric_reporter_is_a_clear_construction_error(broker: BrokerProcess) -> None:
    with pytest.raises(Exception, match="Failed to construct kafka producer") as info:
        KafkaProducer({"bootstrap.servers": broker.bootstrap, "metric.reporters": "no.such.Reporter"},
                      key_serializer="bytes", value_serializer="bytes")
    assert "metric.reporters" in str(info.value.__cause__)
