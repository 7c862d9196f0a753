"""End-to-end latency: one record at a time from a producer through the broker to a consumer (issue 14's target:
strom producer → broker → strom consumer, linger.ms=0, p99 ≤ 2 ms), with p50 / p99 / p99.9.

  .venv/bin/python bench/latency.py [--count N] [--size BYTES] [--targets standalone,mock,cluster]
                                    [--clients strom,confluent]

Each round trip is Kafka's EndToEndLatency loop (``strom end-to-end-latency``): send one record and wait for its
acknowledgement (strom: ``send().get()``; confluent-kafka: ``produce`` + ``flush``), then poll the consumer until
that record arrives; the clock runs from the send to the record in hand. The consumer is assigned the topic's
only partition at its end before the first send and long-polls with its default ``fetch.max.wait.ms`` (500 ms):
the broker answers its parked fetch when the append lands, which is the path being timed (a consumer that
busy-polls with ``fetch.max.wait.ms=0``, as Kafka's tool configures it, is also reported for strom; librdkafka's
mock broker does not answer a parked fetch on an append, so its row busy-polls).
linger.ms=0; 100-byte values by default; warm-up round trips are not counted.

Targets, in one run:
- ``standalone``: one ``strom broker`` process (no ZooKeeper), acks=1, topic with one partition;
- ``mock``: the same loop for confluent-kafka against librdkafka's in-memory mock cluster (a baseline for the
  clients and the machine: no Python broker in the path);
- ``cluster``: a 3-broker LocalCluster (real ZooKeeper), acks=all, replication factor 3, min.insync.replicas=2:
  the producer waits for both followers to fetch the record and report it, the consumer for the high watermark.
The client processes are this process; brokers are child processes on the same 2 shared cores.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from typing import Any

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)

WARMUP = 200


def _percentiles(samples_us: list[float]) -> tuple[float, float, float, float]:
    s = sorted(samples_us)
    n = len(s)

    def at(q: float) -> float:
        return s[min(n - 1, int(q * n))] / 1000.0

    return at(0.5), at(0.99), at(0.999), s[-1] / 1000.0


def _run_loop(round_trip: Callable[[bytes], None], count: int, size: int) -> list[float]:
    payloads = [os.urandom(size) for _ in range(64)]
    for i in range(WARMUP):
        round_trip(payloads[i % 64])
    out = []
    clock = time.perf_counter_ns
    for i in range(count):
        t = clock()
        round_trip(payloads[i % 64])
        out.append((clock() - t) / 1000.0)
    return out


def _strom(bootstrap: str, topic: str, acks: str, count: int, size: int, fetch_max_wait_ms: int) -> list[float]:
    from strom import KafkaConsumer, KafkaProducer
    from strom.common.structs import TopicPartition

    producer = KafkaProducer({"bootstrap.servers": bootstrap, "key.serializer": "bytes",
                              "value.serializer": "bytes", "acks": acks, "linger.ms": 0,
                              "enable.idempotence": acks == "all"})
    consumer = KafkaConsumer({"bootstrap.servers": bootstrap, "group.id": None, "enable.auto.commit": False,
                              "key.deserializer": "bytes", "value.deserializer": "bytes",
                              "fetch.max.wait.ms": fetch_max_wait_ms})
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek_to_end([tp])
    consumer.position(tp)
    send = producer.send
    poll = consumer.poll

    def round_trip(value: bytes) -> None:
        send(topic, value, partition=0).get(30)
        deadline = time.monotonic() + 30
        while True:
            records = list(poll(timeout_ms=1000))
            if records:
                if len(records) != 1 or records[0].value != value:
                    raise AssertionError(f"expected the one record just sent, got {len(records)}")
                return
            if time.monotonic() > deadline:
                raise AssertionError("the record sent was not consumed within 30 s")

    try:
        return _run_loop(round_trip, count, size)
    finally:
        consumer.close()
        producer.close(10)


def _confluent(bootstrap: str | None, topic: str, acks: str, count: int, size: int,
               fetch_max_wait_ms: int = 500) -> list[float]:
    """``bootstrap`` None: librdkafka's mock cluster, created by the producer (the consumer joins it by the address
    the mock's Metadata gives)."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    pconf: dict[str, Any] = {"acks": acks, "linger.ms": 0, "enable.idempotence": acks == "all"}
    if bootstrap is None:
        pconf.update({"test.mock.num.brokers": 1, "bootstrap.servers": "unused:9092"})
        producer = Producer(pconf)
        brokers = producer.list_topics(timeout=10).brokers  # the mock broker's real address, for the consumer
        bootstrap = ",".join(f"{b.host}:{b.port}" for b in brokers.values())
    else:
        pconf["bootstrap.servers"] = bootstrap
        producer = Producer(pconf)
    producer.produce(topic, b"create", partition=0)  # the mock auto-creates; the broker has the topic already
    producer.flush(30)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "latency-bench", "enable.auto.commit": False,
                         "fetch.wait.max.ms": fetch_max_wait_ms, "enable.partition.eof": False})
    lo, hi = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
    consumer.assign([TopicPartition(topic, 0, hi)])

    def round_trip(value: bytes) -> None:
        producer.produce(topic, value, partition=0)
        if producer.flush(30) != 0:
            raise AssertionError("the record was not acknowledged within 30 s")
        deadline = time.monotonic() + 30
        while True:
            msg = consumer.poll(1.0)
            if msg is not None:
                if msg.error() is not None:
                    raise AssertionError(f"consumer error: {msg.error()}")
                if msg.value() != value:
                    raise AssertionError("the record read is not the one just sent")
                return
            if time.monotonic() > deadline:
                raise AssertionError("the record sent was not consumed within 30 s")

    try:
        return _run_loop(round_trip, count, size)
    finally:
        consumer.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=5000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--targets", default="standalone,mock,cluster")
    ap.add_argument("--clients", default="strom,confluent")
    args = ap.parse_args()
    targets = args.targets.split(",")
    clients = args.clients.split(",")
    rows: list[tuple[str, str, list[float]]] = []

    def report(target: str, client: str, samples: list[float]) -> None:
        rows.append((target, client, samples))
        p50, p99, p999, mx = _percentiles(samples)
        print(f"{target:34s} {client:34s} p50 {p50:7.3f} ms  p99 {p99:7.3f} ms  p99.9 {p999:7.3f} ms  "
              f"max {mx:7.2f} ms", flush=True)

    if "standalone" in targets:
        from strom import AdminClient
        from strom.admin import NewTopic
        from strom.broker_process import BrokerProcess

        with BrokerProcess() as broker:
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            admin.create_topics([NewTopic("lat", 1, 1)]).all().result(60)
            admin.close(10)
            if "strom" in clients:
                report("standalone broker, acks=1", "strom → strom (fetch.max.wait 500)",
                       _strom(broker.bootstrap, "lat", "1", args.count, args.size, 500))
                report("standalone broker, acks=1", "strom → strom (fetch.max.wait 0)",
                       _strom(broker.bootstrap, "lat", "1", args.count, args.size, 0))
            if "confluent" in clients:
                report("standalone broker, acks=1", "confluent → confluent",
                       _confluent(broker.bootstrap, "lat", "1", args.count, args.size))
    if "mock" in targets and "confluent" in clients:
        # The mock broker answers a fetch after fetch.wait.max.ms even when a record arrives meanwhile: its
        # consumer busy-polls (fetch.wait.max.ms=0) to be timed at all.
        report("librdkafka mock cluster, acks=1", "confluent → confluent (fetch.wait.max 0)",
               _confluent(None, "lat", "1", args.count, args.size, 0))
    if "cluster" in targets:
        from strom import AdminClient
        from strom.admin import NewTopic
        from strom.testing.cluster import LocalCluster, wait_until

        with LocalCluster(3) as cluster:
            admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
            admin.create_topics([NewTopic("lat3", 1, 3, None, {"min.insync.replicas": "2"})]).all().result(60)
            wait_until(lambda: len(admin.describe_topics(["lat3"])["lat3"].result(30).partitions[0].isr) == 3,
                       60, "an ISR of 3")
            admin.close(10)
            if "strom" in clients:
                report("3 brokers, replication 3, acks=all", "strom → strom (fetch.max.wait 500)",
                       _strom(cluster.bootstrap, "lat3", "all", args.count, args.size, 500))
            if "confluent" in clients:
                report("3 brokers, replication 3, acks=all", "confluent → confluent",
                       _confluent(cluster.bootstrap, "lat3", "all", args.count, args.size))
    print(f"\n{args.count:,} round trips of {args.size} B per row (after {WARMUP} warm-up), linger.ms=0")


if __name__ == "__main__":
    main()
