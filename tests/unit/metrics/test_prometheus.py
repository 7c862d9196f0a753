"""strom.metrics.prometheus: JMX-exporter series names, labels from tags, a real HTTP scrape parsed with
prometheus-client's text parser, and the listener syntax."""

from __future__ import annotations

import math
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from strom.metrics import CumulativeSum, Gauge, Max, MetricConfig, Metrics, Rate
from strom.metrics.prometheus import KafkaMetricsCollector, MetricsHttpServer, parse_listener, prometheus_name
from strom.testing.mock_time import MockTime

pytestmark = pytest.mark.unit


def producer_like_registry() -> tuple[Metrics, MockTime]:
    time = MockTime()
    metrics = Metrics(MetricConfig(2, 1000, tags={"client-id": "p-1"}), time=time)
    send = metrics.sensor("records-sent")
    send.add(metrics.metric_name("record-send-total", "producer-metrics"), CumulativeSum())
    send.add(metrics.metric_name("record-send-rate", "producer-metrics"), Rate())
    topic = metrics.sensor("topic.orders.records-per-batch", None, send)
    topic.add(metrics.metric_name("record-send-total", "producer-topic-metrics", tags={"topic": "orders"}),
              CumulativeSum())
    latency = metrics.sensor("request-latency")
    latency.add(metrics.metric_name("request-latency-max", "producer-metrics"), Max())
    metrics.add_metric(metrics.metric_name("version", "app-info"), Gauge(lambda: "3.7.0"))
    topic.record(250)
    time.sleep(1000)
    return metrics, time


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_names_follow_the_jmx_exporter_rule() -> None:
    assert prometheus_name("kafka.producer", "producer-metrics", "record-send-rate") == \
        "kafka_producer_producer_metrics_record_send_rate"
    assert prometheus_name("kafka.admin.client", "admin-client-node-metrics", "request-latency-avg") == \
        "kafka_admin_client_admin_client_node_metrics_request_latency_avg"


def test_collector_exposes_every_numeric_metric_with_tags_as_labels() -> None:
    metrics, _ = producer_like_registry()
    families = {f.name: f for f in KafkaMetricsCollector(metrics, "kafka.producer").collect()}
    assert "kafka_app_info_version" not in str(families)  # string gauges are skipped
    total = families["kafka_producer_producer_metrics_record_send_total"].samples
    assert [(s.labels, s.value) for s in total] == [({"client_id": "p-1"}, 250.0)]
    topic = families["kafka_producer_producer_topic_metrics_record_send_total"].samples
    assert [(s.labels, s.value) for s in topic] == [({"client_id": "p-1", "topic": "orders"}, 250.0)]
    assert families["kafka_producer_producer_metrics_record_send_rate"].samples[0].value == pytest.approx(250.0)
    assert math.isnan(families["kafka_producer_producer_metrics_request_latency_max"].samples[0].value)


def test_http_server_serves_a_scrape_that_prometheus_parses() -> None:
    metrics, time = producer_like_registry()
    with MetricsHttpServer(metrics, "127.0.0.1", 0, domain="kafka.producer") as server:
        with urllib.request.urlopen(server.url, timeout=10) as resp:
            assert resp.status == 200
            assert resp.headers["Content-Type"].startswith("text/plain")
            got = samples(resp.read().decode())
        assert got[("kafka_producer_producer_metrics_record_send_total", (("client_id", "p-1"),))] == 250.0
        assert got[("kafka_producer_producer_topic_metrics_record_send_total",
                    (("client_id", "p-1"), ("topic", "orders")))] == 250.0
        assert got[("kafka_producer_kafka_metrics_count_count", (("client_id", "p-1"),))] == float(len(metrics.metrics()))
        metrics.sensor("topic.orders.records-per-batch").record(50)  # a scrape reads current values
        with urllib.request.urlopen(server.url, timeout=10) as resp:
            got = samples(resp.read().decode())
        assert got[("kafka_producer_producer_metrics_record_send_total", (("client_id", "p-1"),))] == 300.0
    with pytest.raises(OSError):
        urllib.request.urlopen(server.url, timeout=2)


@pytest.mark.parametrize("listener, expected", [
    ("", None), ("http://127.0.0.1:9404", ("127.0.0.1", 9404)), ("http://0.0.0.0:0/", ("0.0.0.0", 0)),
])
def test_listener_syntax(listener: str, expected: tuple[str, int] | None) -> None:
    assert parse_listener(listener) == expected


@pytest.mark.parametrize("listener", ["127.0.0.1:9404", "https://h:1", "http://h", "http://h:99999",
                                      "http://h:1/metrics"])
def test_bad_listeners_are_rejected_with_the_key_named(listener: str) -> None:
    with pytest.raises(ValueError, match="metrics.prometheus.listener"):
        parse_listener(listener)


def test_a_group_may_carry_its_own_domain() -> None:
    """Broker-style names from one registry: kafka_network_requestmetrics_requests_total{request="Produce"},
    kafka_server_replicamanager_underreplicatedpartitions, percentiles as a quantile label."""
    time = MockTime()
    metrics = Metrics(MetricConfig(), time=time)
    requests = metrics.sensor("requests.Produce")
    requests.add(metrics.metric_name("requests-total", "kafka.network:RequestMetrics", tags={"request": "Produce"}),
                 CumulativeSum())
    metrics.add_metric(metrics.metric_name("UnderReplicatedPartitions", "ReplicaManager"), Gauge(lambda: 2))
    requests.record(3)
    got = {(f.name, tuple(sorted(s.labels.items())), s.value)
           for f in KafkaMetricsCollector(metrics, "kafka.server").collect() for s in f.samples}
    assert ("kafka_network_requestmetrics_requests_total", (("request", "Produce"),), 3.0) in got
    assert ("kafka_server_replicamanager_underreplicatedpartitions", (), 2.0) in got


def test_fifty_concurrent_scrapes_while_sensors_record() -> None:
    """Scrapes run on the server's threads and read through the sensors' locks: 50 at once all parse, and the
    recording thread is never stopped by them."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    metrics, _ = producer_like_registry()
    sensor = metrics.sensor("topic.orders.records-per-batch")
    stop = threading.Event()
    recorded = [0]

    def record() -> None:
        while not stop.wait(0.001):
            sensor.record(1)
            recorded[0] += 1

    writer = threading.Thread(target=record)
    with MetricsHttpServer(metrics, "127.0.0.1", 0, domain="kafka.producer") as server:
        writer.start()
        try:
            before = recorded[0]
            with ThreadPoolExecutor(50) as pool:
                results = list(pool.map(lambda _: samples(urllib.request.urlopen(server.url, timeout=30).read()
                                                          .decode()), range(50)))
            assert recorded[0] > before
        finally:
            stop.set()
            writer.join()
    key = ("kafka_producer_producer_topic_metrics_record_send_total", (("client_id", "p-1"), ("topic", "orders")))
    totals = [r[key] for r in results]
    assert len(totals) == 50 and all(t >= 250 for t in totals)
