"""What recording metrics costs the clients: the same workload with metrics on and with every sensor a no-op.

  .venv/bin/python bench/metrics_overhead.py [--records N] [--rounds R] [--partitions P]

One strom broker subprocess. Producer: N × 100 B records, ``send`` + ``flush`` (linger.ms=5, batch.size=64 KiB,
acks=1), as in bench/producer.py. Consumer: N pre-produced 100 B records in P partitions read by an assigned
consumer (500 per poll, every value touched), as in bench/consumer.py. "off" replaces ``Sensor.record`` and the
recording methods of the Sender, Fetcher and Selector metrics with no-ops, so the difference is the whole cost
of recording. All runs happen in this one process, a new client per run, on/off alternating (order swapped
every round) for R rounds: on a shared machine, separate processes differ by more than the effect measured.
Reported: median CPU seconds of this process (client threads included; the broker is another process) per
million records, wall-clock records/s, and the overhead (on − off) / off.

Also times a Prometheus scrape (``KafkaMetricsCollector`` + prometheus-client's text exposition) of a
registry holding the per-partition consumer metrics of 1,000 partitions.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)

VALUE = b"x" * 100


_SAVED: list[tuple[type, str, object]] = []


def set_metrics(enabled: bool) -> None:
    """Turn every recording call into a no-op ("off") or restore it ("on")."""
    from strom.consumer.internals.fetch_metrics import FetchMetricsManager
    from strom.metrics.metrics import Sensor
    from strom.network.selector_metrics import SelectorMetrics
    from strom.producer.internals.sender_metrics import SenderMetrics

    if not _SAVED:
        _SAVED.append((Sensor, "record", Sensor.record))
        for cls in (FetchMetricsManager, SelectorMetrics, SenderMetrics):
            _SAVED.extend((cls, name, getattr(cls, name)) for name in dir(cls) if name.startswith("record"))

    def nothing(*_args: object, **_kwargs: object) -> None:
        return None

    for cls, name, original in _SAVED:
        setattr(cls, name, original if enabled else nothing)


def child_producer(bootstrap: str, topic: str, n: int) -> dict[str, float]:
    from strom.producer import KafkaProducer

    p = KafkaProducer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 5, "batch.size": 65536,
                       "enable.idempotence": False}, key_serializer="bytes", value_serializer="bytes")
    p.send(topic, VALUE).get(30)
    send = p.send
    cpu0, t0 = time.process_time(), time.perf_counter()
    for _ in range(n):
        send(topic, VALUE)
    p.flush()
    out = {"cpu_s": time.process_time() - cpu0, "wall_s": time.perf_counter() - t0}
    p.close()
    return out


def child_consumer(bootstrap: str, topic: str, n: int, partitions: int) -> dict[str, float]:
    from strom.common.structs import TopicPartition
    from strom.consumer import KafkaConsumer

    c = KafkaConsumer({"bootstrap.servers": bootstrap}, key_deserializer="bytes", value_deserializer="bytes",
                      enable_auto_commit=False, max_poll_records=500)
    tps = [TopicPartition(topic, i) for i in range(partitions)]
    c.assign(tps)
    c.seek_to_beginning(tps)
    got = nbytes = 0
    cpu0, t0 = time.process_time(), time.perf_counter()
    deadline = time.monotonic() + 300
    while got < n and time.monotonic() < deadline:
        records = c.poll(1.0)
        for r in records:
            nbytes += len(r.value)
        got += records.count()
    out = {"cpu_s": time.process_time() - cpu0, "wall_s": time.perf_counter() - t0, "records": got}
    c.close()
    return out


def scrape_bench(partitions: int = 1000) -> tuple[float, int]:
    """Median ms of one scrape of a registry with the per-partition consumer metrics of ``partitions``."""
    from prometheus_client.exposition import generate_latest
    from prometheus_client.registry import CollectorRegistry

    from strom.common.structs import TopicPartition
    from strom.consumer.internals.fetch_metrics import FetchMetricsManager
    from strom.metrics import MetricConfig, Metrics
    from strom.metrics.prometheus import KafkaMetricsCollector

    metrics = Metrics(MetricConfig(tags={"client-id": "bench"}))
    manager = FetchMetricsManager(metrics)
    now = metrics.time.milliseconds()
    for i in range(partitions):
        tp = TopicPartition(f"topic-{i // 10}", i % 10)
        manager.record_partition_lag(tp, i, now)
        manager.record_partition_lead(tp, i, now)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(KafkaMetricsCollector(metrics, "kafka.consumer"))
    times = []
    size = 0
    for _ in range(11):
        t0 = time.perf_counter()
        size = len(generate_latest(registry))
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times), size


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--partitions", type=int, default=6)
    args = ap.parse_args()

    import confluent_kafka as ck
    from confluent_kafka.admin import AdminClient, NewTopic

    from strom.testing.broker_process import BrokerProcess

    broker = BrokerProcess()
    broker.start()
    try:
        bootstrap = broker.bootstrap
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for f in admin.create_topics([NewTopic("overhead-produce", 4, 1),
                                      NewTopic("overhead-consume", args.partitions, 1)]).values():
            f.result(30)
        p = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 1_000_000,
                         "queue.buffering.max.kbytes": 1_048_576})
        for i in range(args.records):
            while True:
                try:
                    p.produce("overhead-consume", VALUE, partition=i % args.partitions)
                    break
                except BufferError:
                    p.poll(0.001)
        assert p.flush(120) == 0
        del p, admin  # librdkafka's threads would keep reconnecting after the broker stops
        results: dict[tuple[str, str], list[dict[str, float]]] = {}
        for round_ in range(args.rounds):
            for kind in ("producer", "consumer"):
                modes = ("on", "off") if round_ % 2 == 0 else ("off", "on")
                for mode in modes:
                    set_metrics(mode == "on")
                    r = (child_producer(bootstrap, "overhead-produce", args.records) if kind == "producer"
                         else child_consumer(bootstrap, "overhead-consume", args.records, args.partitions))
                    results.setdefault((kind, mode), []).append(r)
        set_metrics(True)
    finally:
        broker.stop()
        broker.cleanup()

    print(f"\n{args.records:,} records × 100 B, {args.rounds} alternating rounds, medians\n")
    print("| client | metrics | CPU s per M records | records/s (wall) |")
    print("|---|---|---:|---:|")
    medians: dict[tuple[str, str], float] = {}
    for (kind, mode), runs in sorted(results.items()):
        cpu = statistics.median(r["cpu_s"] for r in runs) * 1e6 / args.records
        wall = statistics.median(args.records / r["wall_s"] for r in runs)
        medians[(kind, mode)] = cpu
        print(f"| {kind} | {mode} | {cpu:.3f} | {wall:,.0f} |")
    for kind in ("producer", "consumer"):
        on, off = medians[(kind, "on")], medians[(kind, "off")]
        cpus = [round(r["cpu_s"], 3) for r in results[(kind, "on")]], [round(r["cpu_s"], 3)
                                                                        for r in results[(kind, "off")]]
        print(f"{kind}: metrics overhead {100 * (on - off) / off:+.1f} % CPU (on {cpus[0]}, off {cpus[1]})")
    ms, size = scrape_bench()
    print(f"Prometheus scrape of 1,000 partitions' consumer metrics: {ms:.1f} ms median, {size:,} bytes")


if __name__ == "__main__":
    main()
