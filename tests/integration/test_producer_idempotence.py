"""The idempotent producer (5 requests in flight) against a strom broker behind a chaos proxy that kills
connections right after forwarding requests: retries of requests that may already be written must be
deduplicated by their sequence numbers, and per-partition order must hold."""

from __future__ import annotations

from collections import defaultdict

import pytest

from strom.broker_process import BrokerProcess, free_port
from strom.metrics import metric_values
from strom.producer import KafkaProducer, ProducerRecord

from .producer_support import ChaosProxy, create_topics, read_back

pytest.importorskip("confluent_kafka")
pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def test_killed_connections_no_loss_no_duplicates_in_order(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """§12 / §18 items 26, 52, 86: connections die after requests were forwarded (outcome unknown); the
    producer reconnects and retries with the same sequences; the broker's sequence checks drop duplicates;
    per-partition order holds with max.in.flight.requests.per.connection=5."""
    proxy_port = free_port()
    broker = BrokerProcess(data_dir=tmp_path / "data",
                           overrides={"advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy_port}"})
    broker.start()
    proxy = None
    try:
        # Every client reaches the broker through the proxy (it is the advertised address); kills are enabled
        # only while the producer runs.
        proxy = ChaosProxy(("127.0.0.1", broker.port), kill_every_bytes=24 * 1024, max_kills=0, port=proxy_port)
        create_topics(f"127.0.0.1:{proxy_port}", {"chaos": 6})
        producer = KafkaProducer({"bootstrap.servers": f"127.0.0.1:{proxy_port}", "key.serializer": "bytes",
                                  "value.serializer": "bytes", "linger.ms": 2, "batch.size": 4096,
                                  "retry.backoff.ms": 20, "reconnect.backoff.ms": 10,
                                  "reconnect.backoff.max.ms": 100, "request.timeout.ms": 10_000})
        producer.send(ProducerRecord("chaos", b"warm-up", partition=0)).get(30)
        proxy.max_kills = 8
        keys, per_key = 24, 300
        futures = []
        for seq in range(per_key):
            for key in range(keys):
                futures.append(producer.send(ProducerRecord("chaos", b"%d:%d" % (key, seq), key=b"key-%d" % key)))
        producer.flush(90)
        assert all(f.exception(30) is None for f in futures)
        assert proxy.kills >= 3, proxy.kills
        assert metric_values(producer.metrics(), "producer-metrics")["record-retry-total"] > 0
        producer.close()
        proxy.max_kills = proxy.kills  # no more kills
        messages = [m for m in read_back(f"127.0.0.1:{proxy_port}", {"chaos": 6}, keys * per_key + 1, timeout=60)
                    if m.value() != b"warm-up"]
        seen: dict[int, list[int]] = defaultdict(list)
        for m in messages:
            key, seq = (int(x) for x in m.value().decode().split(":"))
            seen[key].append(seq)
        assert len(messages) == keys * per_key
        for key in range(keys):
            assert seen[key] == list(range(per_key)), f"key {key}: lost, duplicated or reordered"
    finally:
        if proxy is not None:
            proxy.close()
        broker.stop()
        broker.cleanup()
