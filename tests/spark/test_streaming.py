"""Streaming reads: rate-limited micro-batches, exactly-once restart from the checkpoint, new partitions."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from strom.broker_process import BrokerProcess
from tests.spark.helpers import add_partitions, create_topic, produce

pytestmark = [pytest.mark.spark, pytest.mark.timeout(240)]


def stream(spark: Any, bootstrap: str, topic: str, **options: str) -> Any:
    r = (spark.readStream.format("strom").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
         .option("startingOffsets", "earliest"))
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def batch_sizes(query: Any) -> list[int]:
    return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"] > 0]


def test_three_micro_batches_with_max_offsets_per_trigger(spark: Any, broker: BrokerProcess, tmp_path: Path) -> None:
    create_topic(broker.bootstrap, "mb", 3)
    produce(broker.bootstrap, "mb", [(p, None, f"{p}-{i}".encode()) for p in range(3) for i in range(9)])
    t = time.monotonic()
    q = (stream(spark, broker.bootstrap, "mb", maxOffsetsPerTrigger="9")
         .selectExpr("partition", "offset").writeStream.format("memory").queryName("mb_out")
         .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(processingTime="0 seconds").start())
    try:
        q.processAllAvailable()
    finally:
        q.stop()
    assert batch_sizes(q) == [9, 9, 9]
    rows = spark.sql("select partition, offset from mb_out").collect()
    assert sorted((r.partition, r.offset) for r in rows) == [(p, o) for p in range(3) for o in range(9)]
    # each batch took three records from every partition (the limit is shared in proportion to lag)
    print(f"3 micro-batches in {time.monotonic() - t:.1f}s")


def run_available_now(spark: Any, df: Any, out: Path, ckpt: Path) -> Any:
    q = (df.selectExpr("partition", "offset", "cast(value as string) as value").writeStream.format("parquet")
         .option("path", str(out)).option("checkpointLocation", str(ckpt)).trigger(availableNow=True).start())
    assert q.awaitTermination(120), "availableNow query did not finish"
    return q


def test_restart_from_checkpoint_loses_and_repeats_nothing(spark: Any, broker: BrokerProcess, tmp_path: Path) -> None:
    create_topic(broker.bootstrap, "rs", 2)
    produce(broker.bootstrap, "rs", [(p, None, f"a{p}-{i}".encode()) for p in range(2) for i in range(10)])
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    q1 = run_available_now(spark, stream(spark, broker.bootstrap, "rs", maxOffsetsPerTrigger="8"), out, ckpt)
    assert batch_sizes(q1) == [8, 8, 4]
    # more data and a new partition while the query is down
    add_partitions(broker.bootstrap, "rs", 3)
    produce(broker.bootstrap, "rs", [(p, None, f"b{p}-{i}".encode()) for p in range(3) for i in range(5)])
    q2 = run_available_now(spark, stream(spark, broker.bootstrap, "rs", maxOffsetsPerTrigger="8"), out, ckpt)
    assert sum(batch_sizes(q2)) == 15
    rows = spark.read.parquet(str(out)).collect()
    keys = [(r.partition, r.offset) for r in rows]
    assert len(keys) == len(set(keys)) == 35
    assert sorted(keys) == sorted([(p, o) for p in range(2) for o in range(15)] + [(2, o) for o in range(5)])
    assert {r.value for r in rows if r.partition == 2} == {f"b2-{i}" for i in range(5)}
