"""Consumer metrics with exact values: KafkaConsumer over a MockClient-backed fake broker and MockTime."""

from __future__ import annotations

import pytest

from strom.common.structs import TopicPartition
from strom.consumer.internals.heartbeat import HeartbeatThread
from strom.metrics import metric_values
from strom.testing.mock_time import MockTime

from .fake_broker import FakeBroker

pytestmark = [pytest.mark.component, pytest.mark.timeout(60)]

T = "topic"
TP0, TP1 = TopicPartition(T, 0), TopicPartition(T, 1)


@pytest.fixture(autouse=True)
def no_heartbeat_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(HeartbeatThread, "start", lambda self: None)


def test_lag_lead_records_and_group_metrics_are_exact() -> None:
    broker = FakeBroker({T: 2}, time=MockTime(auto_tick_ms=1))
    broker.produce(TP0, 7)
    broker.produce(TP1, 4)
    c = broker.consumer(group_id="g", auto_offset_reset="earliest", enable_auto_commit=False, max_poll_records=3,
                        client_id="exact")
    c.subscribe([T])
    records = broker.run(c, lambda rs: len(rs) >= 5)
    metrics = c.metrics()
    assert {n.tags["client-id"] for n in metrics} == {"exact"}
    for tp, end in ((TP0, 7), (TP1, 4)):
        handed = sum(1 for r in records if r.partition == tp.partition)
        values = metric_values(metrics, "consumer-fetch-manager-metrics", topic=T, partition=str(tp.partition))
        if handed:  # recorded each time the application is handed the partition's data
            assert values["records-lag"] == end - c.position(tp)
            assert values["records-lead"] == c.position(tp)  # log start offset 0
    manager = metric_values(metrics, "consumer-fetch-manager-metrics")
    assert manager["records-consumed-total"] == len(records)
    assert metric_values(metrics, "consumer-fetch-manager-metrics", topic=T)["records-consumed-total"] == len(records)
    assert manager["fetch-total"] >= 1
    c.commit_sync()
    group = metric_values(metrics, "consumer-coordinator-metrics")
    assert group["assigned-partitions"] == 2
    assert (group["join-total"], group["sync-total"], group["rebalance-total"]) == (1, 1, 1)
    assert group["failed-rebalance-total"] == 1  # MEMBER_ID_REQUIRED, as Kafka counts it
    assert group["commit-total"] == 1
    assert group["commit-latency-max"] == group["commit-latency-avg"] >= 0
    c.close()


def test_rebalance_latency_and_poll_gap_follow_the_clock() -> None:
    time = MockTime(auto_tick_ms=0)
    broker = FakeBroker({T: 1}, time=time)
    broker.produce(TP0, 2)
    c = broker.consumer(group_id="g", auto_offset_reset="earliest", enable_auto_commit=False)
    c.subscribe([T])
    broker.run(c, lambda rs: len(rs) >= 2)
    group = metric_values(c.metrics(), "consumer-coordinator-metrics")
    assert group["rebalance-latency-max"] == 0  # answered at once, and the clock did not move
    time.sleep(7_000)
    c.poll(timeout_ms=0)
    polls = metric_values(c.metrics(), "consumer-metrics")
    assert polls["time-between-poll-max"] == 7_000 and polls["last-poll-seconds-ago"] == 0
    time.sleep(3_000)
    assert metric_values(c.metrics(), "consumer-coordinator-metrics")["last-rebalance-seconds-ago"] == 10
    c.close()
