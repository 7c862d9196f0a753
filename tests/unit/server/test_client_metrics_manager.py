"""Client metrics subscriptions and pushes (KIP-714) as the broker's ClientMetricsManager decides them, on a mock
clock: who is subscribed to what, when a client may ask or push again, and what a bad push is answered."""

from __future__ import annotations

import uuid

import pytest

from strom.common.error_codes import ErrorCode
from strom.metrics.otlp import CUMULATIVE, DELTA, GAUGE, SUM, DataPoint, MetricPoints, encode_metrics_data
from strom.record.compression import CompressionType, compress
from strom.server.client_metrics_manager import (
    INTERVAL_MS_DEFAULT,
    ClientInstanceMetadata,
    ClientMetricsConfigError,
    ClientMetricsManager,
)
from strom.server.client_telemetry import ClientTelemetryStore
from strom.testing.mock_time import MockTime

ZERO = uuid.UUID(int=0)
CLIENT = ("app-1", "confluent-kafka-python", "2.16.1", "127.0.0.1", "40000")


def _manager(max_bytes: int = 1 << 20) -> tuple[ClientMetricsManager, list[tuple[ClientInstanceMetadata, bytes]],
                                                  MockTime]:
    got: list[tuple[ClientInstanceMetadata, bytes]] = []
    time = MockTime()
    m = ClientMetricsManager([lambda md, payload, _interval: got.append((md, payload))], max_bytes, time)
    return m, got, time


def _payload(value: float = 1.0, name: str = "org.apache.kafka.producer.record.queue.time.avg") -> bytes:
    return encode_metrics_data([MetricPoints(name, GAUGE, 0, False, (DataPoint((), 1, value),), ())])


def test_a_client_gets_an_instance_id_and_the_subscriptions_it_matches() -> None:
    m, _got, _time = _manager()
    m.update_subscription("producers", {"metrics": "org.apache.kafka.producer.", "interval.ms": "2000",
                                        "match": "client_id=app-.*,client_software_name=confluent.*"})
    m.update_subscription("others", {"metrics": "org.apache.kafka.consumer.", "interval.ms": "500",
                                     "match": "client_id=other"})
    r = m.get_subscriptions(ZERO, *CLIENT)
    assert r.error_code == ErrorCode.NONE and r.client_instance_id != ZERO
    assert r.requested_metrics == ("org.apache.kafka.producer.",) and r.push_interval_ms == 2000
    assert r.accepted_compression_types[0] == CompressionType.ZSTD and r.delta_temporality
    # A regex must match the whole value (Java's Pattern.matches): "app" alone is not "app-1".
    assert m.get_subscriptions(ZERO, "app", *CLIENT[1:]).requested_metrics == ()
    # No subscription matched: nothing requested, the default interval.
    nothing = m.get_subscriptions(ZERO, "x", *CLIENT[1:])
    assert nothing.requested_metrics == () and nothing.push_interval_ms == INTERVAL_MS_DEFAULT


def test_all_metrics_is_told_as_an_empty_prefix_and_overlapping_subscriptions_merge() -> None:
    m, _got, _time = _manager()
    m.update_subscription("a", {"metrics": "org.apache.kafka.producer.", "interval.ms": "3000"})
    m.update_subscription("b", {"metrics": "org.apache.kafka.consumer.,org.apache.kafka.producer.",
                                "interval.ms": "1000"})
    r = m.get_subscriptions(ZERO, *CLIENT)
    assert r.requested_metrics == ("org.apache.kafka.consumer.", "org.apache.kafka.producer.")
    assert r.push_interval_ms == 1000  # the lowest of the matched subscriptions
    m.update_subscription("c", {"metrics": "*"})
    assert m.get_subscriptions(ZERO, *CLIENT).requested_metrics == ("",)


def test_bad_subscriptions_are_refused_with_kafkas_error_codes() -> None:
    m, _got, _time = _manager()
    for configs, code in (({"metrics": "a", "colour": "red"}, ErrorCode.INVALID_REQUEST),
                          ({"interval.ms": "99"}, ErrorCode.INVALID_REQUEST),
                          ({"interval.ms": "3600001"}, ErrorCode.INVALID_REQUEST),
                          ({"interval.ms": "soon"}, ErrorCode.INVALID_REQUEST),
                          ({"match": "client_colour=red"}, ErrorCode.INVALID_CONFIG),
                          ({"match": "client_id"}, ErrorCode.INVALID_CONFIG),
                          ({"match": "client_id=[unclosed"}, ErrorCode.INVALID_CONFIG)):
        with pytest.raises(ClientMetricsConfigError) as e:
            m.update_subscription("s", configs)
        assert e.value.error_code == code, configs
    with pytest.raises(ClientMetricsConfigError):
        m.update_subscription("", {"metrics": "a"})
    assert m.subscriptions == {}


def test_requests_before_the_push_interval_are_throttled() -> None:
    m, got, time = _manager()
    m.update_subscription("s", {"metrics": "*", "interval.ms": "1000"})
    r = m.get_subscriptions(ZERO, *CLIENT)
    iid, sid = r.client_instance_id, r.subscription_id
    # Asking again at once: too early.
    assert m.get_subscriptions(iid, *CLIENT).error_code == ErrorCode.THROTTLING_QUOTA_EXCEEDED
    # The first push right after the subscription is taken whenever it comes (clients add jitter) ...
    assert m.push(iid, sid, False, 0, _payload(), *CLIENT) == (ErrorCode.NONE, None)
    # ... the next only a push interval later.
    assert m.push(iid, sid, False, 0, _payload(), *CLIENT)[0] == ErrorCode.THROTTLING_QUOTA_EXCEEDED
    time.sleep(1000)
    assert m.push(iid, sid, False, 0, _payload(2.0), *CLIENT)[0] == ErrorCode.NONE
    assert len(got) == 2 and got[1][0].client_id == "app-1" and got[1][1] == _payload(2.0)
    assert m.throttled == 2


def test_a_changed_subscription_makes_the_old_subscription_id_unknown() -> None:
    m, got, time = _manager()
    m.update_subscription("s", {"metrics": "org.apache.kafka.producer.", "interval.ms": "1000"})
    r = m.get_subscriptions(ZERO, *CLIENT)
    m.update_subscription("s", {"metrics": "org.apache.kafka.", "interval.ms": "1000"})
    code, message = m.push(r.client_instance_id, r.subscription_id, False, 0, _payload(), *CLIENT)
    assert code == ErrorCode.UNKNOWN_SUBSCRIPTION_ID and message and not got
    # The client asks again at once (not throttled after UNKNOWN_SUBSCRIPTION_ID) and gets the new subscription.
    again = m.get_subscriptions(r.client_instance_id, *CLIENT)
    assert again.error_code == ErrorCode.NONE and again.requested_metrics == ("org.apache.kafka.",)
    assert again.subscription_id != r.subscription_id
    # Its next push a push interval after the refused one (as Kafka's broker counts it).
    assert m.push(r.client_instance_id, again.subscription_id, False, 0, _payload(), *CLIENT)[0] == \
        ErrorCode.THROTTLING_QUOTA_EXCEEDED
    time.sleep(1000)
    assert m.push(r.client_instance_id, again.subscription_id, False, 0, _payload(), *CLIENT)[0] == ErrorCode.NONE
    m.update_subscription("s", {})  # deleted: the client is subscribed to nothing
    assert m.get_subscriptions(r.client_instance_id, *CLIENT).requested_metrics == ()


def test_bad_pushes() -> None:
    m, got, time = _manager(max_bytes=2000)
    m.update_subscription("s", {"metrics": "*", "interval.ms": "100"})
    r = m.get_subscriptions(ZERO, *CLIENT)
    iid, sid = r.client_instance_id, r.subscription_id

    def push(*, compression: int = 0, payload: bytes | None = None, terminating: bool = False,
             instance: uuid.UUID = iid) -> int:
        time.sleep(100)
        return m.push(instance, sid, terminating, compression, _payload() if payload is None else payload, *CLIENT)[0]

    assert push(instance=ZERO) == ErrorCode.INVALID_REQUEST
    assert push(compression=9) == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    assert push(payload=b"x" * 2001) == ErrorCode.TELEMETRY_TOO_LARGE
    # Compressed under the limit, over it once decompressed.
    assert push(compression=CompressionType.ZSTD, payload=compress(CompressionType.ZSTD, b"\0" * 50_000)) == \
        ErrorCode.TELEMETRY_TOO_LARGE
    assert push(payload=b"\xff\xff\xff") == ErrorCode.NONE  # (this receiver takes any bytes)
    assert push(compression=CompressionType.LZ4, payload=b"not lz4") == ErrorCode.INVALID_RECORD
    assert push(compression=CompressionType.ZSTD, payload=compress(CompressionType.ZSTD, _payload(7.0))) == \
        ErrorCode.NONE
    assert got[-1][1] == _payload(7.0)
    assert push(terminating=True) == ErrorCode.NONE
    assert iid not in m.instances  # its last push: forgotten


def test_a_receiver_that_cannot_read_the_payload_answers_invalid_record() -> None:
    store = ClientTelemetryStore()
    time = MockTime()
    m = ClientMetricsManager([store.receive], 1 << 20, time)
    m.update_subscription("s", {"metrics": "*"})
    r = m.get_subscriptions(ZERO, *CLIENT)
    assert m.push(r.client_instance_id, r.subscription_id, False, 0, b"\x0a\xff\xff", *CLIENT)[0] == \
        ErrorCode.INVALID_RECORD


def test_an_idle_client_instance_is_forgotten_with_its_series() -> None:
    store = ClientTelemetryStore()
    time = MockTime()
    m = ClientMetricsManager([store.receive], 1 << 20, time)
    m.on_instance_removed.append(store.forget)
    m.update_subscription("s", {"metrics": "*", "interval.ms": "30000"})
    r = m.get_subscriptions(ZERO, *CLIENT)
    assert m.push(r.client_instance_id, r.subscription_id, False, 0, _payload(), *CLIENT)[0] == ErrorCode.NONE
    assert store.values()
    time.sleep(90_000)  # 3 push intervals (more than the 60 s floor): still known
    m.get_subscriptions(ZERO, "someone-else", *CLIENT[1:])
    assert r.client_instance_id in m.instances
    time.sleep(1)
    m.get_subscriptions(ZERO, "someone-else", *CLIENT[1:])
    assert r.client_instance_id not in m.instances and not store.values()


def test_the_store_keeps_gauges_and_adds_up_delta_sums() -> None:
    store = ClientTelemetryStore()
    md = ClientInstanceMetadata(uuid.uuid4(), *CLIENT)
    resource = (("client_rack", "r1"),)

    def push(gauge: float, delta: float, cumulative: float) -> None:
        store.receive(md, encode_metrics_data([
            MetricPoints("org.apache.kafka.producer.node.request.latency.avg", GAUGE, 0, False,
                         (DataPoint((("node.id", "1"),), 1, gauge),), resource),
            MetricPoints("org.apache.kafka.producer.connection.creation.total", SUM, DELTA, True,
                         (DataPoint((), 1, delta),), resource),
            MetricPoints("org.apache.kafka.producer.record.send.total", SUM, CUMULATIVE, True,
                         (DataPoint((), 1, cumulative),), resource)]), 1000)

    push(2.5, 3, 10)
    push(1.5, 2, 12)
    labels = f"client_instance_id='{md.client_instance_id}',client_id='app-1'," \
             "client_software_name='confluent-kafka-python',client_software_version='2.16.1'"
    assert store.values() == {
        f"org_apache_kafka_producer_node_request_latency_avg{{{labels},node_id='1'}}": 1.5,
        f"org_apache_kafka_producer_connection_creation_total{{{labels}}}": 5.0,
        f"org_apache_kafka_producer_record_send_total{{{labels}}}": 12.0,
    }
    families = {f.name: f for f in store.collect()}
    latency = families["org_apache_kafka_producer_node_request_latency_avg"]
    assert [(s.labels["node_id"], s.labels["client_id"], s.value) for s in latency.samples] == [("1", "app-1", 1.5)]


def test_instances_are_capped_least_recently_seen_first() -> None:
    """A flood of new client instances (each GetTelemetrySubscriptions with a zero id makes one) cannot grow the
    broker's memory past the cap: the least recently seen go first, their series with them."""
    time = MockTime()
    forgotten: list[uuid.UUID] = []
    m = ClientMetricsManager([lambda md, payload, interval: None], 1 << 20, time, max_instances=3)
    m.on_instance_removed.append(forgotten.append)
    ids = [m.get_subscriptions(ZERO, f"c{i}", *CLIENT[1:]).client_instance_id for i in range(3)]
    time.sleep(1)
    m.get_subscriptions(ids[0], "c0", *CLIENT[1:])  # c0 is seen again: c1 is now the least recent
    fourth = m.get_subscriptions(ZERO, "c3", *CLIENT[1:]).client_instance_id
    assert forgotten == [ids[1]] and list(m.instances) == [ids[2], ids[0], fourth]


def test_a_client_cannot_push_more_series_than_the_cap() -> None:
    store = ClientTelemetryStore(max_series_per_client=3)
    md = ClientInstanceMetadata(uuid.uuid4(), *CLIENT)
    for i in range(5):
        store.receive(md, _payload(float(i), name=f"org.apache.kafka.producer.m{i}"), 1000)
    store.receive(md, _payload(9.0, name="org.apache.kafka.producer.m0"), 1000)  # a kept series still updates
    kept = store.values()
    assert len(kept) == 3 and store.dropped == 2
    assert [v for k, v in kept.items() if k.startswith("org_apache_kafka_producer_m0{")] == [9.0]
