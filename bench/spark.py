"""Spark benchmark: a local[2] Structured Streaming query reading from / writing to strom vs Spark's rate source.

  .venv/bin/python bench/spark.py [--records N] [--size BYTES] [--per-trigger N] [--bootstrap-server H:P]

Queries (micro-batches of --per-trigger records, 2 partitions, one local[2] session):
  (a) format("strom") -> groupBy().count()            read throughput
  (b) format("rate-micro-batch") -> groupBy().count()  the same query on Spark's built-in source: Spark's ceiling
  (c) format("strom") -> format("strom")                read + write (value and key copied to another topic)
  (d) format("rate-micro-batch") -> format("strom")     write throughput on its own (rate rows as strings)
Figures are steady state: rows of every batch but the first / time those batches took (Spark's
durationMs.triggerExecution), plus the wall-clock time of the whole query.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from strom.admin import AdminClient, NewTopic  # noqa: E402
from strom.producer.kafka_producer import KafkaProducer  # noqa: E402
from strom.spark.local import local_session, stop_session  # noqa: E402
from strom.testing.broker_process import BrokerProcess  # noqa: E402

PARTITIONS = 2


def load(bootstrap: str, topic: str, n: int, size: int) -> float:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        admin.create_topics([NewTopic(topic, PARTITIONS, 1)]).all().result(30)
    finally:
        admin.close()
    p = KafkaProducer({"bootstrap.servers": bootstrap, "key.serializer": "bytes", "value.serializer": "bytes",
                       "linger.ms": "20", "batch.size": "1000000", "acks": "1", "enable.idempotence": "false"})
    payload = os.urandom(size)
    t0 = time.perf_counter()
    for i in range(n):
        p.send(topic, value=payload, key=b"k%d" % (i % 1000), partition=i % PARTITIONS)
    p.flush()
    p.close()
    return time.perf_counter() - t0


def measure(q: Any, total: int, t0: float) -> dict[str, float]:
    assert q.awaitTermination(1800), "query did not finish"
    wall = time.perf_counter() - t0
    batches = [p for p in q.recentProgress if p["numInputRows"] > 0]
    assert sum(p["numInputRows"] for p in batches) == total, [p["numInputRows"] for p in batches]
    steady = batches[1:] or batches
    rows = sum(p["numInputRows"] for p in steady)
    ms = sum(p["durationMs"]["triggerExecution"] for p in steady)
    return {"steady": rows / (ms / 1000), "wall": total / wall, "batches": len(batches)}


def strom_stream(spark: Any, bootstrap: str, topic: str, per_trigger: int) -> Any:
    return (spark.readStream.format("strom").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
            .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", str(per_trigger)).load())


def run_rate(spark: Any, n: int, per_trigger: int, sink: Any, ckpt: Path) -> dict[str, float]:
    """The rate source has no availableNow: run batches of per_trigger rows until n rows were processed."""
    df = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", str(per_trigger))
          .option("numPartitions", str(PARTITIONS)).load())
    q = sink(df).option("checkpointLocation", str(ckpt)).trigger(processingTime="0 seconds").start()
    t0 = time.perf_counter()
    while sum(p["numInputRows"] for p in q.recentProgress) < n:
        if q.exception() is not None:
            raise RuntimeError(q.exception())
        time.sleep(0.05)
    wall = time.perf_counter() - t0
    q.stop()
    batches = [p for p in q.recentProgress if p["numInputRows"] > 0]
    steady = batches[1:] or batches
    rows = sum(p["numInputRows"] for p in steady)
    ms = sum(p["durationMs"]["triggerExecution"] for p in steady)
    return {"steady": rows / (ms / 1000), "wall": sum(p["numInputRows"] for p in batches) / wall,
            "batches": len(batches)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=100, help="value size in bytes")
    ap.add_argument("--per-trigger", type=int, default=250_000, help="maxOffsetsPerTrigger / rowsPerBatch")
    ap.add_argument("--bootstrap-server")
    args = ap.parse_args()
    n, per = args.records, args.per_trigger
    with tempfile.TemporaryDirectory(prefix="strom-bench-spark-") as tmp:
        work = Path(tmp)
        broker = None if args.bootstrap_server else BrokerProcess(data_dir=work / "broker").start()
        bootstrap = args.bootstrap_server or broker.bootstrap  # type: ignore[union-attr]
        spark = None
        try:
            src = f"bench-src-{int(time.time())}"
            dt = load(bootstrap, src, n, args.size)
            print(f"loaded {n:,} x {args.size} B records into {src} ({PARTITIONS} partitions) in {dt:.1f}s "
                  f"({n / dt:,.0f} records/s with strom's producer)", flush=True)
            spark = local_session("strom-bench", cores=2, conf={"spark.driver.memory": "2g"})
            print(f"Spark {spark.version} local[2]", flush=True)
            results: dict[str, dict[str, float]] = {}

            def count_sink(df: Any) -> Any:
                return df.groupBy().count().writeStream.outputMode("complete").format("noop")

            t0 = time.perf_counter()
            q = (count_sink(strom_stream(spark, bootstrap, src, per)).option("checkpointLocation", str(work / "a"))
                 .trigger(availableNow=True).start())
            results["(a) strom -> count"] = measure(q, n, t0)
            results["(b) rate-micro-batch -> count"] = run_rate(spark, n, per, count_sink, work / "b")
            admin = AdminClient({"bootstrap.servers": bootstrap})
            admin.create_topics([NewTopic(src + "-out", PARTITIONS, 1), NewTopic(src + "-rate", PARTITIONS, 1)]) \
                .all().result(30)
            admin.close()
            t0 = time.perf_counter()
            q = (strom_stream(spark, bootstrap, src, per).selectExpr("key", "value").writeStream.format("strom")
                 .option("kafka.bootstrap.servers", bootstrap).option("topic", src + "-out")
                 .option("checkpointLocation", str(work / "c")).trigger(availableNow=True).start())
            results["(c) strom -> strom"] = measure(q, n, t0)

            def strom_sink(df: Any) -> Any:
                return (df.selectExpr("cast(value as string) as value").writeStream.format("strom")
                        .option("kafka.bootstrap.servers", bootstrap).option("topic", src + "-rate"))

            results["(d) rate-micro-batch -> strom"] = run_rate(spark, n, per, strom_sink, work / "d")
            print("\n| query | records/s (steady) | records/s (wall, incl. first batch) | batches |")
            print("|---|---:|---:|---:|")
            for name, r in results.items():
                print(f"| {name} | {r['steady']:,.0f} | {r['wall']:,.0f} | {r['batches']:.0f} |")
            a, b = results["(a) strom -> count"], results["(b) rate-micro-batch -> count"]
            print(f"\nread: strom / rate = {a['steady'] / b['steady']:.2f}x (steady)")
        finally:
            if spark is not None:
                stop_session(spark)
            if broker is not None:
                broker.stop()
                broker.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
