"""strom's KafkaProducer against librdkafka's mock cluster (an independent Kafka implementation), with fault
injection: codecs, NOT_LEADER_OR_FOLLOWER / REQUEST_TIMED_OUT on Produce, leader moves, a broker down and up.
The idempotent producer must lose nothing and duplicate nothing.

Per-partition order: librdkafka's mock checks producer sequences only for *transactional* producers
(``rd_kafka_mock_validate_records`` returns early without a transactional id — verified: it accepts a
1000-sequence gap from an idempotent producer). With 5 requests in flight Kafka's ordering guarantee relies on
the broker rejecting out-of-order sequences, so here order is asserted with
``max.in.flight.requests.per.connection=1`` (partition muting, which needs no broker help); the 5-in-flight
ordering and deduplication guarantees are checked against strom's broker, which enforces sequences
(``tests/integration/test_producer_idempotence.py``). For the same reason the mock does not deduplicate: a batch
a broker appended just before its connections were dropped, its response lost, is resent (as Kafka's producer
does, with the same sequence) and written twice; the broker-down test allows such whole-batch replays on the
partitions the stopped broker leads, and nothing else."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from typing import Any

import pytest

ck = pytest.importorskip("confluent_kafka")

from strom.metrics import metric_values  # noqa: E402
from strom.producer import KafkaProducer, ProducerRecord  # noqa: E402
from strom.protocol.api_keys import ApiKey  # noqa: E402
from strom.testing.mock_cluster import MockCluster  # noqa: E402

pytestmark = [pytest.mark.interop, pytest.mark.timeout(120)]

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


@pytest.fixture
def cluster():  # type: ignore[no-untyped-def]
    with MockCluster(3) as mc:
        yield mc


def _producer(mc: MockCluster, **config: Any) -> KafkaProducer:
    return KafkaProducer({"bootstrap.servers": mc.bootstrap_servers, "key.serializer": "bytes",
                          "value.serializer": "bytes", **config})


def _read_all(mc: MockCluster, topic: str, partitions: int, expected: int, timeout: float = 60) -> list[Any]:
    consumer = ck.Consumer({"bootstrap.servers": mc.bootstrap_servers, "group.id": "strom-readback",
                            "enable.auto.commit": False})
    try:
        consumer.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in range(partitions)])
        out: list[Any] = []
        deadline = time.monotonic() + timeout
        while len(out) < expected and time.monotonic() < deadline:
            out.extend(m for m in consumer.consume(1000, 0.2) if m.error() is None)
        # Give duplicates a chance to show up.
        out.extend(m for m in consumer.consume(1000, 0.5) if m.error() is None)
        return out
    finally:
        consumer.close()


def _check_exactly_once_in_order(messages: list[Any], keys: int, per_key: int, ordered: bool = True) -> None:
    _check_no_loss_in_order_replays_on(messages, keys, per_key, ordered, replaying=set())


def _check_no_loss_in_order_replays_on(messages: list[Any], keys: int, per_key: int, ordered: bool,
                                       replaying: set[int]) -> None:
    """Exactly once and in order (``ordered``) on every partition but those in ``replaying``; on those, nothing
    lost and first occurrences in order, and a record seen again only within a replay: a run that goes back to a
    sequence already written and continues one by one (a resent batch)."""
    seen: dict[int, list[int]] = defaultdict(list)
    partition_of: dict[int, int] = {}
    for m in messages:
        key, seq = (int(x) for x in m.value().decode().split(":"))
        seen[key].append(seq)
        assert partition_of.setdefault(key, m.partition()) == m.partition()  # (keyed: one partition per key)
    assert sorted(seen) == list(range(keys))
    for key, seqs in seen.items():
        if partition_of[key] not in replaying:
            assert (seqs if ordered else sorted(seqs)) == list(range(per_key)), f"key {key}: lost, duplicated or reordered"
            continue
        assert sorted(set(seqs)) == list(range(per_key)), f"key {key}: lost records"
        if not ordered:
            continue
        top = prev = -1
        for seq in seqs:
            # the next new record, the next of a replay, or the start of a replay (an earlier sequence)
            assert seq == top + 1 or seq == prev + 1 or seq <= top, f"key {key}: reordered at {seq} after {prev}"
            top, prev = max(top, seq), seq


@pytest.mark.parametrize("codec", CODECS)
def test_every_codec_read_back(cluster: MockCluster, codec: str) -> None:
    """§12 / §18 item 7: batches written with each codec are read back intact by librdkafka."""
    cluster.create_topic("codecs", 4, 3)
    producer = _producer(cluster, compression_type=codec, linger_ms=5)
    values = [b"%s-%05d-" % (codec.encode(), i) + b"x" * (i % 300) for i in range(3000)]
    futures = [producer.send(ProducerRecord("codecs", v, key=b"k%d" % (i % 13))) for i, v in enumerate(values)]
    producer.flush(30)
    offsets = {(f.get().partition, f.get().offset) for f in futures}
    assert len(offsets) == len(values)
    producer.close()
    got = _read_all(cluster, "codecs", 4, len(values))
    assert sorted(m.value() for m in got) == sorted(values)
    assert {(m.partition(), m.offset()) for m in got} == offsets


def _produce_keys(producer: KafkaProducer, topic: str, keys: int, per_key: int,
                  during: Any = None) -> list[Any]:
    futures = []
    for seq in range(per_key):
        for key in range(keys):
            futures.append(producer.send(ProducerRecord(topic, b"%d:%d" % (key, seq), key=b"key-%d" % key)))
        if during is not None:
            during(seq)
    producer.flush(90)
    return futures


@pytest.mark.parametrize("in_flight", [1, 5])
def test_injected_produce_errors_no_loss_no_duplicates_in_order(cluster: MockCluster, in_flight: int) -> None:
    """§12: NOT_LEADER_OR_FOLLOWER and REQUEST_TIMED_OUT pushed on Produce are retried; with idempotence and 5
    requests in flight nothing is lost or duplicated and per-partition order holds."""
    cluster.create_topic("faults", 6, 3)
    producer = _producer(cluster, linger_ms=2, batch_size=4096, retry_backoff_ms=10,
                         max_in_flight_requests_per_connection=in_flight)
    keys, per_key = 24, 250

    def inject(seq: int) -> None:
        if seq % 25 == 0:
            cluster.push_request_errors(ApiKey.PRODUCE, [6, 7, 7, 6, 6])

    futures = _produce_keys(producer, "faults", keys, per_key, inject)
    assert all(f.exception(30) is None for f in futures)
    assert metric_values(producer.metrics(), "producer-metrics")["record-retry-total"] > 0
    producer.close()
    _check_exactly_once_in_order(_read_all(cluster, "faults", 6, keys * per_key), keys, per_key, in_flight == 1)


def _produce_phases(producer: KafkaProducer, topic: str, keys: int, per_key: int, phases: int,
                    between: Any) -> list[Any]:
    """Send ``per_key`` records per key in ``phases`` chunks; after each chunk but the last, without waiting
    for it, call ``between(phase)`` (the fault hits requests in flight and those still to be sent)."""
    futures = []
    chunk = per_key // phases
    for phase in range(phases):
        for seq in range(phase * chunk, per_key if phase == phases - 1 else (phase + 1) * chunk):
            for key in range(keys):
                futures.append(producer.send(ProducerRecord(topic, b"%d:%d" % (key, seq), key=b"key-%d" % key)))
        if phase < phases - 1:
            between(phase)
    producer.flush(90)
    return futures


@pytest.mark.parametrize("in_flight", [1, 5])
def test_leader_moves_no_loss_no_duplicates_in_order(cluster: MockCluster, in_flight: int) -> None:
    """§12 / §18 item 26: leaders move while producing; requests to the old leaders get NOT_LEADER_OR_FOLLOWER,
    metadata is refreshed and the batches follow the new leaders in order."""
    cluster.create_topic("moves", 6, 3)
    producer = _producer(cluster, linger_ms=2, batch_size=4096, retry_backoff_ms=10,
                         max_in_flight_requests_per_connection=in_flight)
    keys, per_key = 24, 240
    producer.send(ProducerRecord("moves", b"warm-up", partition=0)).get(30)  # metadata cached
    producer.flush()

    def move(phase: int) -> None:
        for p in range(6):
            cluster.set_partition_leader("moves", p, 1 + (p + phase + 1) % 3)

    futures = _produce_phases(producer, "moves", keys, per_key, 4, move)
    assert all(f.exception(30) is None for f in futures)
    assert metric_values(producer.metrics(), "producer-metrics")["record-retry-total"] > 0  # the moves really hit requests
    producer.close()
    messages = [m for m in _read_all(cluster, "moves", 6, keys * per_key + 1) if m.value() != b"warm-up"]
    _check_exactly_once_in_order(messages, keys, per_key, in_flight == 1)


@pytest.mark.parametrize("in_flight", [1, 5])
def test_broker_down_and_back_no_loss_in_order(cluster: MockCluster, in_flight: int) -> None:
    """§12 / §18 items 26, 74, 86: a broker goes down (connections dropped, reconnects refused) and comes back a
    second later; the producer keeps the batches, reconnects with backoff and retries; nothing is lost or
    reordered, and nothing duplicated but whole batches the stopped broker appended without answering (the mock
    does not deduplicate an idempotent producer's resends: see the module's docstring)."""
    cluster.create_topic("down", 6, 3)
    producer = _producer(cluster, linger_ms=2, batch_size=4096, retry_backoff_ms=20, reconnect_backoff_ms=20,
                         reconnect_backoff_max_ms=200, request_timeout_ms=5000,
                         max_in_flight_requests_per_connection=in_flight)
    keys, per_key = 24, 300
    for p in range(6):
        producer.send(ProducerRecord("down", b"warm-up", partition=p)).get(30)  # connected to every leader
    timers: list[threading.Timer] = []
    connections_before = metric_values(producer.metrics(), "producer-metrics")["connection-creation-total"]
    victim = producer.partitions_for("down")[0].leader.node_id  # a broker that leads something
    led = {p.partition for p in producer.partitions_for("down") if p.leader.node_id == victim}

    def outage(phase: int) -> None:
        if phase == 0:
            cluster.broker_down(victim)
            timer = threading.Timer(1.0, cluster.broker_up, args=(victim,))
            timers.append(timer)
            timer.start()

    futures = _produce_phases(producer, "down", keys, per_key, 3, outage)
    for t in timers:
        t.join()
    assert all(f.exception(60) is None for f in futures)
    assert metric_values(producer.metrics(), "producer-metrics")["connection-creation-total"] > connections_before  # reconnected after the outage
    producer.close()
    messages = [m for m in _read_all(cluster, "down", 6, keys * per_key + 6) if m.value() != b"warm-up"]
    _check_no_loss_in_order_replays_on(messages, keys, per_key, in_flight == 1, led)


def test_request_tracking_sees_init_producer_id_and_produce(cluster: MockCluster) -> None:
    """§9.2 / §12: the mock's request tracking shows the idempotent producer's InitProducerId before its Produce
    requests, and the ApiVersions fallback (two ApiVersions per connection)."""
    cluster.create_topic("tracked", 1, 3)
    cluster.start_request_tracking()
    producer = _producer(cluster)
    producer.send(ProducerRecord("tracked", b"v")).get(30)
    producer.close()
    requests = cluster.requests()
    kinds = [api for _b, api, _t in requests]
    assert kinds.index(ApiKey.INIT_PRODUCER_ID) < kinds.index(ApiKey.PRODUCE)
    assert kinds.count(ApiKey.API_VERSIONS) >= 2
