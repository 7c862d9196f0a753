"""docs/grafana/strom-clients.json queries only series that strom exports: every name in every panel's
expression is produced by the naming rule from metrics the clients and the console really register."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from strom.admin import AdminClient
from strom.common.structs import TopicPartition
from strom.consumer import KafkaConsumer
from strom.consumer.internals.fetch_metrics import FetchMetricsManager
from strom.metrics import Metrics
from strom.metrics.prometheus import prometheus_name
from strom.producer import KafkaProducer
from strom.producer.internals.sender_metrics import SenderMetrics
from strom.ui.cluster_view import ClusterView

pytestmark = pytest.mark.unit

DASHBOARD = Path(__file__).resolve().parents[3] / "docs" / "grafana" / "strom-clients.json"


def exported_names() -> set[str]:
    names: set[str] = set()
    bootstrap = {"bootstrap.servers": "127.0.0.1:1"}
    producer = KafkaProducer(bootstrap, key_serializer="bytes", value_serializer="bytes")
    consumer = KafkaConsumer({**bootstrap, "group.id": "g"}, key_deserializer="bytes", value_deserializer="bytes")
    admin = AdminClient(bootstrap)
    try:
        for client, domain in ((producer, "kafka.producer"), (consumer, "kafka.consumer"),
                               (admin, "kafka.admin.client")):
            names |= {prometheus_name(domain, n.group, n.name) for n in client.metrics()}
    finally:
        producer.close(0)
        consumer.close(0)
        admin.close(0)
    # the per-topic and per-partition metrics appear once a topic is sent to / a partition fetched
    metrics = Metrics()
    SenderMetrics(metrics, lambda: 0, lambda: 0.0).record_batch_sent("t", 1, 100, 0, None, 0)
    FetchMetricsManager(metrics).record_partition_fetch(TopicPartition("t", 0), 1, 1, 1, 0)
    names |= {prometheus_name("kafka.producer", n.group, n.name) for n in metrics.metrics()}
    names |= {prometheus_name("kafka.consumer", n.group, n.name) for n in metrics.metrics()}
    view = ClusterView.__new__(ClusterView)  # the console's sensors without a cluster
    view.metrics, view._sensors = Metrics(), {}
    view._sensor("topic.t.messages-in", "console-topic-metrics", {"topic": "t"})
    names |= {prometheus_name("strom.ui", n.group, n.name) for n in view.metrics.metrics()}
    names.add("kafka_consumergroup_lag")  # strom.ui.app.LagCollector
    return names


def test_every_dashboard_query_names_an_exported_series() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    assert len(exprs) >= 10
    wanted = {m for e in exprs for m in re.findall(r"\b(?:kafka|strom)_[a-z0-9_]+", e)}
    missing = wanted - exported_names()
    assert not missing, f"dashboard queries series nobody exports: {sorted(missing)}"
