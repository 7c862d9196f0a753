"""Spark benchmark: a local[2] Structured Streaming query reading from / writing to strom vs Spark's rate source.

  .venv/bin/python bench/spark.py [--records N] [--size BYTES] [--per-trigger N] [--bootstrap-server H:P]
  .venv/bin/python bench/spark.py --batch-count --records 2000000 --repeat 3 [--warmup N] [--option KEY=VALUE ...]

Queries (micro-batches of --per-trigger records, 2 partitions, one local[2] session):
  (a) format("strom") -> groupBy().count()            read throughput
  (b) format("rate-micro-batch") -> groupBy().count()  the same query on Spark's built-in source: Spark's ceiling
      (rate-micro-batch runs one batch per Trigger.AvailableNow run: its "wall" figure includes a query start
      per batch)
  (c) format("strom") -> format("strom")                read + write (value and key copied to another topic)
  (d) format("rate-micro-batch") -> format("strom")     write throughput on its own (rate rows as strings)
  (e) a Python data source that emits prebuilt Arrow batches of the strom row schema -> groupBy().count():
      the ceiling of PySpark's Python Data Source API itself (no Kafka, no decoding)
  (f) with --batch-count only: spark.read.format("strom").load().count() (a batch read of the whole topic) vs
      the same count over a batch Python data source yielding prebuilt Arrow batches of the same rows,
      --repeat pairs, which of the two runs first alternating from pair to pair
Figures are steady state: rows of every batch but the first / time those batches took (Spark's
durationMs.triggerExecution), plus the wall-clock time of the whole query (incl. its first batch). Each query
runs --repeat times (fresh checkpoint, same data); the best run is reported (the machine is shared and noisy).
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
from strom.broker_process import BrokerProcess  # noqa: E402
from strom.producer.kafka_producer import KafkaProducer  # noqa: E402
from strom.spark.local import local_session, stop_session  # noqa: E402

PARTITIONS = 2


def prebuilt_batch(topic: str, size: int) -> Any:
    """10,000 rows of the strom source's schema as one Arrow batch: records of ``topic`` (the strom query's topic,
    so that the rows are the same size as strom's), keys ``k<i>``, ``size``-byte values."""
    from pyspark.sql.pandas.types import to_arrow_schema

    from strom.consumer.consumer_records import ConsumerRecord
    from strom.spark.reader import records_to_batch, source_schema

    payload = os.urandom(size)
    recs = [ConsumerRecord(topic, 0, i, 1_700_000_000_000, 0, b"k%d" % (i % 1000), payload) for i in range(10_000)]
    return records_to_batch(recs, to_arrow_schema(source_schema(False), timezone="UTC"), False)


def prebuilt_source(topic: str, n: int, size: int, per_trigger: int) -> type:
    """A streaming Python data source whose partitions yield one prebuilt Arrow batch over and over."""
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

    class Reader(DataSourceStreamReader, SupportsTriggerAvailableNow):
        def prepareForTriggerAvailableNow(self) -> None:
            pass

        def initialOffset(self) -> dict:
            return {"rows": 0}

        def latestOffset(self, start: dict, limit: Any) -> dict:
            return {"rows": min(n, start["rows"] + per_trigger)}

        def partitions(self, start: dict, end: dict) -> list[InputPartition]:
            rows = end["rows"] - start["rows"]
            return [InputPartition(rows // PARTITIONS) for _ in range(PARTITIONS)] if rows else []

        def read(self, partition: InputPartition) -> Any:
            batch = prebuilt_batch(topic, size)
            left = partition.value
            while left > 0:
                yield batch.slice(0, min(left, batch.num_rows))
                left -= batch.num_rows

    class Prebuilt(DataSource):
        @classmethod
        def name(cls) -> str:
            return "prebuilt_arrow"

        def schema(self) -> Any:
            from strom.spark.reader import source_schema

            return source_schema(False)

        def streamReader(self, schema: Any) -> DataSourceStreamReader:
            return Reader()

    return Prebuilt


def prebuilt_batch_source(topic: str, n: int, size: int) -> type:
    """A batch Python data source whose partitions yield prebuilt Arrow batches of the strom row schema: the
    do-nothing ceiling of ``spark.read.format(...)`` for query (f)."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class Reader(DataSourceReader):
        def partitions(self) -> list[InputPartition]:
            return [InputPartition(n // PARTITIONS) for _ in range(PARTITIONS)]

        def read(self, partition: InputPartition) -> Any:
            batch = prebuilt_batch(topic, size)
            left = partition.value
            while left > 0:
                yield batch.slice(0, min(left, batch.num_rows))
                left -= batch.num_rows

    class PrebuiltBatch(DataSource):
        @classmethod
        def name(cls) -> str:
            return "prebuilt_arrow_batch"

        def schema(self) -> Any:
            from strom.spark.reader import source_schema

            return source_schema(False)

        def reader(self, schema: Any) -> DataSourceReader:
            return Reader()

    return PrebuiltBatch


def batch_count(spark: Any, bootstrap: str, topic: str, n: int, size: int, repeat: int,
                options: dict[str, str] | None = None, warmup: int = 0) -> None:
    """(f): ``spark.read.format("strom")...load().count()`` vs the same count over prebuilt Arrow batches of
    the same rows, ``repeat`` pairs after ``warmup`` pairs that are run and not counted (the JVM's JIT and the
    Python workers settle), which runs first alternating; prints every run, the best of each, the ratio of
    the bests and the median ratio of the pairs after the first.
    ``options`` are more options of the strom reads (e.g. ``kafka.max.partition.fetch.bytes``)."""
    spark.dataSource.register(prebuilt_batch_source(topic, n, size))
    runs: dict[str, list[float]] = {"strom": [], "prebuilt": []}
    for i in range(-warmup, repeat):
        # the order alternates: the JVM keeps warming up over the runs, which favours whichever runs second
        for name in ("strom", "prebuilt") if i % 2 == 0 else ("prebuilt", "strom"):
            if name == "strom":
                df = (spark.read.format("strom").option("kafka.bootstrap.servers", bootstrap)
                      .option("subscribe", topic).options(**(options or {})).load())
            else:
                df = spark.read.format("prebuilt_arrow_batch").load()
            cpu0 = cpu_by_role()
            t0 = time.perf_counter()
            count = df.count()
            dt = time.perf_counter() - t0
            cpu = cpu_by_role()
            assert count == n, (name, count)
            if i < 0:
                print(f"(f) warm-up {name}: {n / dt:,.0f} rows/s ({dt:.2f}s)", flush=True)
                continue
            runs[name].append(n / dt)
            spent = ", ".join(f"{k} {(cpu[k] - cpu0.get(k, 0)):.2f}" for k in sorted(cpu) if cpu[k] > cpu0.get(k, 0))
            print(f"(f) batch count {name}: {n / dt:,.0f} rows/s ({dt:.2f}s); CPU s: {spent}", flush=True)
    best = {k: max(v) for k, v in runs.items()}
    print("\n| query | rows/s (best) | runs |\n|---|---:|---|")
    for name, rates in runs.items():
        print(f"| (f) batch count, {name} | {best[name]:,.0f} | {', '.join(f'{r:,.0f}' for r in rates)} |")
    ratios = [a / b for a, b in zip(runs["strom"], runs["prebuilt"], strict=True)]
    warm = sorted(ratios[1:] or ratios)  # (the first pair includes the Python workers' start)
    print(f"\nbatch count: strom / prebuilt Arrow = {best['strom'] / best['prebuilt']:.2f}x (best of each), "
          f"{warm[len(warm) // 2]:.2f}x (median pair after the first); per pair: "
          f"{', '.join(f'{r:.2f}x' for r in ratios)}")


def cpu_by_role() -> dict[str, float]:
    """CPU seconds (user + system) of the machine's processes so far, by role: the Spark JVM, the Python
    workers reading partitions, PySpark's planning workers, the broker, the rest (Linux ``/proc``; a process that
    ends between two calls drops out of the second)."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        role = ("jvm" if "java" in cmd else "broker" if "strom.cli.main broker" in cmd
                else "workers" if "pyspark.worker" in cmd else "planners" if "pyspark.sql.worker" in cmd
                else "other")
        out[role] = out.get(role, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return out


def load(bootstrap: str, topic: str, n: int, size: int, batch_size: int = 1_000_000) -> float:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        admin.create_topics([NewTopic(topic, PARTITIONS, 1)]).all().result(30)
    finally:
        admin.close()
    p = KafkaProducer({"bootstrap.servers": bootstrap, "key.serializer": "bytes", "value.serializer": "bytes",
                       "linger.ms": "20", "batch.size": str(batch_size), "acks": "1", "enable.idempotence": "false"})
    payload = os.urandom(size)
    t0 = time.perf_counter()
    for part in range(PARTITIONS):  # record i in partition i % PARTITIONS, key k<i % 1000>, with send_many
        idx = range(part, n, PARTITIONS)
        p.send_many(topic, [payload] * len(idx), [b"k%d" % (i % 1000) for i in idx], partition=part)
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
    """rate-micro-batch under Trigger.AvailableNow runs one batch of rowsPerBatch rows and stops: restart the
    query on the same checkpoint until n rows were processed (same batch size as the strom queries)."""
    batches: list[dict[str, Any]] = []
    wall = 0.0
    while sum(p["numInputRows"] for p in batches) < n:
        df = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", str(per_trigger))
              .option("numPartitions", str(PARTITIONS)).load())
        t0 = time.perf_counter()
        q = sink(df).option("checkpointLocation", str(ckpt)).trigger(availableNow=True).start()
        assert q.awaitTermination(600), "rate query did not finish"
        wall += time.perf_counter() - t0
        batches.extend(p for p in q.recentProgress if p["numInputRows"] > 0)
    steady = batches[1:] or batches
    rows = sum(p["numInputRows"] for p in steady)
    ms = sum(p["durationMs"]["triggerExecution"] for p in steady)
    return {"steady": rows / (ms / 1000), "wall": sum(p["numInputRows"] for p in batches) / wall,
            "batches": len(batches)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=100, help="value size in bytes")
    ap.add_argument("--load-batch-size", type=int, default=1_000_000,
                    help="the loading producer's batch.size (16384, Kafka's default, gives batches of ~140 records)")
    ap.add_argument("--per-trigger", type=int, default=200_000, help="maxOffsetsPerTrigger / rowsPerBatch")
    ap.add_argument("--repeat", type=int, default=2, help="runs per query; the best is reported")
    ap.add_argument("--warmup", type=int, default=0,
                    help="with --batch-count: pairs run first and not counted (the JVM's JIT settles)")
    ap.add_argument("--bootstrap-server")
    ap.add_argument("--batch-count", action="store_true",
                    help="only (f): batch count of --records rows, strom vs prebuilt Arrow batches")
    ap.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                    help="an option of (f)'s strom reads (repeatable), e.g. kafka.max.partition.fetch.bytes=4194304")
    args = ap.parse_args()
    if any("=" not in o for o in args.option):
        ap.error("--option takes KEY=VALUE")
    options = dict(o.split("=", 1) for o in args.option)
    n, per = args.records, args.per_trigger
    with tempfile.TemporaryDirectory(prefix="strom-bench-spark-") as tmp:
        work = Path(tmp)
        broker = None if args.bootstrap_server else BrokerProcess(data_dir=work / "broker").start()
        bootstrap = args.bootstrap_server or broker.bootstrap  # type: ignore[union-attr]
        spark = None
        try:
            src = f"bench-src-{int(time.time())}"
            dt = load(bootstrap, src, n, args.size, args.load_batch_size)
            print(f"loaded {n:,} x {args.size} B records into {src} ({PARTITIONS} partitions) in {dt:.1f}s "
                  f"({n / dt:,.0f} records/s with strom's producer)", flush=True)
            spark = local_session("strom-bench", cores=2, conf={"spark.driver.memory": "2g"})
            print(f"Spark {spark.version} local[2]", flush=True)
            if args.batch_count:
                batch_count(spark, bootstrap, src, n, args.size, args.repeat, options, args.warmup)
                return 0
            results: dict[str, dict[str, float]] = {}
            admin = AdminClient({"bootstrap.servers": bootstrap})
            admin.create_topics([NewTopic(f"{src}-{kind}-{i}", PARTITIONS, 1) for kind in ("out", "rate")
                                 for i in range(args.repeat)]).all().result(30)
            admin.close()

            def count_sink(df: Any) -> Any:
                return df.groupBy().count().writeStream.outputMode("complete").format("noop")

            def strom_sink(topic: str) -> Any:
                return lambda df: (df.selectExpr("cast(value as string) as value").writeStream.format("strom")
                                   .option("kafka.bootstrap.servers", bootstrap).option("topic", topic))

            def query_a(i: int) -> dict[str, float]:
                t0 = time.perf_counter()
                q = (count_sink(strom_stream(spark, bootstrap, src, per))
                     .option("checkpointLocation", str(work / f"a{i}")).trigger(availableNow=True).start())
                return measure(q, n, t0)

            def query_c(i: int) -> dict[str, float]:
                t0 = time.perf_counter()
                q = (strom_stream(spark, bootstrap, src, per).selectExpr("key", "value").writeStream.format("strom")
                     .option("kafka.bootstrap.servers", bootstrap).option("topic", f"{src}-out-{i}")
                     .option("checkpointLocation", str(work / f"c{i}")).trigger(availableNow=True).start())
                return measure(q, n, t0)

            def query_e(i: int) -> dict[str, float]:
                t0 = time.perf_counter()
                q = (count_sink(spark.readStream.format("prebuilt_arrow").load())
                     .option("checkpointLocation", str(work / f"e{i}")).trigger(availableNow=True).start())
                return measure(q, n, t0)

            spark.dataSource.register(prebuilt_source(src, n, args.size, per))
            queries = {
                "(a) strom -> count": query_a,
                "(b) rate-micro-batch -> count": lambda i: run_rate(spark, n, per, count_sink, work / f"b{i}"),
                "(c) strom -> strom": query_c,
                "(d) rate-micro-batch -> strom": lambda i: run_rate(spark, n, per, strom_sink(f"{src}-rate-{i}"),
                                                                    work / f"d{i}"),
                "(e) prebuilt Arrow batches -> count": query_e,
            }
            for name, run in queries.items():
                runs = [run(i) for i in range(args.repeat)]
                results[name] = max(runs, key=lambda r: r["steady"])
                print(f"{name}: " + ", ".join(f"{r['steady']:,.0f}/s" for r in runs), flush=True)
            print("\n| query | records/s (steady) | records/s (wall, incl. first batch) | batches |")
            print("|---|---:|---:|---:|")
            for name, r in results.items():
                print(f"| {name} | {r['steady']:,.0f} | {r['wall']:,.0f} | {r['batches']:.0f} |")
            a, b = results["(a) strom -> count"], results["(b) rate-micro-batch -> count"]
            e = results["(e) prebuilt Arrow batches -> count"]
            print(f"\nread: strom / rate = {a['steady'] / b['steady']:.2f}x, strom / Python-data-source ceiling = "
                  f"{a['steady'] / e['steady']:.2f}x (steady)")
        finally:
            if spark is not None:
                stop_session(spark)
            if broker is not None:
                broker.stop()
                broker.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
