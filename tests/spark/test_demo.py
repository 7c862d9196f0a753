"""The demo pipeline end to end on a small input, against a plain-Python computation of the same aggregates."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from strom.broker_process import BrokerProcess
from strom.spark.demo_pipeline import DemoConfig, expected_counts, format_table, generate_events, run_pipeline

pytestmark = [pytest.mark.spark, pytest.mark.timeout(240)]


def test_expected_counts_is_a_plain_group_by() -> None:
    cfg = DemoConfig(events=50, event_span_s=120)
    events = generate_events(cfg)
    assert generate_events(cfg) == events  # deterministic
    counts = expected_counts(events + [{"user": None, "page": None, "ts": "2025-01-01T13:00:00.000Z"}], 60)
    assert sum(counts.values()) == 50
    by_page = Counter(e["page"] for e in events)
    assert {p: sum(v for (_, q), v in counts.items() if q == p) for p in by_page} == by_page
    assert "total" in format_table(counts)


def test_demo_pipeline_matches_plain_python(spark: Any, broker: BrokerProcess, tmp_path: Path) -> None:
    cfg = DemoConfig(events=400, event_span_s=300, events_per_s=None, trigger_s=0.5, max_offsets_per_trigger=150,
                     clicks_topic="t_clicks", counts_topic="t_counts", timeout_s=180)
    t = time.monotonic()
    lines: list[str] = []
    result = run_pipeline(spark, broker.bootstrap, cfg, tmp_path, say=lines.append)
    assert result.expected == expected_counts(generate_events(cfg), cfg.window_s)
    assert sum(result.expected.values()) == 400 and len({w for w, _ in result.expected}) >= 5
    assert result.from_topic == result.expected
    assert result.from_parquet == result.expected
    assert any("closing heartbeat" in line for line in lines)
    print(f"demo pipeline: {result.batches} batches, {time.monotonic() - t:.1f}s")


@pytest.mark.cluster
def test_demo_pipeline_on_a_replicated_cluster(spark: Any, tmp_path: Path) -> None:
    """The same job against a ZooKeeper + 3-broker cluster: its topics get 3 replicas, the answer is the same."""
    from strom.admin import AdminClient
    from strom.testing.cluster import LocalCluster

    cfg = DemoConfig(events=200, event_span_s=180, events_per_s=None, trigger_s=0.5, max_offsets_per_trigger=100,
                     clicks_topic="c_clicks", counts_topic="c_counts", timeout_s=180)
    with LocalCluster(3) as cluster:
        result = run_pipeline(spark, cluster.bootstrap, cfg, tmp_path, say=lambda _line: None)
        assert result.from_topic == result.expected == expected_counts(generate_events(cfg), cfg.window_s)
        assert result.from_parquet == result.expected
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        try:
            desc = admin.describe_topics(["c_clicks"])["c_clicks"].result(30)
        finally:
            admin.close()
        assert all(len(p.replicas) == 3 for p in desc.partitions)
