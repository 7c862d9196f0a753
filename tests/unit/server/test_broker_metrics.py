"""Pieces of the broker's metrics that need no broker: request-time windows, error counting, the Prometheus
names of broker meters."""

from __future__ import annotations

import math
import random

from strom.common.error_codes import ErrorCode
from strom.metrics import MetricConfig
from strom.metrics.prometheus import prometheus_name
from strom.protocol.messages.fetch import FetchResponse
from strom.server.broker_metrics import _RequestTimeWindows, error_counts


def test_request_time_quantiles_interpolate_like_yammer_and_expire_with_the_windows() -> None:
    w = _RequestTimeWindows(MetricConfig(samples=2, time_window_ms=1000))
    assert math.isnan(w.quantile_ms(0, 50.0, 0))
    for i in range(1, 101):  # 1..100 ms total, queue 0, local = total, remote 0
        w.record(10, (i * 1000, 0, i * 1000, 0))
    assert w.quantile_ms(0, 50.0, 10) == 50.5  # position 0.5 * 101 = 50.5 between 50 and 51
    assert w.quantile_ms(0, 99.0, 10) == 99.99
    assert w.quantile_ms(0, 99.9, 10) == 100.0
    assert w.quantile_ms(3, 99.0, 10) == 0.0
    w.record(1500, (7000, 0, 7000, 0))  # a second window
    assert w.quantile_ms(0, 0.0, 1500) == 1.0
    # Two windows of 1 s: at 2011 the first window (started at 10) is out, only the 7 ms request is left.
    assert w.quantile_ms(0, 50.0, 2011) == 7.0
    w.record(3000, (2000, 0, 2000, 0))  # reuses the oldest window
    assert w.quantile_ms(0, 50.0, 3000) == 4.5


def test_reservoir_keeps_at_most_1028_samples_of_any_number_of_requests() -> None:
    w = _RequestTimeWindows(MetricConfig(samples=1, time_window_ms=60_000))
    w._random = random.Random(1)  # deterministic replacement choices
    for i in range(10_000):
        w.record(0, (i, 0, i, 0))
    assert len(w._windows[0][2]) == 1028 and w._windows[0][1] == 10_000
    assert 3_000 < w.quantile_ms(0, 50.0, 0) * 1000 < 7_000  # a uniform sample of 0..9999


def test_error_counts_walk_every_error_code_of_a_response() -> None:
    part = FetchResponse.PartitionData
    resp = FetchResponse(error_code=0, responses=[
        FetchResponse.FetchableTopicResponse(topic="a", partitions=[
            part(partition_index=0, error_code=ErrorCode.NONE),
            part(partition_index=1, error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER)]),
        FetchResponse.FetchableTopicResponse(topic="b", partitions=[
            part(partition_index=0, error_code=ErrorCode.OFFSET_OUT_OF_RANGE)])])
    assert error_counts(resp) == {ErrorCode.NONE: 2, ErrorCode.NOT_LEADER_OR_FOLLOWER: 1,
                                  ErrorCode.OFFSET_OUT_OF_RANGE: 1}


def test_meters_follow_the_jmx_exporter_persec_rule() -> None:
    assert prometheus_name("kafka.server", "BrokerTopicMetrics", "MessagesInPerSec") == \
        "kafka_server_brokertopicmetrics_messagesin_total"
    assert prometheus_name("kafka.network", "RequestMetrics", "TotalTimeMs") == "kafka_network_requestmetrics_totaltimems"
    assert prometheus_name("kafka.producer", "producer-metrics", "record-send-rate") == \
        "kafka_producer_producer_metrics_record_send_rate"
