"""The client side of KIP-714 (ClientTelemetrySender) on a mock clock against a scripted network client: what it
asks, when it pushes, what it pushes (names, attributes, deltas), and how it reacts to each broker answer."""

from __future__ import annotations

import random
import uuid
from types import SimpleNamespace
from typing import Any

from strom.common.error_codes import ErrorCode
from strom.common.structs import Node
from strom.metrics import Meter, Metrics, Value
from strom.metrics.otlp import DELTA, GAUGE, SUM, parse_metrics_data
from strom.network.api_versions import NodeApiVersions
from strom.network.telemetry_sender import (
    PUSH_NEEDED,
    SUBSCRIPTION_NEEDED,
    TERMINATED,
    ClientTelemetrySender,
    telemetry_metric_name,
)
from strom.protocol.api_keys import ApiKey
from strom.protocol.messages.get_telemetry_subscriptions import GetTelemetrySubscriptionsResponse
from strom.protocol.messages.push_telemetry import PushTelemetryResponse
from strom.record.compression import CompressionType, decompress
from strom.testing.mock_time import MockTime

IID = uuid.uuid4()


class FakeClient:
    """What the sender uses of a NetworkClient; records the requests it sends."""

    default_request_timeout_ms = 30_000
    reconnect_backoff_ms = 50
    log_context = ""

    def __init__(self, telemetry: bool = True) -> None:
        self.node = Node(1, "127.0.0.1", 9092)
        self.sent: list[Any] = []
        self.connected = True
        apis = NodeApiVersions.create()
        if not telemetry:
            apis = NodeApiVersions({k: v for k, v in apis.items()
                                    if k not in (ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, ApiKey.PUSH_TELEMETRY)})
        self.api_versions = SimpleNamespace(get=lambda node_id: apis)

    def least_loaded_node(self, now: int) -> Node | None:
        return self.node if self.connected else None

    def can_send_beyond_in_flight_limit(self, node_id: Any, now: int) -> bool:
        return self.connected

    def ready(self, node: Node, now: int) -> bool:
        return self.connected

    def new_client_request(self, node_id: Any, request: Any, now: int, expect_response: bool) -> Any:
        return request

    def send_internal(self, request: Any, now: int) -> None:
        self.sent.append(request)

    def wakeup(self) -> None:
        pass


def _sender(telemetry: bool = True) -> tuple[ClientTelemetrySender, FakeClient, MockTime, Metrics]:
    time = MockTime()
    metrics = Metrics(time=time)
    sender = ClientTelemetrySender(metrics, time, random.Random(7))
    client = FakeClient(telemetry)
    sender.bind(client)  # type: ignore[arg-type]
    return sender, client, time, metrics


def _subscription(metrics: list[str], interval: int = 1000, iid: uuid.UUID = IID,
                  error: int = 0) -> GetTelemetrySubscriptionsResponse:
    return GetTelemetrySubscriptionsResponse(
        error_code=error, client_instance_id=iid, subscription_id=42, push_interval_ms=interval,
        accepted_compression_types=[int(CompressionType.ZSTD), int(CompressionType.LZ4)], telemetry_max_bytes=1 << 20,
        delta_temporality=True, requested_metrics=metrics)


def test_metric_names_follow_javas_convention() -> None:
    assert telemetry_metric_name("producer-metrics", "record-queue-time-avg") == \
        "org.apache.kafka.producer.record.queue.time.avg"
    assert telemetry_metric_name("producer-node-metrics", "request-latency-avg") == \
        "org.apache.kafka.producer.node.request.latency.avg"
    assert telemetry_metric_name("consumer-fetch-manager-metrics", "records-lag-max") == \
        "org.apache.kafka.consumer.fetch.manager.records.lag.max"


def test_subscribe_then_push_the_subscribed_metrics_as_deltas_and_gauges() -> None:
    sender, client, time, metrics = _sender()
    sent = metrics.sensor("sent")
    sent.add(None, Meter(metrics.metric_name("record-send-rate", "producer-metrics"),
                         metrics.metric_name("record-send-total", "producer-metrics")))
    latency = metrics.sensor("latency")
    latency.add(metrics.metric_name("request-latency-max", "producer-node-metrics", tags={"node-id": "node-1",
                                                                                          "client-id": "p"}),
                Value())
    other = metrics.sensor("other")
    other.add(metrics.metric_name("records-lag-max", "consumer-fetch-manager-metrics"), Value())

    sender.maybe_update(time.milliseconds())
    assert len(client.sent) == 1 and client.sent[0].client_instance_id.int == 0  # asks for its id
    sender.handle_response(ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, _subscription(["org.apache.kafka.producer."]),
                           time.milliseconds())
    assert sender.instance_id == IID and sender.state == PUSH_NEEDED
    assert sender.client_instance_id(0) == IID
    # The first push is staggered: 0.5 to 1.5 push intervals later.
    wait = sender.maybe_update(time.milliseconds())
    assert 500 <= wait <= 1500 and len(client.sent) == 1
    for _ in range(3):
        sent.record()
    latency.record(12.0)
    time.sleep(wait)
    sender.maybe_update(time.milliseconds())
    push = client.sent[-1]
    assert push.client_instance_id == IID and push.subscription_id == 42 and not push.terminating
    assert push.compression_type == CompressionType.ZSTD  # the broker's first choice
    points = {m.name: m for m in parse_metrics_data(decompress(push.compression_type, push.metrics))}
    assert "org.apache.kafka.consumer.fetch.manager.records.lag.max" not in points  # not subscribed
    total = points["org.apache.kafka.producer.record.send.total"]
    assert (total.kind, total.temporality, total.monotonic, total.points[0].value) == (SUM, DELTA, True, 3.0)
    lat = points["org.apache.kafka.producer.node.request.latency.max"]
    assert lat.kind == GAUGE and lat.points[0].value == 12.0
    assert lat.points[0].attributes == (("node_id", "node-1"),)  # client-id left out: the broker knows it
    sender.handle_response(ApiKey.PUSH_TELEMETRY, PushTelemetryResponse(), time.milliseconds())
    sent.record()
    assert sender.maybe_update(time.milliseconds()) == 1000  # then every push interval
    time.sleep(1000)
    sender.maybe_update(time.milliseconds())
    points = {m.name: m for m in parse_metrics_data(decompress(client.sent[-1].compression_type,
                                                               client.sent[-1].metrics))}
    assert points["org.apache.kafka.producer.record.send.total"].points[0].value == 1.0  # the delta since


def test_broker_answers() -> None:
    sender, client, time, _m = _sender()
    sender.maybe_update(time.milliseconds())
    sender.handle_response(ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, _subscription([]), time.milliseconds())
    # Subscribed to nothing: no push, the subscription asked for again a push interval later.
    assert sender.state == SUBSCRIPTION_NEEDED and sender.maybe_update(time.milliseconds()) == 1000
    time.sleep(1000)
    sender.maybe_update(time.milliseconds())
    assert client.sent[-1].client_instance_id == IID  # (its id from now on)
    sender.handle_response(ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, _subscription([""]), time.milliseconds())
    time.sleep(1500)
    sender.maybe_update(time.milliseconds())
    # A stale subscription id: ask again at once.
    sender.handle_response(ApiKey.PUSH_TELEMETRY, PushTelemetryResponse(error_code=ErrorCode.UNKNOWN_SUBSCRIPTION_ID),
                           time.milliseconds())
    assert sender.state == SUBSCRIPTION_NEEDED and sender.maybe_update(time.milliseconds()) == 30_000
    assert isinstance(client.sent[-1], type(client.sent[0]))
    sender.handle_response(ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, _subscription([""]), time.milliseconds())
    time.sleep(1500)
    sender.maybe_update(time.milliseconds())
    # Throttled: the next push a push interval later.
    sender.handle_response(ApiKey.PUSH_TELEMETRY,
                           PushTelemetryResponse(error_code=ErrorCode.THROTTLING_QUOTA_EXCEEDED), time.milliseconds())
    assert sender.state == PUSH_NEEDED and sender.maybe_update(time.milliseconds()) == 1000
    # A lost request (disconnect) is tried again; INVALID_RECORD turns pushing off for good.
    time.sleep(1000)
    sender.maybe_update(time.milliseconds())
    sender.handle_failed_request(ApiKey.PUSH_TELEMETRY, time.milliseconds())
    assert sender.state == PUSH_NEEDED
    time.sleep(1000)
    sender.maybe_update(time.milliseconds())
    sender.handle_response(ApiKey.PUSH_TELEMETRY, PushTelemetryResponse(error_code=ErrorCode.INVALID_RECORD),
                           time.milliseconds())
    assert sender.state == TERMINATED and sender.maybe_update(time.milliseconds()) > 10**9


def test_close_sends_a_terminating_push_only_when_subscribed_and_connected() -> None:
    sender, client, time, _m = _sender()
    sender.maybe_update(time.milliseconds())
    sender.handle_response(ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, _subscription([""]), time.milliseconds())
    sender.initiate_close()
    sender.maybe_update(time.milliseconds())  # at once, not after the staggered interval
    assert client.sent[-1].terminating and not sender.wait_terminated(0)
    sender.handle_response(ApiKey.PUSH_TELEMETRY, PushTelemetryResponse(), time.milliseconds())
    assert sender.wait_terminated(0)

    unsubscribed, client2, time2, _m2 = _sender()
    unsubscribed.maybe_update(time2.milliseconds())
    unsubscribed.handle_response(ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, _subscription([]), time2.milliseconds())
    unsubscribed.initiate_close()
    unsubscribed.maybe_update(time2.milliseconds())
    assert unsubscribed.wait_terminated(0) and len(client2.sent) == 1  # nothing to push

    disconnected, client3, time3, _m3 = _sender()
    disconnected.maybe_update(time3.milliseconds())
    disconnected.handle_response(ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, _subscription([""]), time3.milliseconds())
    client3.connected = False
    disconnected.initiate_close()
    disconnected.maybe_update(time3.milliseconds())
    assert disconnected.wait_terminated(0) and len(client3.sent) == 1  # a close does not wait for a connection


def test_a_broker_without_the_telemetry_apis_turns_it_off() -> None:
    sender, client, time, _m = _sender(telemetry=False)
    assert sender.maybe_update(time.milliseconds()) > 10**9
    assert sender.state == TERMINATED and client.sent == []
    try:
        sender.client_instance_id(0)
    except Exception as e:  # noqa: BLE001
        assert "does not offer it" in str(e)
    else:
        raise AssertionError("client_instance_id() of a client whose telemetry is off")
