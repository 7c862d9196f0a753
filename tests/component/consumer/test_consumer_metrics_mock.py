"""Consumer metrics with exact values: KafkaConsumer over a MockClient-backed fake broker and MockTime."""

from __future__ import annotations

import math
from typing import Any

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


def _group_member_that_read_two_records(time: MockTime) -> Any:
    """A consumer of group ``g`` over a fake broker on ``time``, after it joined and read the topic's 2 records."""
    broker = FakeBroker({T: 1}, time=time)
    broker.produce(TP0, 2)
    c = broker.consumer(group_id="g", auto_offset_reset="earliest", enable_auto_commit=False)
    c.subscribe([T])
    broker.run(c, lambda rs: len(rs) >= 2)
    return c


def test_rebalance_latency_and_poll_gap_follow_the_clock() -> None:
    time = MockTime(auto_tick_ms=0)
    c = _group_member_that_read_two_records(time)
    group = metric_values(c.metrics(), "consumer-coordinator-metrics")
    assert group["rebalance-latency-max"] == 0  # answered at once, and the clock did not move
    time.sleep(7_000)
    c.poll(timeout_ms=0)
    polls = metric_values(c.metrics(), "consumer-metrics")
    assert polls["time-between-poll-max"] == 7_000 and polls["last-poll-seconds-ago"] == 0
    time.sleep(3_000)
    assert metric_values(c.metrics(), "consumer-coordinator-metrics")["last-rebalance-seconds-ago"] == 10
    c.close()


def test_poll_idle_ratio_follows_the_clock() -> None:
    """Kafka's poll-idle-ratio-avg (each poll's time over the time since the previous poll started) on a clock
    that moves only when told."""
    time = MockTime(auto_tick_ms=0)
    c = _group_member_that_read_two_records(time)
    consumer_metrics = metric_values(c.metrics(), "consumer-metrics")
    assert consumer_metrics["commit-sync-time-ns-total"] == 0 and consumer_metrics["committed-time-ns-total"] == 0
    # so far every poll took no time right after another: the ratio is undefined and nothing was recorded
    assert math.isnan(consumer_metrics["poll-idle-ratio-avg"])
    time.sleep(300)  # the application processes the records for 300 ms
    c.poll(timeout_ms=0)  # records or not, it returns at once: 0 of the 300 ms were spent polling
    assert metric_values(c.metrics(), "consumer-metrics")["poll-idle-ratio-avg"] == 0
    fetch = c._poll_for_fetches

    def slow_fetch(*args: Any) -> Any:  # a poll that waits 100 ms for its fetch
        time.sleep(100)
        return fetch(*args)

    c._poll_for_fetches = slow_fetch  # type: ignore[method-assign]
    c.poll(timeout_ms=0)  # straight after the last poll, the whole 100 ms in poll
    c._poll_for_fetches = fetch  # type: ignore[method-assign]
    assert metric_values(c.metrics(), "consumer-metrics")["poll-idle-ratio-avg"] == pytest.approx((0 + 1) / 2)
    time.sleep(100)
    c.poll(timeout_ms=0)
    assert metric_values(c.metrics(), "consumer-metrics")["poll-idle-ratio-avg"] == pytest.approx((0 + 1 + 0) / 3)
    c.close()


def test_records_per_request_counts_a_response_once_all_its_partitions_are_consumed() -> None:
    """Kafka's records-per-request-avg: the records of one fetch response (7 + 4 here, handed out 3 at a time),
    recorded when the last of its partitions has been consumed, not before."""
    broker = FakeBroker({T: 2}, time=MockTime(auto_tick_ms=1))
    broker.produce(TP0, 7)
    broker.produce(TP1, 4)
    c = broker.consumer(auto_offset_reset="earliest", max_poll_records=3)
    c.assign([TP0, TP1])
    got = list(broker.run(c, lambda rs: len(rs) >= 3))
    assert len(got) == 3  # one response holds both partitions; 8 of its records are still buffered
    per_request = lambda: metric_values(c.metrics(), "consumer-fetch-manager-metrics")["records-per-request-avg"]  # noqa: E731
    assert math.isnan(per_request())
    got += broker.run(c, lambda rs: len(got) + len(rs) >= 11)
    assert len(got) == 11 and per_request() == 11
    c.close()
