"""docs/grafana/strom-broker.json asks only for what a running broker exports: every series named in every panel's
query is in a real broker's ``/metrics`` scrape (after produce, consume and a committed group, with a producer and
a consumer pushing their metrics to it, KIP-714), with the labels the query groups by or matches on (``instance`` is
Prometheus's own scrape label)."""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from strom.admin import AdminClient
from strom.admin.models import AlterConfigOp, ConfigResource, ConfigResourceType
from strom.broker_process import BrokerProcess, free_port
from strom.common.structs import OffsetAndMetadata, TopicPartition
from strom.consumer import KafkaConsumer
from strom.producer import KafkaProducer

pytestmark = pytest.mark.integration

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "strom-broker.json"
SCRAPE_LABELS = {"instance", "job"}


@pytest.fixture(scope="module")
def scrape_url() -> Iterator[str]:
    url = f"http://127.0.0.1:{free_port()}"
    b = BrokerProcess(overrides={"metrics.prometheus.listener": url, "group.initial.rebalance.delay.ms": "0"})
    b.start()
    stop = threading.Event()
    pusher: threading.Thread | None = None
    try:
        with AdminClient({"bootstrap.servers": b.bootstrap}) as admin:  # every client pushes all its metrics
            admin.incremental_alter_configs({ConfigResource(ConfigResourceType.CLIENT_METRICS, "all"): [
                AlterConfigOp("metrics", "*"), AlterConfigOp("interval.ms", "200")]}).all().result(30)
        with KafkaProducer({"bootstrap.servers": b.bootstrap}, key_serializer="bytes",
                           value_serializer="bytes") as producer:
            for i in range(50):
                producer.send("dash", b"v%d" % i)
            producer.flush(30)
        with KafkaConsumer({"bootstrap.servers": b.bootstrap, "group.id": "dash-readers",
                            "auto.offset.reset": "earliest"}, key_deserializer="bytes",
                           value_deserializer="bytes") as consumer:
            consumer.subscribe(["dash"])
            seen, deadline = 0, time.monotonic() + 30
            while seen < 25:  # half: the group keeps a lag of 25
                assert time.monotonic() < deadline, "records not consumed"
                seen += consumer.poll(0.5).count()
            consumer.commit_sync({TopicPartition("dash", 0): OffsetAndMetadata(25)})
        # A producer and a consumer that stay, pushing their metrics (a closed client's series go).
        producer = KafkaProducer({"bootstrap.servers": b.bootstrap, "client.id": "dash-pusher"},
                                 key_serializer="bytes", value_serializer="bytes")
        consumer = KafkaConsumer({"bootstrap.servers": b.bootstrap, "client.id": "dash-pusher-c",
                                  "group.id": "dash-pushers", "auto.offset.reset": "earliest"},
                                 key_deserializer="bytes", value_deserializer="bytes")
        consumer.subscribe(["dash"])

        def push() -> None:  # (the consumer's I/O, pushes included, runs in poll)
            while not stop.is_set():
                producer.send("dash-pushed", b"x")
                consumer.poll(0.2)
            producer.close(5)
            consumer.close(5)

        pusher = threading.Thread(target=push, name="dash-pusher", daemon=True)
        pusher.start()
        yield url + "/metrics"
    finally:
        stop.set()
        if pusher is not None:
            pusher.join(30)
        b.stop()
        b.cleanup()


def samples(url: str) -> dict[str, list[dict[str, str]]]:
    with urllib.request.urlopen(url, timeout=30) as resp:
        text = resp.read().decode()
    out: dict[str, list[dict[str, str]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append(dict(s.labels))
    return out


def test_every_panel_queries_exported_series_with_their_labels(scrape_url: str) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    assert len(dashboard["panels"]) >= 15 and len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])
    wanted = {m for e in exprs for m in re.findall(r"\b(?:org_apache_)?kafka_[a-z0-9_]+", e)}
    # the group lag is computed by a sampler: wait for every series to be there once
    deadline = time.monotonic() + 30
    while True:
        exported = samples(scrape_url)
        missing = wanted - exported.keys()
        if not missing or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert not missing, f"dashboard series the broker does not export: {sorted(missing)}"
    problems = []
    for expr in exprs:
        grouped = {lbl.strip() for g in re.findall(r"by \(([^)]*)\)", expr) for lbl in g.split(",")} - SCRAPE_LABELS
        for name, matchers in re.findall(r"\b((?:org_apache_)?kafka_[a-z0-9_]+)(\{[^}]*\})?", expr):
            series = exported[name]
            for label in grouped:
                if not any(label in s for s in series) and not re.search(rf"\b{label}\b", matchers or ""):
                    problems.append(f"{name} has no label {label!r} ({expr})")
            for label, op, value in re.findall(r'(\w+)\s*(!=|=~|=)\s*"([^"]*)"', matchers or ""):
                if op == "=" and value == "":
                    ok = any(label not in s for s in series)  # the series without the label (the all-topics total)
                elif op == "=":
                    ok = any(s.get(label) == value for s in series)
                else:
                    ok = any(label in s for s in series)
                if not ok:
                    problems.append(f"{name}{{{label}{op}\"{value}\"}} matches no exported series ({expr})")
    assert problems == []
    lag = [s for s in exported["kafka_consumergroup_lag"] if s.get("consumergroup") == "dash-readers"]
    assert lag, "the committed group has a lag series"
